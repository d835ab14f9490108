/**
 * The per-layer quantization-error probe (src/engine/train/probe.ts) on micro, against errors
 * computed on the CPU from the same tensors (the quantizer's TS reference), and its buffers in the
 * memory plan.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { qdqRef } from '../../src/engine/kernels/qdq/qdq.ref';
import { LINEAR } from '../../src/engine/model/plan';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { dequantizeRef, quantizeRef } from '../../src/engine/quant/quantizer';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { layerScheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { probeSites, quantProbeBufferPlan, type QuantErrorRecord } from '../../src/engine/train/probe';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { planMemory } from '../../src/engine/plan/train-plan';
import { Trainer } from '../../src/engine/train/trainer';
import { testRuntime } from '../helpers/gpu';

const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 100_000);
const tok = CharTokenizer.fromText(text);
const opts = (scheme?: keyof typeof SCHEME_PRESETS) =>
  defaultTrainOptions('micro', { steps: 4, model: { vocab_size: tok.vocabSize }, scheme: scheme ? SCHEME_PRESETS[scheme] : undefined });

/** ‖x − x̂‖ / ‖x‖ over several tensors, in float64. */
function relErr(pairs: [Float32Array, Float32Array][]): number {
  let e = 0;
  let r = 0;
  for (const [x, xh] of pairs) {
    for (let i = 0; i < x.length; i++) {
      e += (x[i] - xh[i]) ** 2;
      r += x[i] ** 2;
    }
  }
  return Math.sqrt(e / r);
}

function byKey(records: QuantErrorRecord[]): Map<string, number> {
  return new Map(records.map((r) => [`${r.layer}:${r.kind}`, r.rel_err]));
}

describe('quantization-error probe', () => {
  it('AGoQ micro: the error of every stored activation, per layer and kind, equals the CPU quantizer\'s; plan = allocation', async () => {
    const rt = await testRuntime();
    const agoq = await Trainer.create(rt, opts('agoq'), text, { tokenizer: tok });
    // The forward pass is exact under AGoQ (storage only affects backward), so an fp32 twin with the
    // same init computes the very tensors AGoQ stores, and keeps them in fp32 buffers.
    const fp32 = await Trainer.create(rt, opts(), text, { tokenizer: tok });
    try {
      expect(agoq.memory()).toEqual(planMemory(agoq.opts));
      expect(agoq.plan.buffers.some((b) => b.key === 'probe.partials')).toBe(true);
      const got = byKey(await agoq.quantErrors());
      fp32.model.setBatch(fp32.data.valBatches(1, 4, 32)[0]);
      rt.run(fp32.model.forward);
      const spec = SCHEME_PRESETS.agoq.layer.saved.swiglu!;
      const read = async (key: string) => {
        const x = await rt.readF32(fp32.model.b(key));
        return [x, dequantizeRef(quantizeRef(x, spec.format as 'int4', { kind: 'group', size: spec.group }))] as [Float32Array, Float32Array];
      };
      const expected: Record<string, string[]> = {
        '0:norm_input': ['L0.xIn', 'L0.xMid'], '0:qkv_input': ['L0.h1'], '0:mlp_input': ['L0.h2'], '0:swiglu': ['L0.gate', 'L0.up'], '0:down_input': ['L0.act'],
        '1:norm_input': ['L1.xIn', 'L1.xMid', 'L2.xFinal'], '1:qkv_input': ['L1.h1'], '1:mlp_input': ['L1.h2'], '1:swiglu': ['L1.gate', 'L1.up'], '1:down_input': ['L1.act'],
        '1:head_input': ['L2.hF'],
      };
      expect([...got.keys()].sort()).toEqual(Object.keys(expected).sort());
      const errs: number[] = [];
      for (const [k, keys] of Object.entries(expected)) {
        const want = relErr(await Promise.all(keys.map(read)));
        errs.push(got.get(k)!);
        expect(Math.abs(got.get(k)! - want) / want, k).toBeLessThan(1e-3);
      }
      // INT4 with groups of 128 loses a few percent of the signal, not more.
      expect(Math.min(...errs)).toBeGreaterThan(0.01);
      expect(Math.max(...errs)).toBeLessThan(0.3);
      console.log(`micro AGoQ at init, ‖x − x̂‖/‖x‖ per layer and kind: ${[...got].map(([k, v]) => `${k} ${v.toFixed(4)}`).join(', ')}`);
      // A step later the probe measures again (the same buffers, new values).
      await agoq.trainStep();
      const again = await agoq.quantErrors();
      expect(again.length).toBe(got.size);
      expect(again.some((r) => r.rel_err !== got.get(`${r.layer}:${r.kind}`))).toBe(true);
    } finally {
      agoq.destroy();
      fp32.destroy();
    }
  });

  it('study W8A8G8: the weights and GEMM inputs error per layer equals the CPU quantizer\'s', async () => {
    const rt = await testRuntime();
    const t = await Trainer.create(rt, opts('w8a8g8'), text, { tokenizer: tok });
    try {
      expect(t.memory()).toEqual(planMemory(t.opts));
      const got = byKey(await t.quantErrors());
      expect([...got.keys()].sort()).toEqual(['0:gemm_inputs', '0:weights', '1:gemm_inputs', '1:weights']);
      const params = await t.parameters();
      const m = t.model;
      for (let l = 0; l < 2; l++) {
        const ls = layerScheme(t.opts.scheme!, l);
        const w = LINEAR.map((name) => {
          const x = params.get(`model.layers.${l}.${name}.weight`)!;
          const cols = name.endsWith('down_proj') ? 64 : 32;
          return [x, qdqRef(x, x.length, ls.weights, cols)] as [Float32Array, Float32Array];
        });
        const wantW = relErr(w);
        expect(Math.abs(got.get(`${l}:weights`)! - wantW) / wantW).toBeLessThan(1e-3);
        // The probe's forward leaves the GEMM inputs (saved fp32 under this scheme) in place.
        const inputs = await Promise.all([['h1', 32], ['o', 32], ['h2', 32], ['act', 64]].map(async ([key, width]) => {
          const x = await rt.readF32(m.b(`L${l}.${key}`));
          return [x, qdqRef(x, x.length, ls.gemm_inputs, width as number)] as [Float32Array, Float32Array];
        }));
        const wantA = relErr(inputs);
        expect(Math.abs(got.get(`${l}:gemm_inputs`)! - wantA) / wantA).toBeLessThan(1e-3);
        expect(wantW).toBeGreaterThan(1e-3);
        expect(wantA).toBeGreaterThan(1e-3);
      }
    } finally {
      t.destroy();
    }
  });

  it('nothing to probe: fp32, TACO and the Adam-moment presets have no probe buffers and no records', async () => {
    for (const s of [undefined, 'taco-tp2', 'm8', 'g8'] as const) {
      const o = opts(s);
      const plan = resolvePlan(o.model, o.batch, o.seq, { scheme: o.scheme });
      expect(probeSites(plan), String(s)).toEqual([]);
      expect(quantProbeBufferPlan(plan)).toEqual([]);
    }
    const rt = await testRuntime();
    const t = await Trainer.create(rt, opts(), text, { tokenizer: tok });
    try {
      expect(await t.quantErrors()).toEqual([]);
      expect(t.memory()).toEqual(planMemory(t.opts));
    } finally {
      t.destroy();
    }
  });
});
