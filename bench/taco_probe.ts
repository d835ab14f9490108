/**
 * Where TACO compress spends its time (a diagnostic, one call on a GPU machine): the default
 * compress kernel timed beside variants of it that each drop one part of the work, on the same
 * buffers, interleaved over rounds and warmed until steady (bench/quant.ts's method). The variants
 * are the kernel's own WGSL (tacoShader) with extra entry points appended; their payloads are
 * meaningless, only their times matter:
 *   copy        the same loads and the same code-word stores, nothing in between (the memory floor
 *               of this access pattern)
 *   transform   loads, the square sum, a, the FWHT, the max and s (divisions included); one word
 *               per register stored (no encoding)
 *   plain-div   transform with WGSL's `/` instead of the correctly rounded div_rn (what the exact
 *               divisions cost; the results are not the reference's)
 *   no-ties     the full compress without the near-tie check and recode
 * and decompress beside a copy with its access pattern (payload words in, vec4s out).
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/taco_probe.ts .device/taco_probe.mjs
 *   (on the device)  node taco_probe.mjs [--sizes 16777216,67108864] [--rounds 3]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Dispatch, Runtime, Uniforms } from '../src/engine/gpu/runtime';
import { median, warmUntilSteady } from '../src/engine/gpu/timer';
import { TACO_WG, tacoShader, tacoWordsPerInvocation } from '../src/engine/kernels/taco';
import { rsqrtF32 } from '../src/engine/quant/hadamard';
import { tacoLayout, tacoPayloadBytes } from '../src/engine/quant/taco';
import { Rng } from '../src/engine/util/rng';
import { msPer } from './quant';

const a = parseArgs({ options: { sizes: { type: 'string' }, rounds: { type: 'string' } } }).values;
const sizes = (a.sizes ?? '16777216,67108864').split(',').map(Number);
const rounds = Number(a.rounds ?? 3);
const G = 128;

// Entry points appended to the compress (or decompress) shader; same bindings, Params and helpers as its own.
const HEAD = `@compute @workgroup_size(WG)
fn NAME(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_size) sg: u32) {
  let t = lid % T;
  for (var tile = wid.x; tile < P.tiles; tile += nwg.x) {
    let g = tile * (WG / T) + lid / T;
    let q0 = g * (G / 4u) + t;
`;
const TAIL = `  }
}
`;
const entry = (name: string, body: string) => HEAD.replace('NAME', name) + body + TAIL;
const SCALES = `      if (t == 0u) {
        payload[P.sOff + g] = bitcast<u32>(sc.s);
        payload[P.aOff + g] = bitcast<u32>(sc.a);
      }
`;
const COMPRESS_PROBES = [
  entry('probe_copy', `    if (g < P.groups) {
      for (var j = 0u; j < V; j++) {
        let x = load4(q0 + j * T);
        payload[q0 + j * T] = bitcast<u32>((x.x + x.y) + (x.z + x.w));
      }
    }
`),
  entry('probe_transform', `    var v: array<vec4<f32>, V>;
    let sc = transform_group(&v, q0, lid, sg);
    if (g < P.groups) {
      for (var j = 0u; j < V; j++) { payload[q0 + j * T] = bitcast<u32>((v[j].x + v[j].y) + (v[j].z + v[j].w)); }
${SCALES}    }
`),
  entry('probe_noties', `    var v: array<vec4<f32>, V>;
    let sc = transform_group(&v, q0, lid, sg);
    let inv = 1.0 / sc.s;
    if (g < P.groups) {
      for (var j = 0u; j < V; j++) { payload[q0 + j * T] = pack_codes(near_codes(v[j], inv), v[j]); }
${SCALES}    }
`),
].join('\n');

// Decompress's access pattern without its work: payload words in, one vec4 per word out (the same
// entry-point frame, appended to the decompress shader).
const DECOMPRESS_COPY = entry('probe_dcopy', `    if (g < P.groups) {
      for (var j = 0u; j < V; j++) { store4(q0 + j * T, unpack4x8unorm(payload[q0 + j * T])); }
    }
`);

const rt = new Runtime(await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] }));
console.log(`adapter ${JSON.stringify(rt.gpu.adapterInfo)} subgroups ${rt.gpu.features.subgroups}`);
if (!rt.gpu.features.subgroups) throw new Error('taco_probe needs the subgroups feature (its entry points take subgroup_size)');

for (const n of sizes) {
  const L = tacoLayout(n, G);
  const x = rt.upload('workspace', 'probe.x', new Rng(1).normalArray(n, 0.02));
  const payload = rt.createBuffer('workspace', 'probe.payload', tacoPayloadBytes(n, G));
  const y = rt.createBuffer('workspace', 'probe.y', 4 * n);
  const kernels: { name: string; d: Dispatch }[] = [];
  for (const kind of ['compress', 'decompress'] as const) {
    const words = tacoWordsPerInvocation(G, kind);
    const wg = TACO_WG[kind];
    const lanes = G / (4 * words);
    const tiles = Math.ceil(L.groups / (wg / lanes));
    const u = rt.uniform(`probe.${kind}`, new Uniforms().u32(n).u32(L.groups).u32(L.sOff).u32(L.aOff).u32(tiles)
      .f32(rsqrtF32(G)).f32(1 / G).f32(-0));
    const base = tacoShader({ entry: kind, subgroups: true, vec4Io: true, words });
    const code = base + (kind === 'compress' ? COMPRESS_PROBES : DECOMPRESS_COPY);
    const plainDiv = code.replace(/fn div_rn\(a: f32, b: f32\) -> f32 \{\n {2}return qc_div_fix\(a, b, a \/ b\);/, 'fn div_rn(a: f32, b: f32) -> f32 {\n  return a / b;');
    if (plainDiv === code) throw new Error('taco_probe: div_rn not found in the codec snippet');
    const k = (name: string, ep: string, src = code) => kernels.push({
      name, d: rt.kernel({ label: `probe.${name}`, code: src, entryPoint: ep, constants: { G, WG: wg }, bindings: [payload, kind === 'compress' ? x : y, u], workgroups: [Math.min(tiles, 65535)] }),
    });
    if (kind === 'compress') {
      k('compress', 'compress');
      k('copy', 'probe_copy');
      k('transform', 'probe_transform');
      k('plain-div', 'probe_transform', plainDiv);
      k('no-ties', 'probe_noties');
    } else {
      k('decompress', 'decompress');
      k('decompress copy', 'probe_dcopy');
    }
  }
  for (const k of kernels) rt.run([k.d]); // compile everything (and touch every buffer) first
  await rt.sync();
  const samples = new Map<string, number[]>(kernels.map((k) => [k.name, []]));
  for (let r = 0; r < rounds; r++) {
    for (const k of kernels) {
      await warmUntilSteady(rt, [k.d], 200, 1500);
      samples.get(k.name)!.push((await msPer(rt, [k.d], {})).ms);
    }
  }
  for (const k of kernels) {
    const ms = median(samples.get(k.name)!);
    console.log(`n=${n} ${k.name.padEnd(16)} ${ms.toFixed(4)} ms  ${((4 * n) / (ms * 1e6)).toFixed(0)} GB/s of fp32  (rounds: ${samples.get(k.name)!.map((t) => t.toFixed(4)).join(' ')})`);
  }
  for (const b of [x, payload, y]) rt.mem.free(b);
}
