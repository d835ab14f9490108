/**
 * Each dispatch of a GEMM choice timed on its own (a diagnostic, one call on a GPU machine): the
 * GEMM, and for split-K its reduction or for stream-K its summing pass. `bench gemm` times a choice
 * as a whole; this says where a two-dispatch choice's time goes. Each choice is checked against the
 * first one's output (same operands) before it is timed, then warmed until steady, and its dispatches
 * profiled with GPU timestamps (median of --reps).
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/gemm-dispatches.ts .device/gemm-dispatches.mjs
 *   (on the device)  node gemm-dispatches.mjs --shape 4096x4096x4096 --choices 128x128k8_8x16,128x128k8_8x16_st264 [--reps 20] [--cpu]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { profileDispatches, warmUntilSteady } from '../src/engine/gpu/timer';
import { buildMatmul, matmulFlops } from '../src/engine/kernels/matmul/matmul';
import { type MatmulShape, matmulWorkspaceBytes } from '../src/engine/kernels/matmul/plan';
import { gemmOperands } from '../src/lab/gemm';

const a = parseArgs({ options: { shape: { type: 'string' }, choices: { type: 'string' }, reps: { type: 'string' }, cpu: { type: 'boolean' } } }).values;
const m = /^(\d+)x(\d+)x(\d+)(?::([NT])([NT]))?$/.exec(a.shape ?? '4096x4096x4096');
if (!m || !a.choices) {
  console.error('usage: node gemm-dispatches.mjs --shape MxNxK[:XY] --choices c1,c2,... [--reps 20] [--cpu]');
  process.exit(2);
}
const shape: MatmulShape = { M: Number(m[1]), N: Number(m[2]), K: Number(m[3]), transA: m[4] === 'T', transB: m[5] === 'T' };
const choices = a.choices.split(',').map((s) => s.trim()).filter(Boolean);
const reps = Number(a.reps ?? 20);

const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const ops = gemmOperands(rt, shape, 'dispatches', Math.max(0, ...choices.map((c) => matmulWorkspaceBytes(shape, c))));
let reference: Float32Array | undefined;
for (const choice of choices) {
  const built = buildMatmul(rt, { label: choice, ...shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: choice });
  rt.run(built.dispatches);
  const out = await rt.readF32(ops.c, 0, shape.M * shape.N);
  reference ??= out;
  let worst = 0;
  for (let i = 0; i < out.length; i++) worst = Math.max(worst, Math.abs(out[i] - reference[i]) / (1 + Math.abs(reference[i])));
  await warmUntilSteady(rt, built.dispatches, 500, 3000);
  const ms = await profileDispatches(rt, built.dispatches, reps);
  const total = ms ? ms.reduce((x, y) => x + y, 0) : NaN;
  console.log(`${choice}: ${ms ? ms.map((t) => t.toFixed(4)).join(' + ') : 'no timestamps'} = ${total.toFixed(4)} ms, `
    + `${(matmulFlops(shape) / (total * 1e9)).toFixed(1)} TFLOP/s; largest difference from ${choices[0]} ${worst.toExponential(2)}`);
  built.uniforms.forEach((u) => rt.mem.free(u));
}
ops.free();
