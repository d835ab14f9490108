/**
 * The INT8 dW GEMMs over all tokens split over K in the training step (src/engine/model/int8-gemms.ts
 * dw, into the dead backward scratch the fp32 dW uses): integer partial sums are exact, so a step
 * with split dW has the loss and gradients of the unsplit step bit for bit. micro at 4 × 32 tokens:
 * long enough a K for the choice to split on SwiftShader's dot4 path.
 */
import { describe, expect, it } from 'vitest';
import { setI8SplitKMax } from '../../src/engine/kernels/qgemm/splitk';
import { PRESETS } from '../../src/engine/model/config';
import { gemmSplitSummary } from '../../src/engine/model/int8-gemms';
import { initParams, paramLayout } from '../../src/engine/model/params';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';
import { buildModel } from '../helpers/model';

const cfg = { ...PRESETS.micro };
const [B, T] = [4, 32];
const params = initParams(cfg, paramLayout(cfg), 3);
const rng = new Rng(11);
const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));

async function step(scheme: Scheme, maxSplit: number | undefined) {
  const rt = await testRuntime();
  setI8SplitKMax(rt, maxSplit);
  try {
    const model = buildModel(rt, cfg, B, T, { scheme });
    model.uploadParams(params);
    model.setBatch(tokens);
    model.setStepSeed(7);
    rt.run([...model.forward, ...model.backward]);
    const out = {
      loss: (await rt.readF32(model.b('loss'), 0, 1))[0],
      grads: Array.from(new Uint32Array((await model.readFlat('grads')).buffer)),
      splits: new Map(model.gemmSplits()),
      paths: model.computePaths(),
    };
    model.destroy();
    return out;
  } finally {
    setI8SplitKMax(rt, undefined);
  }
}

describe('INT8 dW split over K in a training step', () => {
  const sr = parseScheme({ name: 'int8-sr-all', layer: { compute: { forward: 'int8', dx: 'int8', dw: 'int8', dw_block: 'all', grad_rounding: 'stochastic' } } });
  // agoq-int8's quantized activation storage (live copies in the backward scratch) with flat fp32 gradients to compare.
  const agoq = parseScheme({ ...SCHEME_PRESETS['agoq-int8'], grads: { storage: { format: 'fp32' }, wire: { format: 'fp32' } } });
  it.each([['int8', SCHEME_PRESETS.int8], ['int8 + stochastic rounding', sr], ['agoq-int8 (fp32 gradients)', agoq]] as const)('%s: loss and gradients bit for bit as without the split', async (_, scheme) => {
    const one = await step(scheme, 1);
    const split = await step(scheme, undefined);
    expect(one.splits.size).toBe(0);
    // Every layer's attention and MLP dW GEMMs split (dF1 and dq hold their partials).
    for (let l = 0; l < cfg.num_hidden_layers; l++) {
      for (const g of ['q', 'k', 'v', 'o', 'gate', 'up', 'down']) expect(split.splits.get(`L${l}.${g}.dw`), `L${l}.${g}.dw`).toBeGreaterThan(1);
    }
    expect(gemmSplitSummary(one.splits)).toBe('none');
    // 4 K steps of dot4: the attention's partials fit 4 slices in dF1, the MLP's 2 in dq.
    expect(gemmSplitSummary(split.splits)).toBe('down.dw 2, gate.dw 2, up.dw 2, o.dw 4, q.dw 4, k.dw 4, v.dw 4');
    expect(split.loss).toBe(one.loss);
    expect(split.grads).toEqual(one.grads);
    // The path report is the same: split-K is recorded per GEMM, beside it.
    expect(split.paths).toEqual(one.paths);
    expect(split.paths[0].dw).toBe('int8-dot4');
  }, 120_000);
});
