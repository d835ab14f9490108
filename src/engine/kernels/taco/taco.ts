/**
 * Fused TACO compress / decompress kernels (src/engine/kernels/taco/taco.wgsl); spec in src/engine/quant/taco.ts.
 *   n = chunk elements, G = group size, NG = ceil(n/G).
 * Payload: ONE u32 buffer (or a 256-byte-aligned slice) of tacoPayloadBytes(n, G) bytes laid out
 * [NG·G FP8 codes, 4 per word][s: NG fp32][a: NG fp32] — the exact bytes of tacoPayload(), so it
 * goes over the wire as is. Each invocation holds `words` 16-byte words of one group in registers;
 * the G/(4·words) invocations of a group exchange through subgroupShuffleXor when the device has
 * subgroups, else through workgroup memory (identical results either way). One 1-D dispatch;
 * workgroups loop over the tiles when there are more than the grid allows. The fp32 side is bound
 * read-only by compress and the payload read-only by decompress, so the two must be different
 * buffers (WebGPU forbids one buffer in both roles in a dispatch).
 *
 * Work per element, both kernels meant to be memory-bound (4 B of fp32 against ~1.06 B of payload):
 * compress ≈ 35 register operations (square-sum, a·x, 7 butterfly stages, ·1/sqrt(G), |max|, a
 * branch-free FP8 encode with a near-tie flag, packing), decompress ≈ 25 (≈ 14 with decode 'lut':
 * a table lookup instead of ~13 integer operations per code); per group only two
 * correctly rounded divisions (div_rn) and one reciprocal, shared by the 4·words elements of each
 * invocation. The rare near-tie elements (~3e-5) are recoded exactly after the fact, outside the
 * per-element loop, so that loop stays small enough for the driver to unroll: a loop left rolled
 * indexes the register array dynamically, which puts it in local memory.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import tacoSrc from './taco.wgsl?raw';
import ioSrc from './io.wgsl?raw';
import xchgSrc from './xchg.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { Uniforms } from '../../gpu/runtime';
import { isPow2, rsqrtF32 } from '../../quant/hadamard';
import { checkTacoGroup, tacoLayout, tacoPayloadBytes } from '../../quant/taco';
import { requireBytes } from '../launch';
import { wgslSection } from '../wgsl';

/**
 * Invocations per workgroup, per kernel. Small keeps tiles small (2048 elements per workgroup at 16
 * words and 32 invocations), so a few-million-element chunk still spreads evenly over a big GPU's
 * SMs. These sizes were the fastest in interleaved runs of each candidate (docs/records/README.md).
 */
export const TACO_WG: Record<TacoEntry, number> = { compress: 32, decompress: 64 };

export type TacoEntry = 'compress' | 'decompress';

/**
 * How compress finds the code of RN(y/s) per element: 'split' (default) encodes every element
 * branch-free from y·(1/s) and recodes the rare near-ties exactly afterwards; 'inline' is the
 * earlier kernel, the exact path in a branch inside the per-element loop (same codes; kept so one
 * benchmark run can time both: TACO_BENCH_SWEEP).
 */
export type TacoEncode = 'split' | 'inline';

/**
 * How decompress turns a code into fp32 (same bits either way, NaN codes included): 'alu'
 * computes it (~13 integer operations per element); 'lut' (default) looks it up in a 256-entry
 * table of those same bits in workgroup memory (1 KiB), filled once per workgroup — an ALU-bound
 * kernel's per-element decode down to a byte extract and a load.
 */
export type TacoDecode = 'alu' | 'lut';

export interface TacoShaderOptions {
  entry: TacoEntry;
  subgroups: boolean;
  /**
   * With subgroups: every exchange is a subgroupShuffleXor, no workgroup-memory fallback compiled in.
   * Only valid when a group's G/(4·words) invocations fit in the adapter's smallest subgroup.
   */
  shuffleOnly?: boolean;
  /** 16-byte fp32 access (needs n % 4 == 0) instead of per-element access. */
  vec4Io: boolean;
  /** 16-byte words per invocation (the shader's V). */
  words: number;
  /** Compress only (default 'split'). */
  encode?: TacoEncode;
  /** Decompress only (default 'lut'). */
  decode?: TacoDecode;
}

function entrySections(o: TacoShaderOptions, shuffle: boolean): string[] {
  if (o.entry === 'decompress') return ['decompress_common', o.decode === 'alu' ? 'decode_alu' : 'decode_lut', 'decompress'];
  return ['compress_common', shuffle ? 'load_checked' : 'load_filtered', o.encode === 'inline' ? 'compress_inline' : 'compress'];
}

export function tacoShader(o: TacoShaderOptions): string {
  const shuffle = o.subgroups && !!o.shuffleOnly;
  const body = ['common', ...entrySections(o, shuffle)].map((name) => wgslSection(tacoSrc, name)).join('');
  return [
    o.subgroups ? 'enable subgroups;' : '',
    // load_checked branches on subgroupAny (the same value in the whole subgroup); see taco.wgsl.
    shuffle && o.entry === 'compress' ? 'diagnostic(off, subgroup_uniformity);' : '',
    `const V: u32 = ${o.words}u;`,
    codecSrc,
    wgslSection(xchgSrc, 'mem'),
    wgslSection(xchgSrc, !o.subgroups ? 'wg' : shuffle ? 'shuffle' : 'sg'),
    wgslSection(ioSrc, `${o.entry}_${o.vec4Io ? 'vec4' : 'scalar'}`),
    o.subgroups ? body.replaceAll('/*SG*/', ', @builtin(subgroup_size) sg: u32') : body,
  ].join('\n');
}

/**
 * Default words per invocation. Compress: 16 (64 elements in registers, so its per-group work —
 * two exact divisions, a reciprocal, the reductions — is shared by 64 elements; ~90 registers;
 * 4 for chunks under SMALL_CHUNK elements at G ≤ 128),
 * with at least 2 invocations per group so that a warp's loads come in whole 32-byte sectors.
 * Decompress has one division per group and less per element: 8 (32 elements), at least 4
 * invocations per group below G = 128 so that a warp's loads still come in runs of 64 bytes.
 * Never fewer than 4 words: on an NVIDIA GPU both kernels at 1 or 2 words per invocation differ from
 * the reference (cause not found), while 4, 8 and 16 words match it bit for bit; on SwiftShader
 * every layout matches (`bench/taco-probe.ts --paths` checks this on a GPU).
 */
export function tacoWordsPerInvocation(G: number, entry: TacoEntry, n = Infinity): number {
  if (entry === 'compress') return G <= 128 && n < SMALL_CHUNK ? 4 : Math.min(16, G / 8); // G ≥ 32: ≥ 4
  return Math.max(4, Math.min(8, G / 16));
}

/**
 * Below this many elements compress runs 4 words per invocation (G ≤ 128): 4× the invocations of
 * 16 words, which a chunk too small to fill the GPU at 16 needs more than the shared per-group work
 * (the two cross over near this size: `bench/taco-probe.ts --layouts`). Same bits either way.
 */
const SMALL_CHUNK = 1 << 25;

export interface TacoOptions {
  /** Force the workgroup-memory exchange even where subgroups exist (tests, A/B benches). */
  subgroups?: boolean;
  /**
   * Compile the shuffle-only exchange when a group's invocations fit in the adapter's smallest
   * subgroup (default true; false keeps the workgroup-memory fallback in the code, for A/B benches).
   */
  shuffleOnly?: boolean;
  /**
   * 16-byte words per invocation, a power of two ≤ G/4 (default tacoWordsPerInvocation(G, entry)).
   * 1 and 2 are for tests and benches: an NVIDIA GPU computes different bits with them (see there).
   */
  words?: number;
  /** Compress's per-element encoder (default 'split'); decompress ignores it. */
  encode?: TacoEncode;
  /**
   * Decompress's per-element decoder; compress ignores it. Default 'lut': the table in workgroup
   * memory decodes a little faster than the arithmetic, with bit-identical output.
   */
  decode?: TacoDecode;
  /** Invocations per workgroup, a power of two (default TACO_WG[entry]). */
  workgroupSize?: number;
  /** Cap on the workgroups dispatched (default the device limit); tests use it to exercise the tile loop. */
  maxWorkgroups?: number;
}

function build(rt: Runtime, label: string, entry: TacoEntry, payload: Binding, data: Binding,
  n: number, G: number, opts: TacoOptions): Dispatch {
  checkTacoGroup(G);
  if (!Number.isInteger(n) || n < 0) throw new Error(`${label}: bad element count ${n}`);
  const words = opts.words ?? tacoWordsPerInvocation(G, entry, n);
  const wg = opts.workgroupSize ?? TACO_WG[entry];
  const lanes = G / (4 * words);
  if (!isPow2(words) || lanes < 1) throw new Error(`${label}: words per invocation ${words} must be a power of two ≤ G/4 = ${G / 4}`);
  if (!isPow2(wg) || wg < lanes || wg > rt.device.limits.maxComputeInvocationsPerWorkgroup) {
    throw new Error(`${label}: workgroup size ${wg} must be a power of two, at least ${lanes} and within the device limit`);
  }
  if (opts.encode !== undefined && opts.encode !== 'split' && opts.encode !== 'inline') {
    throw new Error(`${label}: encode '${String(opts.encode)}' is not 'split' or 'inline'`);
  }
  if (opts.decode !== undefined && opts.decode !== 'alu' && opts.decode !== 'lut') {
    throw new Error(`${label}: decode '${String(opts.decode)}' is not 'alu' or 'lut'`);
  }
  if (opts.maxWorkgroups !== undefined && !(Number.isInteger(opts.maxWorkgroups) && opts.maxWorkgroups >= 1)) {
    throw new Error(`${label}: maxWorkgroups ${opts.maxWorkgroups} must be a positive integer`);
  }
  requireBytes(label, 'payload', payload, tacoPayloadBytes(n, G));
  requireBytes(label, entry === 'compress' ? 'x' : 'y', data, 4 * n);
  const L = tacoLayout(n, G);
  const tiles = Math.ceil(L.groups / (wg / lanes));
  const maxWorkgroups = Math.min(opts.maxWorkgroups ?? Infinity, rt.device.limits.maxComputeWorkgroupsPerDimension);
  const u = new Uniforms().u32(n).u32(L.groups).u32(L.sOff).u32(L.aOff).u32(tiles).f32(rsqrtF32(G)).f32(1 / G).f32(-0);
  const subgroups = (opts.subgroups ?? true) && rt.gpu.features.subgroups;
  const shuffleOnly = subgroups && (opts.shuffleOnly ?? true) && lanes <= rt.gpu.subgroupMinSize;
  return rt.kernel({
    label,
    code: tacoShader({ entry, subgroups, shuffleOnly, vec4Io: n > 0 && n % 4 === 0, words, encode: opts.encode, decode: opts.decode }),
    entryPoint: entry,
    constants: { G, WG: wg },
    bindings: [payload, data, rt.uniform(label, u)],
    workgroups: [Math.min(tiles, maxWorkgroups)],
  });
}

/** x: n fp32 (storage) → payload (storage, ≥ tacoPayloadBytes(n, G) bytes). */
export function tacoCompress(rt: Runtime, a: { label: string; x: Binding; payload: Binding; n: number; G: number } & TacoOptions): Dispatch {
  return build(rt, a.label, 'compress', a.payload, a.x, a.n, a.G, a);
}

/** payload → y: n fp32. */
export function tacoDecompress(rt: Runtime, a: { label: string; payload: Binding; y: Binding; n: number; G: number } & TacoOptions): Dispatch {
  return build(rt, a.label, 'decompress', a.payload, a.y, a.n, a.G, a);
}
