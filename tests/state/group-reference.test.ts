/** The lone-member reference: which lab run trains what one member of a group would train alone. */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { DEFAULT_DILOCO, DEFAULT_GROUP_CONFIG, type GroupRunConfig } from '../../src/state/group/config';
import { loneReference, loneReferenceHint, lonePoints } from '../../src/state/group/reference';
import { newRun, type RunState } from '../../src/state/runs';
import { DEFAULT_RUN_CONFIG, type RunConfig } from '../../src/worker/protocol';

const GROUP: GroupRunConfig = { ...DEFAULT_GROUP_CONFIG, preset: 'micro', steps: 100, batch: 4, seq: 32 };

function labRun(id: string, patch: Partial<RunConfig>, steps = 3): RunState {
  const r = newRun(id, { ...DEFAULT_RUN_CONFIG, preset: 'micro', steps: 100, batch: 4, seq: 32, ...patch }, 0);
  const train = Array.from({ length: steps }, (_, i) => ({ step: i, loss: 4 - i / 10, lr: 1e-3, grad_norm: 1, elapsed_s: 0.5 * (i + 1) }));
  return { ...r, train };
}

describe('lone-member reference', () => {
  it('matches a lab run of the same model, batch per member, context and schedule', () => {
    const same = labRun('same', { seed: 7, evalEvery: 10 }); // seed and evaluation do not change what is compared
    expect(loneReference(GROUP, [same])?.id).toBe('same');
    // Every mode compares with the same lone member: the mode decides only the exchange.
    for (const mode of ['dp-fp32', 'tp-taco', 'diloco'] as const) {
      expect(loneReference({ ...GROUP, mode, diloco: mode === 'diloco' ? DEFAULT_DILOCO : undefined }, [same])?.id).toBe('same');
    }
    expect(loneReference(GROUP, [labRun('fp32', { scheme: SCHEME_PRESETS.fp32 })])?.id).toBe('fp32');
  });

  it('refuses a run that trains something else', () => {
    const others = [
      labRun('tiny', { preset: 'tiny' }),
      labRun('batch', { batch: 8 }),
      labRun('seq', { seq: 64 }),
      labRun('steps', { steps: 200 }), // another schedule (warm-up and decay over 200 steps)
      labRun('lr', { lr: 0.5 }),
      labRun('scheme', { scheme: SCHEME_PRESETS.agoq }),
      labRun('text', { dataset: 'my.txt' }),
      labRun('tokenizer', { tokenizer: { kind: 'bpe', vocabSize: 512, source: 'bpe:512' } }),
      labRun('custom', { model: { ...PRESETS.micro, hidden_size: 64 } }),
      labRun('no steps', {}, 0),
    ];
    expect(loneReference(GROUP, others)).toBeNull();
    expect(loneReferenceHint(GROUP)).toBe('train micro alone in the lab with batch 4, context 32, 100 steps, the default learning rate, the bundled text and the fp32 scheme to compare');
  });

  it('matches a custom model with the same shape and recipe, and picks the run with the most steps', () => {
    const model = { ...PRESETS.micro, hidden_size: 64, intermediate_size: 128 };
    const group = { ...GROUP, preset: 'tiny' as const, model };
    // A custom model keeps its preset's recipe: the same shape on micro's recipe is another schedule.
    expect(loneReference(group, [labRun('micro recipe', { model })])).toBeNull();
    const short = labRun('short', { preset: 'tiny', model }, 2);
    const long = labRun('long', { preset: 'tiny', model }, 5);
    const later = labRun('later', { preset: 'tiny', model }, 5);
    expect(loneReference(group, [short, long])?.id).toBe('long');
    expect(loneReference(group, [short, long, later])?.id).toBe('later');
    expect(loneReferenceHint(group)).toMatch(/^train the custom model custom 64×2 \(tiny's recipe\) alone/);
  });

  it("draws a reference's loss against its own training time", () => {
    const r = labRun('r', {}, 2);
    expect(lonePoints(r)).toEqual([{ elapsed_s: 0.5, loss: 4 }, { elapsed_s: 1, loss: 3.9 }]);
    expect(lonePoints({ ...r, train: [{ step: 0, loss: 4, lr: 1, grad_norm: 1 }] })).toEqual([]);
  });
});
