/**
 * Tuning run for the tensor-core INT8 GEMM (src/engine/kernels/qgemm/tc.ts) on a GPU with
 * subgroup matrices: checks every layout of I8_TC_LAYOUTS bit for bit, then times each correct one
 * next to the dot4I8Packed kernel and our fp32 GEMM on the same shapes (GPU timestamps, median).
 *
 *   node i8tc-tune.mjs [--sizes 2048,4096,8192] [--json out.json] [--reps 10]
 *
 * The winner goes first in I8_TC_LAYOUTS (the order enableI8TensorCores tries them in).
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { matmul } from '../src/engine/kernels/matmul/matmul';
import { qgemmI8 } from '../src/engine/kernels/qgemm/qgemm';
import {
  checkI8Tc, enableI8TensorCores, i8Configs, i8TcLabel, i8TcSpecError, qgemmI8Tc, type I8TcSpec,
} from '../src/engine/kernels/qgemm/tc';
import { I8_TC_LAYOUTS } from '../src/engine/kernels/qgemm/tc-tables';
import { Rng } from '../src/engine/util/rng';
import { msPer } from '../src/lab/quant';

const a = parseArgs({ options: { sizes: { type: 'string' }, json: { type: 'string' }, reps: { type: 'string' }, shapes: { type: 'string' } } }).values;
const sizes = (a.sizes ?? '2048,4096,8192').split(',').map(Number);
// Model forward shapes (M tokens, N out, K in) of base at batch 16 × 512 on top of the squares.
const extra = (a.shapes ?? '8192x2048x2048,8192x5632x2048,8192x2048x5632').split(',').filter(Boolean).map((s) => s.split('x').map(Number));
const reps = Number(a.reps ?? 10);

const gpu = await acquireNodeGpu({ dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const out: Record<string, unknown> = { date: new Date().toISOString(), adapter: gpu.adapterInfo, configs: gpu.subgroupMatrixConfigs, rows: [] as unknown[] };
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)} configs ${JSON.stringify(gpu.subgroupMatrixConfigs)}`);
const probe = await enableI8TensorCores(rt);
out.probe = probe;
console.log(`probe: ${probe.chosen ? i8TcLabel(probe.chosen) : 'none'}; tried ${JSON.stringify(probe.tried)}`);
if (!probe.chosen) {
  if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
  process.exit(0);
}
const base = probe.chosen;
const specs: I8TcSpec[] = [];
for (const cfg of i8Configs(rt)) {
  for (const layout of I8_TC_LAYOUTS) {
    const s: I8TcSpec = { ...base, cfg, ...layout };
    if (i8TcSpecError(s, rt.device.limits.maxComputeWorkgroupStorageSize)) continue;
    const c = await checkI8Tc(rt, s);
    console.log(`check ${i8TcLabel(s)}: ${c.ok ? `ok, split-K ${c.splitOk ? 'ok' : c.splitError}` : c.error ?? `${c.mismatches} mismatches`}`);
    if (c.ok) specs.push(s);
  }
}
const rows = out.rows as unknown[];
for (const [M, N, K] of [...sizes.map((n) => [n, n, n]), ...extra]) {
  const rng = new Rng(M + N + K);
  const words = (n: number) => new Uint32Array(n / 4).map(() => rng.nextU32());
  const xq = rt.upload('workspace', 'xq', words(M * K));
  const wq = rt.upload('workspace', 'wq', words(N * K));
  const sx = rt.upload('workspace', 'sx', new Float32Array(M).fill(0.01));
  const sw = rt.upload('workspace', 'sw', new Float32Array(N).fill(0.01));
  const c = rt.createBuffer('workspace', 'c', M * N * 4);
  const x = rt.upload('workspace', 'x', rng.normalArray(M * K));
  const w = rt.upload('workspace', 'w', rng.normalArray(N * K));
  const args = { label: 'tune', xq, sx, wq, sw, c, M, N, K };
  const time = async (name: string, d: Dispatch) => {
    const { ms, method } = await msPer(rt, [d], { inner: 5, warmup: 2, reps });
    const tops = (2 * M * N * K) / (ms * 1e9);
    rows.push({ M, N, K, kernel: name, ms, tops, method });
    console.log(`${M}x${N}x${K} ${name}: ${tops.toFixed(1)} T(FL)OP/s (${ms.toFixed(3)} ms)`);
  };
  await time('fp32 NT', matmul(rt, { label: 'fp32', a: x, b: w, c, M, N, K, transB: true }));
  await time('int8 dot4', qgemmI8(rt, { ...args, tiles: {} }));
  for (const s of specs) await time(`int8 tc ${i8TcLabel(s)}`, qgemmI8Tc(rt, s, args));
  for (const b of [xq, wq, sx, sw, c, x, w]) rt.mem.free(b);
}
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
process.exit(0);
