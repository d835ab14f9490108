/**
 * The stored-dS attention backward in the training step (micro, GQA): its dS lives in dF1, so the
 * step allocates nothing more, and it gives the recompute path's loss and gradients (dq differs only
 * in rounding: same dS maths, same key order) under fp32, AGoQ storage and INT8 compute; with B 8
 * the batch's dS exceeds dF1 and goes in chunks.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { dsChunks } from '../../src/engine/kernels/attention/ds';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
const params = initParams(cfg, paramLayout(cfg), 3);
const G = cfg.num_attention_heads / cfg.num_key_value_heads;
/** The dS chunks per layer: dF1 holds [B·T, F] fp32. */
const chunksOf = (B: number, T: number) => dsChunks(B, cfg.num_key_value_heads, G, T, B * T * cfg.intermediate_size * 4).length;

async function step(scheme: Scheme, B: number, T: number, attnDqPath: 'stored' | 'recompute') {
  const rt = await testRuntime();
  const rng = new Rng(9);
  const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
  const model = buildModel(rt, cfg, B, T, { scheme, attnDqPath });
  model.uploadParams(params);
  model.setBatch(tokens);
  model.setStepSeed(0);
  rt.run([...model.forward, ...model.backward]);
  const out = {
    loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
    grads: await model.readFlat('grads'),
    labels: model.backward.map((d) => d.label),
    planned: model.plan.buffers.reduce((s, b) => s + b.bytes, 0),
  };
  model.destroy();
  return out;
}

// AGoQ's INT4 activation storage (q, k, v, o stay fp32; xMid, h1 and the MLP's live copies alias
// scratch) with fp32 gradients, so that they can be read and compared.
const agoq = parseScheme({ ...SCHEME_PRESETS.agoq, name: 'agoq-fp32-grads', grads: { storage: { format: 'fp32' }, wire: { format: 'fp32' } } });

describe('stored-dS attention backward in the training step', () => {
  const cases: [string, Scheme, number, number][] = [
    ['fp32, dS in one chunk', SCHEME_PRESETS.fp32, 2, 16],
    ['fp32, dS in chunks', SCHEME_PRESETS.fp32, 8, 32],
    ['agoq storage', agoq, 2, 32],
    ['int8 compute', SCHEME_PRESETS.int8, 2, 32],
  ];
  it('chunks as the cases say', () => {
    expect(chunksOf(2, 16)).toBe(1);
    expect(chunksOf(8, 32)).toBeGreaterThan(1);
  });
  for (const [name, scheme, B, T] of cases) {
    it(`${name}: the recompute path's loss and gradients`, async () => {
      const old = await step(scheme, B, T, 'recompute');
      const stored = await step(scheme, B, T, 'stored');
      expect(old.labels.some((l) => l.endsWith('attnBwdDq'))).toBe(true);
      expect(old.labels.some((l) => l.endsWith('attnDqDs'))).toBe(false);
      expect(stored.labels.some((l) => l.endsWith('attnBwdDq'))).toBe(false);
      expect(stored.labels.filter((l) => l.endsWith('attnDqDs')).length).toBe(cfg.num_hidden_layers * chunksOf(B, T));
      expect(stored.planned).toBe(old.planned);
      expect(Math.abs(stored.loss - old.loss)).toBeLessThanOrEqual(1e-6 * Math.abs(old.loss));
      expect(stored.grads.some((v) => v !== 0)).toBe(true);
      // INT8 dX GEMMs quantize the gradients below dq per token: a rounding flip moves a value by a step.
      const tol = scheme.name === 'int8' ? { atol: 1e-4, rtol: 1e-2 } : { atol: 1e-6, rtol: 1e-4 };
      expectClose(stored.grads, old.grads, { ...tol, label: `${name} grads` });
    }, 120_000);
  }

  it('takes the stored path by default where dF1 holds a pair\'s dS', async () => {
    const rt = await testRuntime();
    const model = buildModel(rt, cfg, 2, 32, {});
    expect(model.backward.filter((d) => d.label.endsWith('attnDqDs')).length).toBe(cfg.num_hidden_layers * chunksOf(2, 32));
    model.destroy();
  });
});
