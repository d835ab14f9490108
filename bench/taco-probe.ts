/**
 * Where TACO compress spends its time (a diagnostic, one call on a GPU machine): the default
 * compress kernel timed beside variants of it that each drop one part of the work, on the same
 * buffers, interleaved over rounds and warmed until steady (src/lab/quant.ts's method). The variants
 * are the kernel's own WGSL (tacoShader) with extra entry points appended; their payloads are
 * meaningless, only their times matter:
 *   copy        the same loads and the same code-word stores, nothing in between (the memory floor
 *               of this access pattern)
 *   transform   loads, the square sum, a, the FWHT, the max and s (divisions included); one word
 *               per register stored (no encoding)
 *   plain-div   transform with WGSL's `/` instead of the correctly rounded div_rn (what the exact
 *               divisions cost; the results are not the reference's)
 *   no-ties     the full compress without the near-tie check and recode
 *   fixstash    the full compress with the near-ties' words parked in workgroup memory for the recode
 * the last three and transform also at 4, 8 and 16 words per invocation, beside the full compress
 * at those widths and in 64-invocation workgroups (every full compress's payload must equal the
 * default's byte for byte: checked before timing, on data with an Inf and a NaN); decompress beside a copy with its access pattern (payload words in, vec4s out);
 * both kernels also timed one dispatch per pass (`inner=1`: what a pass's own timestamps add); and
 * the floors: plain coalesced copies moving the same bytes (fp32 in and a word out per 4 elements,
 * and back).
 * --layouts times only the full kernels at other words per invocation and workgroup sizes (outputs
 * checked against the defaults'); --paths (with --rounds 0: checks only) runs every words per
 * invocation through each exchange path and compares payloads and outputs with the TS reference
 * (--group G picks the group size, 128 by default).
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/taco-probe.ts .device/taco-probe.mjs
 *   (on the device)  node taco-probe.mjs [--sizes 16777216,67108864] [--rounds 3] [--layouts | --paths] [--group 128]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Binding, type Dispatch, Runtime, Uniforms } from '../src/engine/gpu/runtime';
import { median } from '../src/engine/gpu/timer';
import { TACO_WG, tacoCompress, tacoDecompress, tacoShader, tacoWordsPerInvocation } from '../src/engine/kernels/taco/taco';
import { rsqrtF32 } from '../src/engine/quant/hadamard';
import { tacoCompressRef, tacoDecompressRef, tacoLayout, tacoPayload, tacoPayloadBytes } from '../src/engine/quant/taco';
import { Rng } from '../src/engine/util/rng';
import { timeInterleaved } from '../src/lab/quant';

// --layouts: only the full kernels at other words per invocation and workgroup sizes (outputs checked)
// --paths: the full kernels through each exchange path (shuffles only, shuffles with the workgroup-
// memory fallback compiled in, workgroup memory only) at several words per invocation (outputs
// checked against the TS reference)
const a = parseArgs({ options: { sizes: { type: 'string' }, rounds: { type: 'string' }, layouts: { type: 'boolean' }, paths: { type: 'boolean' }, group: { type: 'string' } } }).values;
const sizes = (a.sizes ?? '16777216,67108864').split(',').map(Number);
const rounds = Number(a.rounds ?? 3);
const G = Number(a.group ?? 128);

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
// Another way to recode the near-tie elements (the full compress otherwise; its payload is checked
// against the default's): the flagged words' values parked in workgroup memory in the store loop,
// recoded from there after it, so that the fix-up never indexes the registers.
const STASH_PROBE = `
fn fix_word(w0: u32, y: vec4<f32>, r: vec4<u32>, s: f32, inv: f32) -> u32 {
  var w = w0;
  for (var c = 0u; c < 4u; c++) {
    if ((r[c] & TIE_MASK) == 0u) { w = insertBits(w, code_exact(y[c], s, y[c] * inv), 8u * c, 8u); }
  }
  return w;
}

var<workgroup> tie_y: array<vec4<f32>, WG * V>;
` + entry('probe_fixstash', `    var v: array<vec4<f32>, V>;
    let sc = transform_group(&v, q0, lid, sg);
    let inv = 1.0 / sc.s;
    if (g < P.groups) {
      var tm = 0u;
      for (var j = 0u; j < V; j++) {
        let r = near_codes(v[j], inv);
        if (has_tie(r)) {
          tie_y[lid * V + j] = v[j];
          tm |= 1u << j;
        }
        payload[q0 + j * T] = pack_codes(r, v[j]);
      }
      while (tm != 0u) {
        let j = firstTrailingBit(tm);
        tm &= tm - 1u;
        let y = tie_y[lid * V + j];
        let q = q0 + j * T;
        payload[q] = fix_word(payload[q], y, near_codes(y, inv), sc.s, inv);
      }
${SCALES}    }
`);
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

/** The shader with WGSL's `/` in place of the correctly rounded div_rn (results not the reference's). */
function withPlainDiv(code: string): string {
  const plain = code.replace(/fn div_rn\(a: f32, b: f32\) -> f32 \{\n {2}return qc_div_fix\(a, b, a \/ b\);/, 'fn div_rn(a: f32, b: f32) -> f32 {\n  return a / b;');
  if (plain === code) throw new Error('taco_probe: div_rn not found in the codec snippet');
  return plain;
}

/** Words of `want` that `got` differs in. */
function differing(got: Uint32Array, want: Uint32Array): number {
  let k = 0;
  for (let i = 0; i < want.length; i++) if (got[i] !== want[i]) k++;
  return k;
}

const rt = new Runtime(await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] }));
console.log(`adapter ${JSON.stringify(rt.gpu.adapterInfo)} subgroups ${rt.gpu.features.subgroups}`);
if (!rt.gpu.features.subgroups) throw new Error('taco_probe needs the subgroups feature (its entry points take subgroup_size)');

for (const n of sizes) {
  const L = tacoLayout(n, G);
  const host = new Rng(1).normalArray(n, 0.02);
  // Two non-finite inputs, so the payload checks also cover the filter's slow path.
  host[1000 % n] = Infinity;
  host[(n >> 1) + 17] = Number.NaN;
  const x = rt.upload('workspace', 'probe.x', host);
  const payload = rt.createBuffer('workspace', 'probe.payload', tacoPayloadBytes(n, G));
  const y = rt.createBuffer('workspace', 'probe.y', 4 * n);
  // inner: dispatches per timed pass (1 shows what a pass's own timestamps add); check: a full
  // compress whose payload must equal the default's byte for byte.
  const kernels: { name: string; d: Dispatch; inner?: number; check?: boolean; checkOut?: boolean }[] = [];
  const probeShader = (kind: 'compress' | 'decompress', words: number) => {
    const shuffleOnly = G / (4 * words) <= rt.gpu.subgroupMinSize;
    return tacoShader({ entry: kind, subgroups: true, shuffleOnly, vec4Io: true, words }) +
      (kind === 'compress' ? COMPRESS_PROBES + (words <= 16 ? STASH_PROBE : '') : DECOMPRESS_COPY);
  };
  const probe = (name: string, kind: 'compress' | 'decompress', words: number, wg: number, ep: string, src?: string, check = false) => {
    const lanes = G / (4 * words);
    const tiles = Math.ceil(L.groups / (wg / lanes));
    const u = rt.uniform(`probe.${name}`, new Uniforms().u32(n).u32(L.groups).u32(L.sOff).u32(L.aOff).u32(tiles)
      .f32(rsqrtF32(G)).f32(1 / G).f32(-0));
    kernels.push({
      name, d: rt.kernel({ label: `probe.${name}`, code: src ?? probeShader(kind, words), entryPoint: ep, constants: { G, WG: wg },
        bindings: [payload, kind === 'compress' ? x : y, u], workgroups: [Math.min(tiles, 65535)] }),
      check,
    });
  };
  for (const kind of a.layouts || a.paths ? [] : ['compress', 'decompress'] as const) {
    const words = tacoWordsPerInvocation(G, kind, n); // the default kernel's, which the probes take apart
    const wg = TACO_WG[kind];
    const code = probeShader(kind, words);
    const plainDiv = withPlainDiv(code);
    if (kind === 'compress') {
      kernels.push({ name: 'compress', d: tacoCompress(rt, { label: 'probe.compress', x, payload, n, G }) });
      kernels.push({ name: 'compress inner=1', d: tacoCompress(rt, { label: 'probe.compress', x, payload, n, G }), inner: 1 });
      probe('copy', kind, words, wg, 'probe_copy');
      probe('plain-div', kind, words, wg, 'probe_transform', plainDiv);
      for (const w of [4, 8, 16]) {
        const wgw = w === words ? wg : 64;
        if (w !== words) kernels.push({ name: `compress w=${w}`, d: tacoCompress(rt, { label: `probe.compress.w${w}`, x, payload, n, G, words: w, workgroupSize: wgw }), check: true });
        probe(`transform w=${w}`, kind, w, wgw, 'probe_transform');
        probe(`no-ties w=${w}`, kind, w, wgw, 'probe_noties');
        probe(`fixstash w=${w}`, kind, w, wgw, 'probe_fixstash', undefined, true);
      }
      // the default words in 64-invocation workgroups
      kernels.push({ name: 'compress wg=64', d: tacoCompress(rt, { label: 'probe.compress.wg64', x, payload, n, G, workgroupSize: 64 }), check: true });
    } else {
      kernels.push({ name: 'decompress', d: tacoDecompress(rt, { label: 'probe.decompress', payload, y, n, G }) });
      kernels.push({ name: 'decompress inner=1', d: tacoDecompress(rt, { label: 'probe.decompress', payload, y, n, G }), inner: 1 });
      probe('decompress copy', kind, words, wg, 'probe_dcopy');
    }
  }
  if (a.layouts) {
    kernels.push({ name: 'compress', d: tacoCompress(rt, { label: 'probe.compress', x, payload, n, G }) });
    for (const [w, wg] of [[4, 32], [4, 64], [4, 128], [2, 64], [16, 64]]) {
      kernels.push({ name: `compress w=${w} wg=${wg}`, d: tacoCompress(rt, { label: 'probe.compress.l', x, payload, n, G, words: w, workgroupSize: wg }), check: true });
    }
    kernels.push({ name: 'decompress', d: tacoDecompress(rt, { label: 'probe.decompress', payload, y, n, G }) });
    for (const [w, wg] of [[4, 32], [4, 64], [4, 128], [2, 64], [8, 32], [16, 64]]) {
      kernels.push({ name: `decompress w=${w} wg=${wg}`, d: tacoDecompress(rt, { label: 'probe.decompress.l', payload, y, n, G, words: w, workgroupSize: wg }), checkOut: true });
    }
  }
  if (a.paths) {
    kernels.push({ name: 'compress', d: tacoCompress(rt, { label: 'probe.compress', x, payload, n, G, subgroups: false }) });
    kernels.push({ name: 'decompress', d: tacoDecompress(rt, { label: 'probe.decompress', payload, y, n, G, subgroups: false }) });
    const paths = [['shuffle', {}], ['sg+mem', { shuffleOnly: false }], ['mem', { subgroups: false }]] as const;
    for (const w of [1, 2, 4, 8, 16].filter((k) => k <= G / 4)) {
      for (const [pn, po] of paths) {
        const o = { ...po, words: w, workgroupSize: Math.max(64, G / (4 * w)) };
        kernels.push({ name: `compress w=${w} ${pn}`, d: tacoCompress(rt, { label: 'probe.compress.p', x, payload, n, G, ...o }) });
        kernels.push({ name: `decompress w=${w} ${pn}`, d: tacoDecompress(rt, { label: 'probe.decompress.p', payload, y, n, G, ...o }) });
      }
      // The same kernels with WGSL's `/` for div_rn: whether a layout's deviation is the division's.
      for (const kind of ['compress', 'decompress'] as const) {
        const plain = withPlainDiv(tacoShader({ entry: kind, subgroups: false, vec4Io: true, words: w }));
        probe(`${kind} w=${w} mem plain-div`, kind, w, Math.max(64, G / (4 * w)), kind, plain);
      }
    }
  }
  // The floors: the same bytes moved by plain coalesced copies (a warp's access is 512 contiguous
  // bytes), 4 words per invocation, workgroups striding over the rest.
  const floor = (name: string, src: string, out: Binding, inp: Binding) => kernels.push({
    name, d: rt.kernel({ label: `probe.${name}`, code: src, entryPoint: 'main', bindings: [out, inp],
      workgroups: [Math.min(Math.ceil(n / 4 / 256 / 4), 65535)] }),
  });
  const FLOOR = (decl: string, body: string) => `${decl}
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let words = ${n / 4}u;
  let stride = nwg.x * 256u;
  for (var i0 = gid.x; i0 < words; i0 += 4u * stride) {
    for (var k = 0u; k < 4u; k++) {
      let i = i0 + k * stride;
      if (i < words) { ${body} }
    }
  }
}
`;
  floor('floor compress', FLOOR(`@group(0) @binding(0) var<storage, read_write> o: array<u32>;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;`, 'let v = a[i]; o[i] = bitcast<u32>((v.x + v.y) + (v.z + v.w));'), payload, x);
  floor('floor decompress', FLOOR(`@group(0) @binding(0) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> a: array<u32>;`, 'o[i] = unpack4x8unorm(a[i]);'), y, payload);
  if (a.paths) {
    // Every compress variant's payload against the TS reference's, and every decompress variant's
    // output on the reference payload against the reference's decompression (bits).
    const refC = tacoCompressRef(host, G);
    const refP = new Uint32Array(tacoPayload(refC).slice().buffer);
    const refY = new Uint32Array(tacoDecompressRef(refC, n, G).buffer);
    for (const k of kernels.filter((c) => c.name.startsWith('compress'))) {
      rt.run([k.d]);
      console.log(`n=${n} G=${G} ${k.name}: payload words differing from tacoCompressRef's: ${differing(await rt.readU32(payload, 0, refP.length), refP)}`);
    }
    rt.write(payload, refP);
    for (const k of kernels.filter((c) => c.name.startsWith('decompress'))) {
      rt.run([k.d]);
      console.log(`n=${n} G=${G} ${k.name}: output words differing from tacoDecompressRef's: ${differing(await rt.readU32(y, 0, n), refY)}`);
    }
  }
  // The checked variants' payloads against the default compress's (whole payload, byte for byte).
  const checked = kernels.filter((c) => c.check);
  rt.run([kernels[0].d]);
  const want = checked.length ? await rt.readU32(payload, 0, tacoPayloadBytes(n, G) / 4) : new Uint32Array(0);
  for (const k of checked) {
    rt.run([k.d]);
    const diff = differing(await rt.readU32(payload, 0, want.length), want);
    console.log(`n=${n} ${k.name}: payload ${diff ? `DIFFERS from the default's in ${diff} words` : "== the default's"}`);
  }
  // The decompress variants' fp32 output against the default decompress's, on the default payload.
  const dflt = kernels.find((k) => k.name === 'decompress');
  const checkedOut = kernels.filter((c) => c.checkOut);
  if (dflt && checkedOut.length) {
    rt.run([kernels[0].d, dflt.d]);
    const wantY = await rt.readU32(y, 0, n);
    for (const k of checkedOut) {
      rt.run([k.d]);
      const diff = differing(await rt.readU32(y, 0, n), wantY);
      console.log(`n=${n} ${k.name}: output ${diff ? `DIFFERS from the default's in ${diff} words` : "== the default's"}`);
    }
  }
  if (rounds === 0) { // checks only
    for (const b of [x, payload, y]) rt.mem.free(b);
    continue;
  }
  for (const k of kernels) rt.run([k.d]); // compile everything (and touch every buffer) first
  await rt.sync();
  const samples = await timeInterleaved(rt, kernels.map((k) => ({ name: k.name, d: k.d, bench: { inner: k.inner } })), rounds, 1500);
  for (const k of kernels) {
    const ms = median(samples.get(k.name)!);
    console.log(`n=${n} ${k.name.padEnd(20)} ${ms.toFixed(4)} ms  ${((4 * n) / (ms * 1e6)).toFixed(0)} GB/s of fp32  (rounds: ${samples.get(k.name)!.map((t) => t.toFixed(4)).join(' ')})`);
  }
  for (const b of [x, payload, y]) rt.mem.free(b);
}
