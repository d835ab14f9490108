/**
 * The model's f16 attention backward over the stored dS (kernels/attention/f16: spec.ds): a micro `f16`
 * step (f32 twin, emulated f16 attention) whose backward stores dS in the model's dF1 scratch (passed
 * as dsScratch) and runs dq as a GEMM over it gives the gradients of the step that recomputes dq (Di from
 * fp32 dO instead of dO's f16 copy, and dq summed in another order: close, not bit for bit); the forward is the same.
 */
import { describe, expect, it } from 'vitest';
import { F16_ATTN_BWD_TOL } from '../../src/engine/kernels/attention/f16/checks';
import type { F16AttnBwdSpecs } from '../../src/engine/kernels/attention/f16/layouts';
import { LlamaGpu } from '../../src/engine/model/llama';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { attentionTestRuntime } from '../helpers/gpu';
import { f16TwinMicro } from '../helpers/model';

const rt = await attentionTestRuntime();
const { cfg, B, T, layout, params, tokens, DEV, SPEC } = f16TwinMicro(11, 31, 'staged');

async function step(backward: F16AttnBwdSpecs) {
  const model = new LlamaGpu(rt, resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS.f16, f16Device: DEV, f16Twin: true }), { f16Attention: { forward: SPEC, backward, emulate: true } });
  try {
    model.uploadParams(params);
    model.setBatch(tokens);
    rt.run(model.forward);
    rt.run(model.backward);
    // The flat fp32 gradients (f16: no gradient store), one slice per parameter.
    const flat = await rt.readF32(model.b('grads'));
    const grads = new Map(layout.views.map((v) => [v.name, flat.subarray(v.offset, v.offset + v.size)]));
    return { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads, bwd: model.backward.map((d) => d.label) };
  } finally {
    model.destroy();
  }
}

describe('f16 attention backward over the stored dS in the model (f32 twin)', () => {
  it('a micro f16 step: dS in dF1, dq from it; gradients as the recomputing backward\'s', async () => {
    const ref = await step({ dq: SPEC, dkdv: SPEC });
    const got = await step({ dq: { ...SPEC, BKV: 16, ds: true }, dkdv: { ...SPEC, split: true, ds: true } });
    expect(got.loss).toBe(ref.loss);
    // Each parameter's gradient within the f16 backward's tolerance of its largest magnitude (measured: at most
    // 4.7e-4, q_proj's; the two paths' Di differ by dO's f16 rounding, and dq sums in another order).
    expect(ref.grads.size).toBe(layout.views.length);
    for (const [k, want] of ref.grads) {
      const g = got.grads.get(k)!;
      const mag = want.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
      const err = g.reduce((m, x, i) => Math.max(m, Math.abs(x - want[i])), 0);
      expect(mag, k).toBeGreaterThan(0);
      expect(err / mag, k).toBeLessThan(F16_ATTN_BWD_TOL);
    }
    // Per layer: the Di pass, dk/dv storing dS and dq from it (every pair in one chunk of dF1), no recomputing dq.
    for (const l of [0, 1]) {
      expect(got.bwd.filter((x) => x.startsWith(`L${l}.attn.bwd.attn`))).toEqual([`L${l}.attn.bwd.attnBwdDi`, `L${l}.attn.bwd.attnBwdDkDvDsF16DH`, `L${l}.attn.bwd.attnBwdDqDsF16`]);
      expect(ref.bwd.filter((x) => x.startsWith(`L${l}.attn.bwd.attn`))).toEqual([`L${l}.attn.bwd.attnBwdDqF16D`, `L${l}.attn.bwd.attnBwdDkDvF16DH`]);
    }
  }, 120_000);
});
