/**
 * Device check for the quantization codecs (one call on a GPU machine): div_rn against the hardware
 * '/', WGSL encoders and quantize kernels against the TS spec code for code, then throughput of
 * benchQuantize / dequantize and of each quantize pass next to a plain copy (the harness baseline).
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/quant-device.ts .device/quant-device.mjs
 *   (on the device)  bash .device/on-device.sh node quant-device.mjs
 * Sizes: QD_P (probe pairs, 2^20), QD_Q (quantizer check, 300000), QD_N (bench, 2^26).
 * QD_AB=1 adds, QD_AB=only runs alone, the side-by-side table of the two kernel paths
 * (buildQuantize / buildDequantize `path: 'passes' | 'fused'`) for int4, int8 and fp8-e4m3 in groups
 * of 32 and 128 at n = QD_AB_SIZES (default 2^22, 2^24, 2^26): first the codes and scales of both
 * paths compared word for word (the device's own division, all data), then GPU time of each,
 * in GB/s of compulsory traffic (4 bytes per element + the payload) beside a vec4 copy of the same
 * n (8 bytes per element). Every buffer is written once before anything is timed (first-touch).
 * QD_AB_REGS=1,2,4,8,16 adds rows for the fused kernels with those vec4 registers per invocation
 * (the `regs` option; the quantizer's team size follows from it, see fusedQuantizeLayout): the
 * data for choosing the defaults. QD_AB_REPS: timed repetitions (default 20). What it found on
 * the GPU is in git history (`git log -- docs/results`, docs/records/README.md).
 */
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime, Uniforms } from '../src/engine/gpu/runtime';
import { timeDispatches } from '../src/engine/gpu/timer';
import { buildDequantize, buildQuantize, CODEC_WGSL, fusedQuantizeLayout, type QuantizePath } from '../src/engine/kernels/quantize/quantize';
import { quantizeGpu } from '../src/engine/kernels/quantize/readback';
import { benchQuantize } from '../src/lab/quant';
import { encodeE4M3, encodeE5M2 } from '../src/engine/quant/fp8';
import { encodeInt, QUANT_FORMATS, type QuantFormat } from '../src/engine/quant/formats';
import { payloadBytes, quantizeRef, type Granularity } from '../src/engine/quant/quantizer';
import { Rng } from '../src/engine/util/rng';

const rt = new Runtime(await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] }));
console.log('adapter', JSON.stringify(rt.gpu.adapterInfo), 'subgroups', rt.gpu.features.subgroups);
const AB = process.env.QD_AB ?? '';
const CHECKS = AB !== 'only';
const PROBE = `${CODEC_WGSL}
struct P { n: u32, seed: u32, _a: u32, _b: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read> vin: array<f32>;
@group(0) @binding(2) var<storage, read> bin: array<f32>;
@group(0) @binding(3) var<storage, read_write> fout3: array<f32>;
@group(0) @binding(2) var<storage, read_write> cout: array<u32>;
@compute @workgroup_size(256) fn div(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x; if (i >= p.n) { return; }
  fout3[2u * i] = div_rn(vin[i], bin[i]);
  fout3[2u * i + 1u] = vin[i] / bin[i];
}
@compute @workgroup_size(256) fn enc(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.x; if (i >= p.n) { return; }
  let v = vin[i];
  cout[4u * i + 0u] = e4m3_encode(v); cout[4u * i + 1u] = e5m2_encode(v);
  cout[4u * i + 2u] = int_encode(v, 127.0); cout[4u * i + 3u] = int_encode(v, 7.0);
}`;
const f32bits = (x: number) => new Uint32Array(Float32Array.of(x).buffer)[0];
const fromBits = (b: number) => new Float32Array(Uint32Array.of(b >>> 0).buffer)[0];
async function probe(entry: string, n: number, ins: ArrayBufferView[], outWords: number) {
  const params = rt.uniform('p', new Uniforms().u32(n).u32(0));
  const bufs = ins.map((d, i) => rt.upload('workspace', `in${i}`, d));
  const out = rt.createBuffer('workspace', 'out', outWords * 4);
  rt.run([rt.kernel({ label: entry, code: PROBE, entryPoint: entry, bindings: [params, ...bufs, out], workgroups: [Math.ceil(n / 256)] })]);
  const r = await rt.read(out, 0, outWords * 4);
  for (const b of [params, out, ...bufs]) rt.mem.free(b);
  return r;
}
// Copies n floats with one (c1) or four (c4) per invocation: the bandwidth the harness can reach.
const COPY = `@group(0) @binding(0) var<storage, read> a: array<f32>; @group(0) @binding(1) var<storage, read_write> b: array<f32>;
@group(0) @binding(0) var<storage, read> a4: array<vec4<f32>>; @group(0) @binding(1) var<storage, read_write> b4: array<vec4<f32>>;
@compute @workgroup_size(256) fn c1(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) w: vec3<u32>) { let i = g.x + g.y * w.x * 256u; if (i < arrayLength(&b)) { b[i] = a[i]; } }
@compute @workgroup_size(256) fn c4(@builtin(global_invocation_id) g: vec3<u32>, @builtin(num_workgroups) w: vec3<u32>) { let i = g.x + g.y * w.x * 256u; if (i < arrayLength(&b4)) { b4[i] = a4[i]; } }`;
function copyDispatch(a: GPUBuffer, b: GPUBuffer, n: number, per: 1 | 4) {
  const wg = Math.ceil(n / per / 256);
  const grid: [number, number] = wg <= 65535 ? [wg, 1] : [65535, Math.ceil(wg / 65535)];
  return rt.kernel({ label: `c${per}`, code: COPY, entryPoint: `c${per}`, bindings: [a, b], workgroups: grid });
}
if (CHECKS) await deviceChecks();
if (AB) await pathsSideBySide();
console.log('done');
setTimeout(() => process.exit(0), 50);

/** The conformance checks and the original throughput lines (the default run). */
async function deviceChecks(): Promise<void> {
  const rng = new Rng(1);
  const normal = (lo: number, hi: number) => fromBits(((rng.nextU32() & 0x80000000) | ((lo + rng.int(hi - lo + 1) + 127) << 23) | (rng.nextU32() & 0x7fffff)) >>> 0);
  {
    const N = Number(process.env.QD_P ?? 1 << 20);
    const A = new Float32Array(N), B = new Float32Array(N);
    for (let i = 0; i < N; i++) {
      if (i % 3 === 0) { A[i] = normal(-60, 60); B[i] = normal(-60, 60); }
      else if (i % 3 === 1) { const q = Math.abs(normal(-20, 20)), b = Math.abs(normal(-20, 20)); const mid = q + 2 ** (Math.floor(Math.log2(q)) - 24); A[i] = fromBits(f32bits(Math.fround(b * mid)) + rng.int(5) - 2); B[i] = b; }
      else { const amax = Math.abs(normal(-30, 30)); B[i] = Math.fround(amax / [448, 57344, 127, 7][i % 4]); A[i] = Math.fround(amax * rng.next() * (rng.next() < 0.5 ? -1 : 1)); }
    }
    const o = new Float32Array(await probe('div', N, [A, B], 2 * N));
    let w = 0, raw = 0, rawUlp = 0;
    for (let i = 0; i < N; i++) {
      if (A[i] === 0) continue;
      const want = Math.fround(A[i] / B[i]);
      if (!Object.is(o[2 * i], want)) w++;
      if (!Object.is(o[2 * i + 1], want)) { raw++; rawUlp = Math.max(rawUlp, Math.abs(f32bits(o[2 * i + 1]) - f32bits(want))); }
    }
    console.log(`div: ${N} pairs; div_rn mismatches ${w}; hardware '/' not correctly rounded in ${raw} (max ${rawUlp} ULP)`);
  }
  {
    const N = Number(process.env.QD_P ?? 1 << 20);
    const v = new Float32Array(N);
    for (let i = 0; i < N; i++) v[i] = i % 2 ? fromBits(rng.nextU32()) : (rng.next() - 0.5) * 2 ** (rng.int(40) - 20);
    const c = new Uint32Array(await probe('enc', N, [v], 4 * N));
    let bad = 0;
    for (let i = 0; i < N; i++) {
      const x = v[i];
      if (c[4 * i] !== encodeE4M3(x) || c[4 * i + 1] !== encodeE5M2(x)) bad++;
      if (Number.isFinite(x) && (c[4 * i + 2] !== encodeInt(x, 127) || c[4 * i + 3] !== encodeInt(x, 7))) bad++;
    }
    console.log(`encoders: ${N} values, ${bad} mismatches`);
  }
  {
    const n = Number(process.env.QD_Q ?? 300_000);
    const x = new Rng(2).normalArray(n, 0.7);
    for (let i = 0; i < n; i += 97) x[i] *= 50;
    x.fill(0, 1000, 1500);
    let bad = 0;
    for (const fmt of QUANT_FORMATS) for (const g of [{ kind: 'tensor' }, { kind: 'group', size: 128 }, { kind: 'group', size: 37 }, { kind: 'row', rowLength: 3000 }, { kind: 'column', rowLength: 1000 }] as Granularity[]) for (const rounding of ['nearest', 'stochastic'] as const) {
      if ((g.kind === 'row') && n % g.rowLength) continue;
      const a = await quantizeGpu(rt, x, fmt, g, { rounding, seed: 3 });
      const b = quantizeRef(x, fmt, g, { rounding, seed: 3 });
      let d = 0;
      for (let i = 0; i < b.words.length; i++) if (a.words[i] !== b.words[i]) d++;
      for (let i = 0; i < b.scales.length; i++) if (a.scales[i] !== b.scales[i]) d++;
      if (d) console.log('MISMATCH', fmt, JSON.stringify(g), rounding, d);
      bad += d;
    }
    console.log(`quantizer GPU vs TS (n=${n}, 4 formats x granularities x roundings): ${bad} mismatching words/scales`);
  }
  const n = Number(process.env.QD_N ?? 1 << 26);
  for (const [fmt, g] of [['int8', { kind: 'group', size: 128 }], ['fp8-e4m3', { kind: 'group', size: 128 }], ['int4', { kind: 'group', size: 128 }], ['fp8-e4m3', { kind: 'group', size: 32 }], ['int8', { kind: 'tensor' }], ['int8', { kind: 'row', rowLength: 4096 }], ['fp8-e4m3', { kind: 'column', rowLength: 4096 }]] as const) {
    const gbps = await benchQuantize(rt, n, { format: fmt, granularity: g as Granularity, reps: 20 });
    console.log(`benchQuantize ${fmt} ${JSON.stringify(g)} n=${n}: ${gbps.toFixed(1)} GB/s`);
  }
  {
    // Baselines in the same harness: a coalesced f32 copy and a vec4 copy (bytes read + written).
    const a = rt.upload('workspace', 'ca', new Rng(4).normalArray(n));
    const b = rt.createBuffer('workspace', 'cb', 4 * n);
    for (const per of [1, 4] as const) {
      const t = await timeDispatches(rt, [copyDispatch(a, b, n, per)], { reps: 20 });
      console.log(`baseline copy c${per}: ${t.medianMs.toFixed(3)} ms (${t.method}), ${(8 * n / t.medianMs / 1e6).toFixed(1)} GB/s`);
    }
    rt.mem.free(a); rt.mem.free(b);
  }
  {
    // dequantize throughput (reads payload, writes 4n bytes), and the share of each quantize pass
    const x = new Rng(3).normalArray(n);
    const xb = rt.upload('workspace', 'x', x);
    const q = buildQuantize(rt, { format: 'int8', granularity: { kind: 'group', size: 128 }, n }, xb);
    const d = buildDequantize(rt, { format: 'int8', granularity: { kind: 'group', size: 128 }, n }, q.words, q.scales);
    rt.run(q.dispatches); await rt.sync();
    const time = async (ds: typeof d.dispatches) => (await timeDispatches(rt, ds, { reps: 20 })).medianMs;
    const td = await time(d.dispatches);
    console.log(`dequantize int8 g128: ${(td).toFixed(3)} ms, ${((4 * n + n + 4 * n / 128) / td / 1e6).toFixed(1)} GB/s`);
    for (const k of q.dispatches) console.log(`  quantize pass ${k.label}: ${(await time([k])).toFixed(3)} ms`);
    console.log(`  quantize all int8 g128: ${(await time(q.dispatches)).toFixed(3)} ms`);
  }
}

/**
 * The four-pass and the fused kernels side by side (QD_AB): per n, format and group size, the two
 * paths' codes and scales compared word for word, then the median GPU time of quantize and of
 * dequantize on each path, as a markdown table with the vec4 copy of the same n beside it.
 */
async function pathsSideBySide(): Promise<void> {
  const sizes = (process.env.QD_AB_SIZES ?? `${2 ** 22},${2 ** 24},${2 ** 26}`).split(',').map(Number);
  const reps = Number(process.env.QD_AB_REPS ?? 20);
  const regsSweep = process.env.QD_AB_REGS ? process.env.QD_AB_REGS.split(',').map(Number) : [];
  const paths: QuantizePath[] = ['passes', 'fused'];
  const cases: [QuantFormat, number][] = [['int4', 32], ['int4', 128], ['int8', 32], ['int8', 128], ['fp8-e4m3', 32], ['fp8-e4m3', 128]];
  console.log('| n | format | G | op | passes ms | passes GB/s | fused ms | fused GB/s | fused / passes | copy GB/s |');
  console.log('| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |');
  // Each timing warms until steady: a fresh GPU runs slow for a while, and a counted warm-up made
  // the first sizes look slower than the later ones.
  for (const n of sizes) {
    const xb = rt.upload('workspace', 'ab.x', new Rng(5).normalArray(n));
    const cb = rt.createBuffer('workspace', 'ab.copy', 4 * n);
    const copy = copyDispatch(xb, cb, n, 4);
    rt.run([copy]);
    const copyGbs = (8 * n) / (await timeDispatches(rt, [copy], { reps, warmupMs: 200 })).medianMs / 1e6;
    rt.mem.free(cb);
    for (const [format, G] of cases) {
      const spec = { format, granularity: { kind: 'group', size: G } as Granularity, n };
      const q = paths.map((path) => buildQuantize(rt, spec, xb, { path }));
      const d = paths.map((path, i) => buildDequantize(rt, spec, q[i].words, q[i].scales, { path }));
      // First touch of every buffer, and both paths' payloads for the comparison.
      rt.run([...q.flatMap((k) => k.dispatches), ...d.flatMap((k) => k.dispatches)]);
      const [w0, w1] = await Promise.all(q.map((k) => rt.readU32(k.words, 0, k.numWords)));
      const [s0, s1] = await Promise.all(q.map((k) => rt.readU32(k.scales, 0, k.numScales)));
      let diff = 0;
      for (let i = 0; i < w0.length; i++) if (w0[i] !== w1[i]) diff++;
      for (let i = 0; i < s0.length; i++) if (s0[i] !== s1[i]) diff++;
      if (diff) console.log(`MISMATCH ${format} G=${G} n=${n}: ${diff} words/scales differ between the paths`);
      const gbs = (ms: number) => (4 * n + payloadBytes(format, n, q[0].numScales)) / ms / 1e6;
      for (const [op, ks] of [['quantize', q], ['dequantize', d]] as const) {
        const ms: number[] = [];
        for (const k of ks) ms.push((await timeDispatches(rt, k.dispatches, { reps, warmupMs: 200 })).medianMs);
        console.log(`| ${n} | ${format} | ${G} | ${op} | ${ms[0].toFixed(3)} | ${gbs(ms[0]).toFixed(0)} | ${ms[1].toFixed(3)} | ${gbs(ms[1]).toFixed(0)} | ${(ms[0] / ms[1]).toFixed(2)}× | ${copyGbs.toFixed(0)} |`);
      }
      for (const k of [...q, ...d]) k.destroy();
      for (const regs of regsSweep) {
        const layout = fusedQuantizeLayout(spec, regs);
        const qr = buildQuantize(rt, spec, xb, { path: 'fused', regs });
        const dr = buildDequantize(rt, spec, qr.words, qr.scales, { path: 'fused', regs });
        rt.run([...qr.dispatches, ...dr.dispatches]);
        const tq = (await timeDispatches(rt, qr.dispatches, { reps, warmupMs: 200 })).medianMs;
        const td = (await timeDispatches(rt, dr.dispatches, { reps, warmupMs: 200 })).medianMs;
        console.log(`| ${n} | ${format} | ${G} | regs=${regs} (team ${layout?.team}, ${layout?.regs} used) | quantize ${tq.toFixed(3)} ms | ${gbs(tq).toFixed(0)} | dequantize ${td.toFixed(3)} ms | ${gbs(td).toFixed(0)} | | |`);
        qr.destroy();
        dr.destroy();
      }
    }
    rt.mem.free(xb);
  }
}
