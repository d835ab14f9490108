/**
 * Whether the f16 GEMMs with N = 768 (base's q/k/v/o and down projections, their dX) lose time to a part-empty
 * last wave: each GEMM timed at every row count M (whole 128-row blocks) of a list, on the layout the engine
 * chooses, and as a row split (M1 rows on the chosen layout, the rest on a half-height layout), with the
 * whole GEMM in the same process as the baseline. H100 (s31c1): one wave is 264 blocks (5,632 rows at N 768: 0.052 ms at
 * K 768, 8,192 rows 0.095), but the split ran 0.108 ms: the second dispatch's start costs more than the half wave saves. Wave-bound timing shows as steps in ms against M.
 *
 *   node f16-waves.mjs [--n 768] [--k 768,2560] [--rows 2048,4096,5632,6144,8192] [--split 5632] [--reps 10]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { buildMatmulF16, enableF16TensorCores, f16TensorCoreSpecFor, uploadF16 } from '../src/engine/kernels/matmul-f16/matmul-f16';
import { F16_TC_LAYOUTS, f16TcLabel, type F16TcSpec } from '../src/engine/kernels/matmul-f16/plan';
import { Rng } from '../src/engine/util/rng';
import { msPer } from '../src/lab/quant';

const a = parseArgs({ options: { n: { type: 'string' }, k: { type: 'string' }, rows: { type: 'string' }, split: { type: 'string' }, reps: { type: 'string' } } }).values;
const N = Number(a.n ?? 768);
const Ks = (a.k ?? '768,2560').split(',').map(Number);
const rows = (a.rows ?? '1024,2048,2816,4096,4224,5632,6144,7040,8192').split(',').map(Number);
const splits = (a.split ?? '5632,4224').split(',').map(Number);
const reps = Number(a.reps ?? 10);
const gpu = await acquireNodeGpu({ dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
await enableF16TensorCores(rt);
const rng = new Rng(3);
const Mmax = Math.max(...rows, 8192);
for (const K of Ks) {
  const A = uploadF16(rt, 'A', rng.uniformArray(Mmax * K));
  const B = uploadF16(rt, 'B', rng.uniformArray(N * K));
  const C = rt.createBuffer('workspace', 'C', Mmax * N * 4);
  const gemm = (M: number, row0: number, spec?: F16TcSpec): Dispatch[] => buildMatmulF16(rt, {
    label: 'g', M, N, K, transB: true, a: { buffer: A, offset: row0 * K * 2, size: M * K * 2 }, b: B, c: { buffer: C, offset: row0 * N * 4, size: M * N * 4 },
    ...(spec ? { path: 'f16-tensor-core' as const, spec } : {}),
  }).dispatches;
  const time = async (name: string, M: number, ds: Dispatch[]) => {
    const { ms } = await msPer(rt, ds, { inner: 5, warmup: 2, reps, warmupMs: 200 });
    console.log(`K ${K} M ${M} ${name}: ${ms.toFixed(4)} ms, ${((2 * M * N * K) / (ms * 1e9)).toFixed(1)} TFLOP/s`);
    return ms;
  };
  const chosen = f16TensorCoreSpecFor(rt, 'NT', { M: 8192, N, K });
  console.log(`K ${K}: chosen ${chosen ? f16TcLabel(chosen) : 'none'}`);
  for (const M of rows) await time('chosen', M, gemm(M, 0));
  // Half-height layouts of the chosen one's family for the tail.
  const halves = chosen ? F16_TC_LAYOUTS.filter((l) => l.sgM * l.tilesM * chosen.cfg.M === 64 && l.sgN * l.tilesN * chosen.cfg.N === 128)
    .map((l) => ({ ...chosen, ...l, stages: l.stages, loop: l.loop, copy: l.copy, swizzle: l.swizzle, unroll: l.unroll, prefetch: l.prefetch } as F16TcSpec)) : [];
  for (const h of halves) {
    for (const M1 of splits) {
      try {
        await time(`split ${M1} + ${8192 - M1} on ${f16TcLabel(h)}`, 8192, [...gemm(M1, 0), ...gemm(8192 - M1, M1, h)]);
        await time(`tail ${8192 - M1} alone on ${f16TcLabel(h)}`, 8192 - M1, gemm(8192 - M1, M1, h));
      } catch (e) { console.log(`${f16TcLabel(h)}: ${(e as Error).message}`); }
    }
  }
  await time('chosen (again)', 8192, gemm(8192, 0));
  [A, B, C].forEach((b) => rt.mem.free(b));
}
process.exit(0);
