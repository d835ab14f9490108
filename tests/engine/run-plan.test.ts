/**
 * The resolved plan (model/run-plan.ts) against the scheme it resolves: the fields the model reads
 * instead of probing its buffers agree with the buffer list, for every preset, training or not.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { resolvePlan } from '../../src/engine/model/run-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { isFp32, layerScheme } from '../../src/engine/scheme/scheme';

describe('resolvePlan', () => {
  it.each(Object.keys(SCHEME_PRESETS))('%s: fake-quant copies, storage and wire formats follow the scheme', (name) => {
    const scheme = SCHEME_PRESETS[name];
    for (const training of [true, false]) {
      const p = resolvePlan(PRESETS.micro, 2, 16, { scheme, training });
      const keys = new Set(p.buffers.map((b) => b.key));
      expect(keys.has('wq'), 'wq').toBe(p.fakeQuant.weights);
      expect(keys.has('aq'), 'aq').toBe(p.fakeQuant.inputs);
      expect(keys.has('gq'), 'gq').toBe(p.fakeQuant.grads);
      expect(keys.has('grads'), 'fp32 grads').toBe(training && p.grads === null);
      expect(p.layers).toHaveLength(PRESETS.micro.num_hidden_layers);
      p.layers.forEach((lp, l) => {
        const ls = layerScheme(scheme, l);
        const c = ls.compute;
        expect(lp).toMatchObject({
          weights: ls.weights, gemmInputs: ls.gemm_inputs, gemmOutputGrads: ls.gemm_output_grads,
          compute: { forward: c.forward, dx: c.dx, dw: c.dw, dwBlock: c.dw_block, gradRounding: c.grad_rounding },
        });
      });
      // INT8 operand buffers exactly where some layer's GEMM is INT8 (dX and dW only with a backward).
      const rows = p.layers.some((l) => l.compute.forward === 'int8' || (training && l.compute.dx === 'int8'));
      const dw = training && p.layers.some((l) => l.compute.dw === 'int8');
      expect(p.int8).toEqual({ rows, dw });
      expect(['i8.a', 'i8.as', 'i8.w', 'i8.ws'].map((k) => keys.has(k)), 'INT8 row operands').toEqual([rows, rows, rows, rows]);
      expect(['i8.gt', 'i8.gts', 'i8.xt', 'i8.xts'].map((k) => keys.has(k)), 'INT8 dW operands').toEqual([dw, dw, dw, dw]);
      expect(p.fakeQuant.weights).toBe(p.layers.some((l) => !isFp32(l.weights)));
      expect(p.grads !== null).toBe(training && !isFp32(scheme.grads.storage));
      // Only training saves activations; every saved tensor's codes and scales are in the buffer list.
      p.saved.forEach((st, l) => {
        if (!training) expect(st).toEqual({});
        for (const key of Object.keys(st)) expect(keys.has(`L${l}.${key}.codes`) && keys.has(`L${l}.${key}.scales`), `L${l}.${key}`).toBe(true);
      });
      expect(p.wire.tp).toEqual(scheme.tp.degree > 1 ? scheme.tp : null);
      expect(p.wire.dp.format).toBe('fp32');
    }
  });
});
