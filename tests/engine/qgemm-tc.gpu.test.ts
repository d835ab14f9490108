/**
 * The tensor-core INT8 GEMM path (src/engine/kernels/qgemm/tc.ts). SwiftShader has no subgroup
 * matrices, so what runs here: the exact reference the device check relies on (it must equal the
 * dot4 kernel bit for bit, or the check would reject a correct tensor-core kernel or accept a wrong
 * one), the layout validation, the generated code's shape, and the fallback when the feature is absent.
 * The tensor-core kernel itself is checked on the GPU by enableI8TensorCores (bench/i8tc-tune.ts).
 */
import { describe, expect, it } from 'vitest';
import { qgemmI8 } from '../../src/engine/kernels/qgemm/qgemm';
import { qgemmI8ExactRef } from '../../src/engine/kernels/qgemm/qgemm.ref';
import {
  enableI8TensorCores, i8TcProbeOrder, i8TcSpecError, i8TcChoiceFor, i8TcSplitOk, i8TensorCoreSpec, qgemmI8TcCode, tcBlockM, tcBlockN, type I8TcSpec,
} from '../../src/engine/kernels/qgemm/tc';
import { I8_TC_LAYOUTS, MEASURED_I8TC_LAYOUTS } from '../../src/engine/kernels/qgemm/tc-tables';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

const CFG = { componentType: 'i8', resultComponentType: 'i32', M: 16, N: 16, K: 32 } as const;
const spec = (o: Partial<I8TcSpec> = {}): I8TcSpec => ({ cfg: CFG, syntax: 'bool', unitDiv: 1, sgSize: 32, ...I8_TC_LAYOUTS[0], ...o });

describe('INT8 tensor-core GEMM', () => {
  it('the exact reference equals the dot4I8Packed kernel bit for bit', async () => {
    const rt = await testRuntime();
    const [M, N, K] = [9, 13, 48];
    const rng = new Rng(5);
    const x = Int8Array.from({ length: M * K }, () => Math.floor(rng.next() * 256) - 128);
    const w = Int8Array.from({ length: N * K }, () => Math.floor(rng.next() * 256) - 128);
    const sx = Float32Array.from({ length: M }, () => 0.001 + rng.next() * 0.01);
    const sw = Float32Array.from({ length: N }, () => 0.001 + rng.next() * 0.01);
    const up = (d: Uint32Array | Float32Array) => rt.upload('workspace', 'tc', d);
    const c = up(new Float32Array(M * N));
    rt.run([qgemmI8(rt, {
      label: 'tc.ref', xq: up(new Uint32Array(x.buffer)), sx: up(sx), wq: up(new Uint32Array(w.buffer)), sw: up(sw), c, M, N, K,
    })]);
    const got = new Float32Array(await rt.read(c, 0, M * N * 4));
    const want = qgemmI8ExactRef(x, sx, w, sw, M, N, K);
    expect(Array.from(got)).toEqual(Array.from(want));
    // And it is not a tautology: a float64 sum of the dequantized products rounds differently somewhere.
    let differs = 0;
    for (let m = 0; m < M; m++) {
      for (let n = 0; n < N; n++) {
        let s = 0;
        for (let k = 0; k < K; k++) s += x[m * K + k] * sx[m] * (w[n * K + k] * sw[n]);
        if (Math.fround(s) !== want[m * N + n]) differs++;
      }
    }
    expect(differs).toBeGreaterThan(0);
  });

  it('validates layouts: vec4 staging per thread, workgroup memory, BK', () => {
    for (const l of I8_TC_LAYOUTS) expect(i8TcSpecError(spec(l))).toBeNull();
    expect(i8TcSpecError(spec({ BK: 48 }))).toMatch(/multiple of 16 and of K/);
    expect(i8TcSpecError(spec({ PAD: 8 }))).toMatch(/PAD/);
    expect(i8TcSpecError(spec({ tilesM: 8, tilesN: 8, sgM: 4, sgN: 4, BK: 128 }))).toMatch(/workgroup memory|threads/);
    expect(i8TcSpecError(spec({ sgM: 1, sgN: 1, tilesM: 1, tilesN: 1, BK: 32, sgSize: 64 }))).toMatch(/vec4s per thread/);
  });

  it('generates one load per tile and K step, and a masked, scaled epilogue', () => {
    const s = spec({ tilesM: 4, tilesN: 2, sgM: 2, sgN: 4, BK: 64, PAD: 16 });
    const code = qgemmI8TcCode(s);
    const steps = s.BK / CFG.K;
    expect(code.match(/subgroupMatrixMultiplyAccumulate/g)).toHaveLength(s.tilesM * s.tilesN * steps);
    expect(code.match(/subgroupMatrixLoad<LT>/g)).toHaveLength(s.tilesM * steps);
    expect(code.match(/subgroupMatrixLoad<RT>\([^;]*true/g)).toHaveLength(s.tilesN * steps); // Wᵀ: column-major
    expect(code).toContain('if (row < P.M && col < P.N) { C[row * P.N + col] = f32(');
    expect(code).toContain(`@workgroup_size(${32 * s.sgM * s.sgN})`);
    expect(tcBlockM(s)).toBe(128);
    expect(tcBlockN(s)).toBe(128);
    // Several subgroups: per-subgroup offsets, which WGSL's uniformity analysis cannot prove uniform.
    expect(code).toContain('diagnostic(off, chromium.subgroup_matrix_uniformity)');
    const single = qgemmI8TcCode(spec({ tilesM: 4, tilesN: 4, sgM: 1, sgN: 1 }));
    expect(single).not.toContain('diagnostic(off');
    expect(single).toContain('let am = 0u;');
    const t = qgemmI8TcCode(spec({ syntax: 'template', unitDiv: 4 }));
    expect(t).toContain('subgroupMatrixLoad<RT, col_major>');
    expect(t).toMatch(/\/ 4u/);
  });

  it('the accumulating epilogue loads each strip\'s C into registers before storing its tiles', () => {
    const s = spec({ tilesM: 2, tilesN: 4, sgM: 2, sgN: 2, BK: 64, PAD: 16, EPI: 2 });
    const acc = qgemmI8TcCode(s, true);
    const per = (CFG.M * 2 * CFG.N) / 32; // elements per lane of a strip of EPI = 2 tiles
    const strips = s.tilesM * (s.tilesN / 2);
    expect(acc).toContain(`var pc: array<f32, ${per}>;`);
    expect(acc.match(/pc\[\d+\] = select\(0\.0, C\[/g)).toHaveLength(per * strips);
    expect(acc.match(/C\[row \* P\.N \+ col\] = pc\[\d+\] \+ f32\(/g)).toHaveLength(per * strips);
    // Each strip's loads come before its tile stores.
    const firstLoad = acc.indexOf('pc[0] = select');
    expect(firstLoad).toBeGreaterThan(0);
    expect(firstLoad).toBeLessThan(acc.indexOf('subgroupMatrixStore'));
    expect(qgemmI8TcCode(s)).not.toContain('var pc');
  });

  it('probes every spelling with its first valid layout before any spelling\'s other layouts', () => {
    const cfgs = [CFG, { ...CFG, N: 8 }];
    const layouts = [I8_TC_LAYOUTS[0], I8_TC_LAYOUTS[3], I8_TC_LAYOUTS[4]];
    const fields = ['tilesM', 'tilesN', 'sgM', 'sgN', 'BK', 'PAD', 'EPI'] as const;
    const layoutOf = (s: I8TcSpec) => layouts.findIndex((l) => fields.every((f) => l[f] === s[f]));
    // The second configuration cannot run the first layout: its first valid one is the second.
    const valid = (s: I8TcSpec) => !(s.cfg.N === 8 && layoutOf(s) === 0);
    const order = i8TcProbeOrder(cfgs, layouts, 32, valid);
    const key = (s: I8TcSpec) => `${s.cfg.N}/${s.syntax}/u${s.unitDiv}/${layoutOf(s)}`;
    expect(order.map(key).slice(0, 8)).toEqual([
      '16/template/u4/0', '16/template/u1/0', '16/bool/u4/0', '16/bool/u1/0',
      '8/template/u4/1', '8/template/u1/1', '8/bool/u4/1', '8/bool/u1/1',
    ]);
    expect(order).toHaveLength(4 * 3 + 4 * 2); // every valid candidate once
    expect(new Set(order.map(key)).size).toBe(order.length);
    expect(order.slice(8, 10).map(key)).toEqual(['16/template/u4/1', '16/template/u4/2']);
  });

  it('measured per-shape layouts are valid specs of their configuration; without tensor cores none applies', async () => {
    for (const t of MEASURED_I8TC_LAYOUTS) {
      for (const [shape, e] of Object.entries(t.table)) {
        expect(shape).toMatch(/^\d+x\d+x\d+$/);
        const cfg = { ...CFG, M: e.cfg[0], N: e.cfg[1], K: e.cfg[2] };
        expect(i8TcSpecError({ ...spec(), EPI: undefined, cfg, ...e.layout })).toBeNull();
      }
    }
    expect(i8TcChoiceFor(await testRuntime(), 8192, 768, 768)).toBeUndefined();
  });

  it('stores the epilogue in strips of EPI tiles: fewer barriers, the same stores', () => {
    // Two barriers in the k loop's body, then two per epilogue round.
    const barriers = (code: string) => (code.match(/workgroupBarrier\(\)/g)?.length ?? 0) - 2;
    const stores = (code: string) => code.match(/subgroupMatrixStore/g)?.length;
    const one = qgemmI8TcCode(spec({ tilesM: 4, tilesN: 4, sgM: 2, sgN: 2 }));
    const four = qgemmI8TcCode(spec({ tilesM: 4, tilesN: 4, sgM: 2, sgN: 2, EPI: 4 }));
    expect([barriers(one), stores(one)]).toEqual([32, 16]);
    expect([barriers(four), stores(four)]).toEqual([8, 16]);
    expect(four).toContain('e / 64u'); // a strip row is 4 tiles of 16 columns
    expect(i8TcSpecError(spec({ tilesN: 4, EPI: 3 }))).toMatch(/EPI=3 must divide/);
  });

  it('without subgroup matrices nothing is enabled and qgemmI8 keeps dot4', async () => {
    const rt = await testRuntime();
    const probe = await enableI8TensorCores(rt);
    if (rt.gpu.features.subgroupMatrix) return; // a GPU with the feature: covered by the device run
    expect(probe.chosen).toBeUndefined();
    expect(i8TensorCoreSpec(rt)).toBeUndefined();
    expect(i8TcSplitOk(rt)).toBe(false);
  });
});
