// The INT8 transposed quantizers' forms as tuner jobs on the test device (tune/i8-quant.ts): the forms
// that build different code for a block size, each checked bit for bit against the reference, timed,
// recorded; a call of that shape then builds the tuned form and says so.
import { describe, expect, it } from 'vitest';
import { i8QuantKey, quantizeColumnsI8, TQ_VARIANTS, tqVariantFor } from '../../../src/engine/kernels/qgemm/block';
import { TuneCache, tuneJobs } from '../../../src/engine/tune';
import { i8QuantCandidates, prepareI8Quant } from '../../../src/engine/tune/i8-quant';
import type { I8QuantJob } from '../../../src/engine/tune/jobs';
import { clearTuned, madeChoices, resetChoices } from '../../../src/engine/tune/store';
import { testRuntime } from '../../helpers/gpu';

const rt = await testRuntime();
const job = (R: number, CN: number, G: number | 'all', rounding: I8QuantJob['rounding'] = 'nearest'): I8QuantJob =>
  ({ family: 'i8quant', key: i8QuantKey(R, CN, G), label: `quantizer ${R}x${CN}/${G}`, shape: { R, CN, G }, rounding });

describe('INT8 quantizer forms in the tuner', () => {
  it('offers the forms that differ for the block size, the current one first', () => {
    clearTuned(rt.device);
    expect(i8QuantCandidates(rt, job(256, 64, 'all'))).toEqual(['regs', 'direct1', 'direct4', 'staged1', 'staged4']);
    expect(i8QuantCandidates(rt, job(256, 60, 'all'))).toEqual(['regs', 'direct1', 'staged1', 'staged4']); // CN % 8: no register encode, regs = direct4
    expect(i8QuantCandidates(rt, job(256, 64, 32))).toEqual(['regs', 'direct1', 'staged1', 'staged4']); // blocks: no register encode
    expect(i8QuantCandidates(rt, job(1024, 64, 512))).toEqual(['regs', 'direct1']); // blocks over 256 rows: nothing staged
  });

  it('checks each form against the reference in both roundings, times it, and a call of the shape then builds the tuned form', async () => {
    clearTuned(rt.device);
    const j = job(256, 64, 'all', 'stochastic');
    const p = prepareI8Quant(rt, j, { gemmInner: 2 });
    try {
      for (const c of p.candidates) expect(await c.check()).toBeNull();
      const built = await p.candidates[1].build();
      expect(built.inner).toBe(2);
      expect(built.dispatches).toHaveLength(4); // absmax and encode, twice
      rt.run(built.dispatches);
      await rt.device.queue.onSubmittedWorkDone();
      built.free();
    } finally {
      p.free();
    }
    const cache = new TuneCache();
    const out = await tuneJobs(rt, [j], cache, { budgetS: 30, rounds: 2, reps: 1, settleMs: 0, gemmInner: 1 });
    expect(out.tuned.map((t) => t.key)).toEqual([j.key]);
    const pick = out.tuned[0].pick;
    expect(Object.keys(TQ_VARIANTS)).toContain(pick);
    expect(cache.current(out.adapter, 'i8quant')[j.key]?.picks).toEqual([pick]);
    resetChoices(rt.device);
    expect(tqVariantFor(rt, j.key)).toEqual({ name: pick, variant: TQ_VARIANTS[pick] });
    const b = (n: number) => rt.createBuffer('workspace', 'tq', n);
    const bufs = [b(256 * 64 * 4), b(256 * 64), b(64 * 4), b(64 * 4)];
    quantizeColumnsI8(rt, { label: 'q', x: bufs[0], R: 256, CN: 64, codes: bufs[1], scales: bufs[2], amax: bufs[3] });
    bufs.forEach((x) => rt.mem.free(x));
    expect(madeChoices(rt.device)).toContainEqual({ family: 'i8quant', key: j.key, source: 'tuned' });
    clearTuned(rt.device);
  }, 120_000);
});
