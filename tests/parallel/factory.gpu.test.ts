import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parseScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { DiLoCo } from '../../src/parallel/diloco/diloco';
import { DataParallel } from '../../src/parallel/dp/dp';
import { createParallelTrainer, memberInit } from '../../src/parallel/factory';
import { TpTrainer } from '../../src/parallel/tp/trainer';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { testRuntime } from '../helpers/gpu';
import { makeGroups } from '../peers/helpers';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 50_000);
const tokenizer = CharTokenizer.fromText(text);
const opts = defaultTrainOptions('micro', { steps: 4, warmup: 1, batch: 2, seq: 16, model: { vocab_size: tokenizer.vocabSize } });

describe('the parallel factory: one call per strategy (src/parallel/factory.ts)', () => {
  it('single builds a Trainer; dp and diloco wrap it as DataParallel and DiLoCo members; tp builds a rank over its group', async () => {
    const rt = await testRuntime();
    const trainer = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts, text, init: { tokenizer } });
    expect(trainer).toBeInstanceOf(Trainer);
    expect(trainer.stepIndex).toBe(0);

    const { transports } = LoopbackHub.group(2);
    const dp = await createParallelTrainer({ strategy: { kind: 'dp', wire: 'fp32' }, trainer, transport: transports[0], options: { run: 'factory' } });
    expect(dp).toBeInstanceOf(DataParallel);
    expect(dp.trainer).toBe(trainer);
    dp.stop('done');
    // The gradient wire format is the scheme's: a strategy naming another is refused.
    await expect(createParallelTrainer({ strategy: { kind: 'dp', wire: 'int8' }, trainer, transport: transports[0], options: { run: 'x' } }))
      .rejects.toThrow(/strategy dp sends gradients as int8, but scheme .* as fp32/);
    const strategy = { kind: 'diloco', innerSteps: 4, wire: 'int4', fragments: 2 } as const;
    await expect(createParallelTrainer({ strategy, trainer, transport: transports[1], options: { run: 'x' } })).rejects.toThrow(/not built for DiLoCo/);
    const member = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts, text, init: { tokenizer, ...memberInit(strategy) } });
    expect(member.plan.wire.diloco).toBe('int4');
    const diloco = await createParallelTrainer({ strategy, trainer: member, transport: transports[1], options: { run: 'factory' } });
    expect(diloco).toBeInstanceOf(DiLoCo);
    expect((diloco as DiLoCo).config).toMatchObject({ innerSteps: 4, wire: 'int4', fragments: 2, outerLr: 0.7 });
    diloco.stop('done');
    diloco.destroy();
    member.destroy();
    // A member wraps a trainer; a trainer of its own is built from options.
    await expect(createParallelTrainer({ strategy: { kind: 'single' }, trainer, transport: transports[0], options: { run: 'x' } })).rejects.toThrow(/built from options/);
    trainer.destroy();

    const { groups } = makeGroups(2, { timeoutMs: 600_000 });
    const scheme = parseScheme({ name: 'tp2-fp32', tp: { degree: 2, codec: 'fp32', group: 128 } });
    const tpOpts = { ...opts, scheme };
    const ranks = await Promise.all(groups.map((group) => createParallelTrainer({ strategy: { kind: 'tp', size: 2, codec: 'fp32' }, rt, opts: tpOpts, text, init: { tokenizer }, group })));
    for (const [r, rank] of ranks.entries()) {
      expect(rank).toBeInstanceOf(TpTrainer);
      expect(rank.group.rank).toBe(r);
      rank.destroy();
    }
    await expect(createParallelTrainer({ strategy: { kind: 'tp', size: 3, codec: 'fp32' }, rt, opts: tpOpts, text, group: groups[0] })).rejects.toThrow(/tp over 3 members, but the group has 2/);
  }, 900_000);
});
