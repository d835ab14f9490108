import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import {
  cadenceOf, DEFAULT_CHECKPOINT_EVERY, defaultRunSpec, RunSpecError, runSpecProblems, type RunSpec, trainOptionsOf, validateRunSpec,
} from '../../src/engine/run/spec';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../src/engine/train/options';

const problems = (raw: unknown) => runSpecProblems(raw);
const base = () => defaultRunSpec('micro');

describe('run spec: defaults', () => {
  it('takes the preset recipe and the cadence rules; its train options are the recipe\'s', () => {
    const s = base();
    expect(s.strategy).toEqual({ kind: 'single' });
    expect(s.data).toEqual({ source: 'tinyshakespeare' });
    expect(s.tokenizer).toEqual({ kind: 'char', source: 'char' });
    expect(s.cadence).toEqual({ evalEvery: 50, evalBatches: 20, checkpointEvery: DEFAULT_CHECKPOINT_EVERY, sampleEvery: 0, sampleLength: 0, sampleAtEnd: true, temperature: 0.8 });
    expect(s.model).toEqual(PRESETS.micro);
    expect(trainOptionsOf(s)).toEqual(defaultTrainOptions('micro'));
    const o = { steps: 7, batch: 3, seq: 64, lr: 1e-3, seed: 9, scheme: SCHEME_PRESETS.w8 };
    expect(trainOptionsOf(defaultRunSpec('tiny', { ...o, cadence: { evalEvery: 5, evalBatches: 2 } })))
      .toEqual(defaultTrainOptions('tiny', { ...o, evalEvery: 5, evalBatches: 2 }));
  });

  it('is a fixed point of the validator', () => {
    const s = defaultRunSpec('small', { strategy: { kind: 'diloco', innerSteps: 4, wire: 'int4' }, cadence: { sampleLength: 10, samplePrompt: 'x' } });
    expect(validateRunSpec(JSON.parse(JSON.stringify(s)))).toEqual(s);
  });
});

describe('run spec: the validator', () => {
  it('names the field of a bad value', () => {
    expect(problems({ ...base(), batch: 0 })).toEqual([expect.stringMatching(/^batch: Too small/)]);
    expect(problems({ ...base(), cadence: { ...base().cadence, evalEvery: -1 } })).toEqual([expect.stringMatching(/^cadence\.evalEvery: Too small/)]);
    expect(() => validateRunSpec({ ...base(), seed: 'x' })).toThrow(RunSpecError);
  });

  it('names the nearest valid key of an unknown one, at any depth and in the strategy the kind picks', () => {
    const s = base();
    const { hidden_size: hs, ...model } = s.model;
    expect(problems({ ...s, model: { ...model, hiden_size: hs } })[0]).toMatch(/^model: unknown key 'hiden_size' \(did you mean 'hidden_size'\?\)/);
    expect(problems({ ...s, cadance: s.cadence })).toContainEqual(expect.stringMatching(/^spec: unknown key 'cadance' \(did you mean 'cadence'\?\)/));
    expect(problems({ ...s, cadence: { ...s.cadence, checkpointEvry: 3 } })[0]).toMatch(/^cadence: unknown key 'checkpointEvry' \(did you mean 'checkpointEvery'\?\)/);
    expect(problems({ ...s, strategy: { kind: 'diloco', innerSteps: 4, wire: 'int8', fragmnts: 2 } })[0])
      .toMatch(/^strategy: unknown key 'fragmnts' \(did you mean 'fragments'\?\)/);
    expect(problems({ ...s, optimizer: { ...s.optimizer, learning_rate: 1 } })[0]).toMatch(/^optimizer: unknown key 'learning_rate'; expected one of lr, /);
  });

  it('accepts each strategy, with the scheme it implies', () => {
    const dp = defaultRunSpec('micro', { strategy: { kind: 'dp', wire: 'int8' } });
    expect(dp.scheme?.name).toBe('dp-int8');
    expect(defaultRunSpec('micro', { strategy: { kind: 'dp', wire: 'fp32' } }).scheme?.grads.wire.format).toBe('fp32');
    const diloco = defaultRunSpec('micro', { strategy: { kind: 'diloco', innerSteps: 4, wire: 'int8', fragments: 2, overlap: 1, outerLr: 0.5, outerMomentum: 0.8 } });
    expect(diloco.strategy).toMatchObject({ kind: 'diloco', fragments: 2 });
    const tp = defaultRunSpec('micro', { strategy: { kind: 'tp', size: 2, codec: 'taco' } });
    expect(tp.scheme?.tp).toEqual({ degree: 2, codec: 'taco', group: 128 });
    expect(problems({ ...base(), strategy: { kind: 'ring' } })[0]).toMatch(/^strategy/);
    expect(problems({ ...base(), strategy: { kind: 'tp', size: 1, codec: 'taco' } })[0]).toMatch(/^strategy\.size: Too small/);
  });

  it('checks what fields say together', () => {
    const s = base();
    const cross: [Partial<RunSpec>, RegExp][] = [
      [{ seq: 64 }, /^seq: 64 exceeds model\.max_position_embeddings 32/],
      [{ optimizer: { ...s.optimizer, min_lr: 1 } }, /^optimizer\.min_lr: 1 > lr/],
      [{ optimizer: { ...s.optimizer, warmup_steps: 500 } }, /^optimizer\.warmup_steps: 500 exceeds total_steps 100/],
      [{ tokenizer: { kind: 'bpe', source: 'bpe:300', vocabSize: 300 } }, /^tokenizer\.vocabSize: 300 tokens do not fit model\.vocab_size 65/],
      [{ strategy: { kind: 'dp', wire: 'int8' }, scheme: SCHEME_PRESETS.fp32 }, /^strategy\.wire: int8, but scheme 'fp32' sends gradients as fp32/],
      [{ strategy: { kind: 'tp', size: 4, codec: 'taco' }, scheme: SCHEME_PRESETS['taco-tp2'] }, /^strategy\.size: 4 members, but the scheme's tp\.degree is 2/],
      [{ strategy: { kind: 'tp', size: 2, codec: 'fp32' }, scheme: SCHEME_PRESETS['taco-tp2'] }, /^strategy\.codec: fp32, but the scheme's tp\.codec is taco/],
      [{ strategy: { kind: 'dp', wire: 'fp32' }, scheme: SCHEME_PRESETS['taco-tp2'] }, /^strategy\.kind: dp replicates the model, but scheme 'taco-tp2' splits it/],
      [{ strategy: { kind: 'diloco', innerSteps: 5, wire: 'int8', fragments: 2 } }, /^strategy\.innerSteps: H = 5 is not a multiple of the 2 fragments/],
      [{ strategy: { kind: 'diloco', innerSteps: 6, wire: 'int8', fragments: 3 } }, /^strategy\.fragments: 3 fragments for a model of 2 layers/],
      [{ strategy: { kind: 'diloco', innerSteps: 6, wire: 'int8', overlap: 1 } }, /^strategy\.overlap: needs streaming/],
      [{ strategy: { kind: 'diloco', innerSteps: 4, wire: 'int8', fragments: 2, overlap: 2 } }, /^strategy\.overlap: 2 must be below H\/F = 2/],
    ];
    for (const [patch, want] of cross) expect(problems({ ...s, ...patch }), String(want)).toEqual([expect.stringMatching(want)]);
    // A single device may simulate a TP scheme.
    expect(problems({ ...s, scheme: SCHEME_PRESETS['taco-tp2'] })).toEqual([]);
  });
});

describe('run spec: the cadence', () => {
  it('is the spec\'s fields, one definition for every entry point', () => {
    const s = defaultRunSpec('micro', { steps: 30, cadence: { evalEvery: 10, checkpointEvery: 5 } });
    expect(cadenceOf(s)).toEqual({ steps: 30, evalEvery: 10, checkpointEvery: 5, checkpointAtEnd: true, resumed: false });
    expect(cadenceOf(s, { resumed: true }).resumed).toBe(true);
    const sampled = defaultRunSpec('micro', { seed: 4, cadence: { sampleEvery: 3, sampleLength: 20 } });
    const c = cadenceOf(sampled, { prompt: 'P' });
    expect(c.sample).toMatchObject({ every: 3, length: 20, atEnd: true, prompt: 'P', temperature: 0.8 });
    expect(c.sample!.seed(6)).toBe(10);
    expect(cadenceOf(defaultRunSpec('micro', { cadence: { sampleLength: 5, samplePrompt: 'Q' } }), { prompt: 'P' }).sample!.prompt).toBe('Q');
  });
});
