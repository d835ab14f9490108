/**
 * GPU absmax quantize / dequantize (src/engine/kernels/quantize/quantize.wgsl, group.wgsl + codec.wgsl), matching
 * quantizeRef / dequantizeRef in src/engine/quant/quantizer.ts code for code.
 * Legend: N = elements, S = scales (groups), W = packed u32 words (⌈N/4⌉, INT4 / NF4 ⌈N/8⌉).
 * NF4 (QLoRA's table, src/engine/quant/nf4.ts) goes through the same kernels: QMAX 1, a table decode
 * and a nearest-threshold encode (codec.wgsl), every lane encoded the exact way.
 *
 * Two paths, the same codes and scales bit for bit:
 * - 'fused' (group.wgsl): ONE dispatch each way, for contiguous segments — groups, rows, a small
 *   tensor — whose length is a multiple of 4 (INT4: 8) and fits one workgroup (≤ 8192 elements).
 *   Quantize reads x once (4 bytes per element) and writes each code word and scale once: a team
 *   of invocations per segment keeps its elements in registers, takes the absmax through subgroup
 *   shuffles (workgroup memory without the `subgroups` feature) and encodes without a division per
 *   element. Dequantize (any single-scale tensor too) is vec4 loads and stores, no barriers.
 *   Pipelines: one per (format, team, registers) for quantize, per (format, segment length) for
 *   dequantize.
 * - 'passes' (quantize.wgsl): four dispatches (clear, absmax with atomics, scales, encode; x read
 *   twice) and a per-element dequantize; every granularity, per column included.
 * The default is 'fused' wherever it applies (fusedQuantizeLayout / fusedDequantizeSegment).
 *
 * Dispatches are built once per (format, granularity, N); the format is a WGSL override (one
 * pipeline per format), sizes, rounding and seed live in one uniform, so a new SR seed per step is
 * a 4-byte write (`setSeed`), not a rebuild.
 */
import codecWgsl from '../../../../shaders/quant/codec.wgsl?raw';
import groupWgsl from './group.wgsl?raw';
import quantizeWgsl from './quantize.wgsl?raw';
import type { MemCategory } from '../../gpu/memory';
import { grid2d, nextPow2, requireBytes } from '../launch';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { BITS, FORMAT_ID, QMAX, type QuantFormat } from '../../quant/formats';
import { type CodeBits, wordsFor } from '../../quant/pack';
import {
  type Granularity,
  granularityLabel,
  numScales,
  type QuantizeOptions,
  validateGranularity,
} from '../../quant/quantizer';
import { F16_HALF_WGSL, f16OutWgsl } from '../matmul-f16/cast';
import { sumSquaresPartialCount } from '../reduce/reduce';
import { wgslSection } from '../wgsl';

/** The shared codec snippet, for kernels of other ops that decode or encode in their inner loops. */
export const CODEC_WGSL: string = codecWgsl;
export const QUANTIZE_WGSL: string = [codecWgsl, wgslSection(quantizeWgsl, 'common'), wgslSection(quantizeWgsl, 'passes')].join('\n');

const WG = 256;
/** Byte offset of `seed` in the Params uniform (n, seg, columns, nscales, items, seed, …). */
const SEED_OFFSET = 20;

/**
 * Invocations per workgroup of the fused kernels. 128 keeps a tile small (≤ 4096 elements at 8
 * registers), so a few-million-element tensor still spreads evenly over a big GPU's SMs.
 */
export const GROUP_WG = 128;
/** Most vec4 registers per invocation (64 elements; only long rows need more than the default). */
const MAX_REGS = 16;
/** 32 elements per invocation: the per-segment work (absmax exchange, scale division, 1/s) is shared by that many. */
const DEFAULT_QUANT_REGS = 8;
const DEFAULT_DEQUANT_REGS = 4;

export type QuantizePath = 'fused' | 'passes';

export interface QuantizePathOptions {
  /** Kernel path (default: 'fused' where it applies, else 'passes'); 'fused' where it does not apply throws. */
  path?: QuantizePath;
  /** vec4 registers per invocation of the fused kernels, 1..16 (default: fusedQuantizeLayout's pick; dequantize 4). */
  regs?: number;
  /** Subgroup shuffles in the fused quantizer where the device has them (default true); false forces workgroup memory. */
  subgroups?: boolean;
  /** Cap on the fused kernels' workgroups (default the device limit); tests use it to exercise the tile loop. */
  maxWorkgroups?: number;
}

export interface QuantizeSpec {
  format: QuantFormat;
  granularity: Granularity;
  n: number;
}

export interface QuantizeKernel {
  spec: QuantizeSpec;
  /** The kernels these dispatches run. */
  path: QuantizePath;
  numWords: number;
  numScales: number;
  /** Packed codes [W] and fp32 scales [S]: outputs of quantize, inputs of dequantize. */
  words: GPUBuffer;
  scales: GPUBuffer;
  dispatches: Dispatch[];
  params: GPUBuffer;
  /** Rewrites the stochastic-rounding seed used by the next run (no-op for nearest). */
  setSeed(seed: number): void;
  /** Frees the uniform and the buffers this build allocated (not ones passed in). */
  destroy(): void;
}

/**
 * A dequantize that writes f16 (the f16 GEMMs' operand): 'packed' two halves a u32 word (2 bytes an
 * element), 'twin' the f32 each value rounds to (4 bytes, RunPlan.f16Twin). Each value is the f32
 * code × scale rounded to nearest f16: dequantizeF16Ref.
 */
export type DequantizeF16 = 'packed' | 'twin';

export interface DequantizeKernel {
  spec: QuantizeSpec;
  path: QuantizePath;
  out: GPUBuffer;
  dispatches: Dispatch[];
  destroy(): void;
}

/** Segment length and column flag of a granularity, as the kernels see it. */
function segOf(g: Granularity, n: number): { seg: number; columns: number } {
  switch (g.kind) {
    case 'tensor':
      return { seg: Math.max(n, 1), columns: 0 };
    case 'row':
      return { seg: g.rowLength, columns: 0 };
    case 'column':
      return { seg: g.rowLength, columns: 1 };
    case 'group':
      return { seg: g.size, columns: 0 };
  }
}

/** How the fused quantizer covers a tensor: segment length, invocations per segment, vec4 registers each. */
export interface FusedLayout {
  seg: number;
  team: number;
  regs: number;
}

/**
 * The fused quantizer's layout for `spec`, or null where only the passes apply (per column; a
 * segment length not a multiple of 4, INT4 8, so that no code word straddles two scales; a segment
 * longer than 4·16·GROUP_WG = 8192 elements). Default registers: 8 (32 elements per invocation),
 * but at least 4 invocations per segment where the segment has 16+ words, so that a warp's loads
 * come in runs of ≥ 64 contiguous bytes; more registers (up to 16) where a segment needs more than
 * a workgroup at 8. INT4 needs an even team (neighbours join their half-words). `regs` asks for
 * that many registers instead (the team then follows from it; more where the segment would not
 * fit a workgroup).
 */
export function fusedQuantizeLayout(spec: QuantizeSpec, regs?: number): FusedLayout | null {
  if (regs !== undefined) checkRegs('quantize', regs);
  const { seg, columns } = segOf(spec.granularity, spec.n);
  const int4 = BITS[spec.format] === 4;
  if (columns || seg % (int4 ? 8 : 4) !== 0) return null;
  const words = seg / 4;
  const want = regs ?? Math.min(DEFAULT_QUANT_REGS, Math.max(1, Math.floor(words / 4)));
  const team = Math.min(GROUP_WG, Math.max(int4 ? 2 : 1, nextPow2(Math.ceil(words / want))));
  const used = Math.ceil(words / team);
  return used <= MAX_REGS ? { seg, team, regs: used } : null;
}

/**
 * The segment length the fused dequantizer divides by, or null where only the per-element kernel
 * applies: one scale per vec4 word needs a multiple of 4 (or a single scale for the whole tensor).
 */
export function fusedDequantizeSegment(spec: QuantizeSpec): number | null {
  const { seg, columns } = segOf(spec.granularity, spec.n);
  if (columns) return null;
  return numScales(spec.granularity, spec.n) <= 1 || seg % 4 === 0 ? seg : null;
}

function checkRegs(label: string, regs: number): void {
  if (!Number.isInteger(regs) || regs < 1 || regs > MAX_REGS) throw new Error(`${label}: regs ${regs} must be an integer in 1..${MAX_REGS}`);
}

/** Resolves the requested path against what applies; throws when 'fused' was asked for and does not apply. */
function resolvePath<T>(label: string, want: QuantizePath | undefined, fused: T | null): T | null {
  if (want !== undefined && want !== 'fused' && want !== 'passes') throw new Error(`${label}: unknown path '${String(want)}'`);
  if (want === 'passes') return null;
  if (want === 'fused' && fused === null) {
    throw new Error(`${label}: no one-dispatch kernel for this granularity (it needs contiguous segments of a multiple of 4 elements, INT4 8, that fit a workgroup)`);
  }
  return fused;
}

function fusedGrid(rt: Runtime, label: string, tiles: number, opts: QuantizePathOptions): [number] {
  if (opts.maxWorkgroups !== undefined && !(Number.isInteger(opts.maxWorkgroups) && opts.maxWorkgroups >= 1)) {
    throw new Error(`${label}: maxWorkgroups ${opts.maxWorkgroups} must be a positive integer`);
  }
  return [Math.min(tiles, opts.maxWorkgroups ?? Infinity, rt.device.limits.maxComputeWorkgroupsPerDimension)];
}

/** A fused kernel's module: the group.wgsl sections for `entry` behind the shared snippets. */
function groupShader(entry: 'quantize' | 'dequantize', o: { subgroups: boolean; vec4Io: boolean; regs: number; f16?: DequantizeF16 }): string {
  const body = wgslSection(groupWgsl, entry);
  const subgroups = o.subgroups && entry === 'quantize';
  return [
    subgroups ? 'enable subgroups;' : '',
    `const WG: u32 = ${GROUP_WG}u;`,
    `const R: u32 = ${o.regs}u;`,
    codecWgsl,
    wgslSection(quantizeWgsl, 'common'),
    entry === 'quantize' ? wgslSection(groupWgsl, subgroups ? 'xchg_sg' : 'xchg_wg') : '',
    // An f16 dequantize stores through the f16 producers' writer (packed halves, or the twin's f32).
    o.f16
      ? `${F16_HALF_WGSL}\n${f16OutWgsl('y16', 3, 4, o.f16 === 'twin' ? 'f32' : 'f16')}\nfn store4(k: u32, v: vec4<f32>) { y16_store4(k, v); }`
      : wgslSection(groupWgsl, `${entry === 'quantize' ? 'load' : 'store'}_${o.vec4Io ? 'vec4' : 'scalar'}`),
    subgroups ? body.replaceAll('/*SG*/', ', @builtin(subgroup_size) sg: u32') : body,
  ].join('\n');
}

function paramsFor(spec: QuantizeSpec, items: number, rounding: QuantizeOptions, tiles = 0) {
  const { seg, columns } = segOf(spec.granularity, spec.n);
  return new Uniforms()
    .u32(spec.n)
    .u32(seg)
    .u32(columns)
    .u32(numScales(spec.granularity, spec.n))
    .u32(items)
    .u32(rounding.seed ?? 0)
    .u32(rounding.rounding === 'stochastic' ? 1 : 0)
    .f32(QMAX[spec.format])
    .u32(tiles);
}

function checkSpec(spec: QuantizeSpec): void {
  validateGranularity(spec.granularity, spec.n);
  if (spec.n >= 2 ** 32 - 8) throw new Error(`quantize: ${spec.n} elements exceed u32 indexing`);
}

type QuantizeBuildOptions = QuantizeOptions & QuantizePathOptions & {
  /** Testing hook: ulps added to the fused kernel's 1/s (a stand-in for a GPU with a 2.5-ulp division). */
  invSkewUlps?: number;
};

export function buildQuantize(
  rt: Runtime,
  spec: QuantizeSpec,
  x: Binding,
  opts: QuantizeBuildOptions & { words?: GPUBuffer; scales?: GPUBuffer; category?: MemCategory } = {},
): QuantizeKernel {
  checkSpec(spec);
  const numWords = wordsFor(spec.n, BITS[spec.format] as CodeBits);
  const nScales = numScales(spec.granularity, spec.n);
  const category = opts.category ?? 'workspace';
  const label = `quantize.${spec.format}.${granularityLabel(spec.granularity)}`;
  const owned: GPUBuffer[] = [];
  const own = (what: string, count: number) => {
    const b = rt.createBuffer(category, `${label}.${what}`, Math.max(count, 1) * 4);
    owned.push(b);
    return b;
  };
  const words = opts.words ?? own('words', numWords);
  const scales = opts.scales ?? own('scales', nScales);
  const { path, params, dispatches } = quantizeInto(rt, spec, x, words, scales, opts);
  owned.push(params);
  return {
    spec,
    path,
    numWords,
    numScales: nScales,
    words,
    scales,
    dispatches,
    params,
    setSeed(seed: number) {
      rt.write(params, Uint32Array.of(seed >>> 0), SEED_OFFSET);
    },
    destroy() {
      for (const b of owned) rt.mem.free(b);
    },
  };
}

/**
 * The dispatches that quantize x into `words` and `scales`, which may be slices of larger buffers
 * (offsets multiples of 256 bytes); `params` is the uniform they read (the caller's to free).
 */
export function quantizeInto(rt: Runtime, spec: QuantizeSpec, x: Binding, words: Binding, scales: Binding,
  opts: QuantizeBuildOptions = {}): { path: QuantizePath; params: GPUBuffer; dispatches: Dispatch[] } {
  checkSpec(spec);
  const { format, granularity, n } = spec;
  const label = `quantize.${format}.${granularityLabel(granularity)}`;
  if (format === 'nf4' && opts.rounding === 'stochastic') throw new Error(`${label}: NF4 has nearest rounding only (it stores a frozen base); drop rounding: 'stochastic'`);
  const nScales = numScales(granularity, n);
  const layout = resolvePath(label, opts.path, fusedQuantizeLayout(spec, opts.regs));
  if (!layout) return { path: 'passes', ...quantizePasses(rt, label, spec, x, words, scales, opts) };
  const tiles = Math.ceil(nScales / (GROUP_WG / layout.team));
  const params = rt.uniform(label, paramsFor(spec, 1, opts, tiles));
  const skew = opts.invSkewUlps ?? 0;
  if (!Number.isInteger(skew) || Math.abs(skew) > 64) throw new Error(`${label}: invSkewUlps ${skew} must be an integer within ±64`);
  return {
    path: 'fused',
    params,
    dispatches: [rt.kernel({
      label: `${label}.fused`,
      code: groupShader('quantize', {
        subgroups: (opts.subgroups ?? true) && rt.gpu.features.subgroups,
        vec4Io: n > 0 && n % 4 === 0,
        regs: layout.regs,
      }),
      entryPoint: 'quantize_group',
      constants: { FMT: FORMAT_ID[format], T: layout.team, ...(skew ? { INV_SKEW: skew } : {}) },
      bindings: [params, x, scales, words],
      workgroups: n === 0 ? [0] : fusedGrid(rt, label, tiles, opts),
    })],
  };
}

/** The four-pass quantizer (every granularity): clear → absmax → scales → encode. */
function quantizePasses(rt: Runtime, label: string, spec: QuantizeSpec, x: Binding, words: Binding, scales: Binding,
  rounding: QuantizeOptions): { params: GPUBuffer; dispatches: Dispatch[] } {
  const { format, granularity, n } = spec;
  const nScales = numScales(granularity, n);
  const { seg } = segOf(granularity, n);
  let items: number;
  let absmaxGrid: [number, number];
  if (granularity.kind === 'column') {
    const rows = n / seg;
    const colBlocks = Math.ceil(seg / WG);
    const max = rt.device.limits.maxComputeWorkgroupsPerDimension;
    if (colBlocks > max) throw new Error(`${label}: ${seg} columns exceed the grid limit`);
    items = Math.max(64, Math.ceil(rows / max));
    absmaxGrid = [colBlocks, Math.ceil(rows / items)];
  } else {
    // items ≤ seg keeps a tile within TILE_SEGS (258) segments; 16 per thread amortises the atomics.
    items = Math.min(16, Math.max(1, seg));
    absmaxGrid = grid2d(rt, Math.ceil(n / (WG * items)));
  }
  const params = rt.uniform(label, paramsFor(spec, items, rounding));
  const constants = { FMT: FORMAT_ID[format] };
  const sGrid = grid2d(rt, Math.ceil(nScales / WG));
  const dispatches = [
    rt.kernel({ label: `${label}.clear`, code: QUANTIZE_WGSL, entryPoint: 'clear_amax', bindings: [params, scales], workgroups: sGrid }),
    rt.kernel({
      label: `${label}.absmax`,
      code: QUANTIZE_WGSL,
      entryPoint: granularity.kind === 'column' ? 'absmax_col' : 'absmax_seg',
      bindings: [params, x, scales],
      workgroups: n === 0 ? [0] : absmaxGrid,
    }),
    rt.kernel({ label: `${label}.scales`, code: QUANTIZE_WGSL, entryPoint: 'finalize_scales', bindings: [params, scales], workgroups: sGrid }),
    rt.kernel({
      label: `${label}.encode`,
      code: QUANTIZE_WGSL,
      entryPoint: 'encode',
      constants,
      bindings: [params, x, scales, words],
      workgroups: grid2d(rt, Math.ceil(n / WG)),
    }),
  ];
  return { params, dispatches };
}

/**
 * One dequantize dispatch of `spec` (codes and scales bound from `words` / `scales`) into `out`,
 * on the fused kernel where it applies; `params` is the uniform it allocated.
 */
function dequantizeDispatch(rt: Runtime, label: string, spec: QuantizeSpec, words: Binding, scales: Binding, out: Binding,
  opts: QuantizePathOptions & { f16?: DequantizeF16 }): { dispatch: Dispatch; params: GPUBuffer; path: QuantizePath } {
  const seg = resolvePath(label, opts.f16 ? 'fused' : opts.path, fusedDequantizeSegment(spec));
  // The f16 stores write whole vec4s (two packed words).
  if (opts.f16 && spec.n % 4 !== 0) throw new Error(`${label}: an f16 dequantize needs a multiple of 4 elements, got ${spec.n}`);
  const constants = { FMT: FORMAT_ID[spec.format] };
  if (seg === null) {
    const params = rt.uniform(label, paramsFor(spec, 1, {}));
    const dispatch = rt.kernel({
      label,
      code: QUANTIZE_WGSL,
      entryPoint: 'dequantize',
      constants,
      bindings: [params, words, scales, out],
      workgroups: grid2d(rt, Math.ceil(spec.n / WG)),
    });
    return { dispatch, params, path: 'passes' };
  }
  const regs = opts.regs ?? DEFAULT_DEQUANT_REGS;
  checkRegs(label, regs);
  const tiles = Math.ceil(Math.ceil(spec.n / 4) / (GROUP_WG * regs));
  const params = rt.uniform(label, paramsFor(spec, 1, {}, tiles));
  const dispatch = rt.kernel({
    label: `${label}.fused${opts.f16 ? '.f16' : ''}`,
    code: groupShader('dequantize', { subgroups: false, vec4Io: spec.n > 0 && spec.n % 4 === 0, regs, f16: opts.f16 }),
    entryPoint: 'dequantize_group',
    // One pipeline for every single-scale tensor: 4·k / 0xffffffff = 0 (n < 2^32 − 8, checkSpec).
    constants: { ...constants, SEG: numScales(spec.granularity, spec.n) <= 1 ? 0xffffffff : seg },
    bindings: [params, words, scales, out],
    workgroups: spec.n === 0 ? [0] : fusedGrid(rt, label, tiles, opts),
  });
  return { dispatch, params, path: 'fused' };
}

export function buildDequantize(
  rt: Runtime,
  spec: QuantizeSpec,
  words: GPUBuffer,
  scales: GPUBuffer,
  opts: { out?: GPUBuffer; category?: MemCategory; f16?: DequantizeF16 } & QuantizePathOptions = {},
): DequantizeKernel {
  checkSpec(spec);
  const label = `dequantize.${spec.format}.${granularityLabel(spec.granularity)}`;
  const owned: GPUBuffer[] = [];
  const bytes = Math.max(spec.n, 1) * (opts.f16 === 'packed' ? 2 : 4);
  if (opts.out && opts.out.size < bytes) throw new Error(`${label}: out has ${opts.out.size} bytes, the dequantized tensor needs ${bytes}`);
  const out = opts.out ?? rt.createBuffer(opts.category ?? 'workspace', `${label}.out`, bytes);
  if (!opts.out) owned.push(out);
  const d = dequantizeDispatch(rt, label, spec, words, scales, out, opts);
  owned.push(d.params);
  return {
    spec,
    path: d.path,
    out,
    dispatches: [d.dispatch],
    destroy() {
      for (const b of owned) rt.mem.free(b);
    },
  };
}

/**
 * Dequantizes rows [r0, r0 + rows) of a quantized [*, rowLength] tensor (`spec` describes the whole
 * tensor) into `out`, by binding slices of its codes and scales: the slice offsets must be multiples
 * of 256 bytes (WebGPU's largest storage-offset alignment) and the first row must start a word and a
 * scale segment. `dequantizeRowsAligned` says whether a row block satisfies that.
 */
export function dequantizeRows(
  rt: Runtime, label: string, spec: QuantizeSpec, rowLength: number, r0: number, rows: number,
  words: GPUBuffer, scales: GPUBuffer, out: Binding,
): Dispatch {
  const s = rowSlices(spec, rowLength, r0, rows);
  if (!s) throw new Error(`${label}: rows ${r0}..${r0 + rows} of a ${spec.format} tensor are not 256-byte aligned in its codes or scales`);
  const part: QuantizeSpec = { ...spec, n: rows * rowLength };
  checkSpec(part);
  return dequantizeDispatch(rt, `${label}.dequantRows`, part, { buffer: words, ...s.words }, { buffer: scales, ...s.scales }, out, {}).dispatch;
}

/** True when every block of `rows` rows starting at a multiple of `rows` can be dequantized by `dequantizeRows`. */
export function dequantizeRowsAligned(spec: QuantizeSpec, rowLength: number, rows: number): boolean {
  // Offsets grow linearly with the first row, so the second block's decides for all.
  return rows * rowLength >= spec.n || rowSlices(spec, rowLength, rows, rows) !== null;
}

const OFFSET_ALIGN = 256;

function rowSlices(spec: QuantizeSpec, rowLength: number, r0: number, rows: number): { words: { offset: number; size: number }; scales: { offset: number; size: number } } | null {
  const first = r0 * rowLength;
  const n = rows * rowLength;
  const bits = BITS[spec.format] as CodeBits;
  const perWord = 32 / bits;
  if (first % perWord !== 0 || r0 + rows > spec.n / rowLength) return null;
  const wordsOffset = (first / perWord) * 4;
  let scales: { offset: number; size: number };
  const g = spec.granularity;
  if (g.kind === 'tensor' || g.kind === 'column') scales = { offset: 0, size: numScales(g, spec.n) * 4 };
  else {
    const seg = g.kind === 'row' ? g.rowLength : g.size;
    if (first % seg !== 0) return null;
    scales = { offset: (first / seg) * 4, size: Math.ceil(n / seg) * 4 };
  }
  if (wordsOffset % OFFSET_ALIGN !== 0 || scales.offset % OFFSET_ALIGN !== 0) return null;
  return { words: { offset: wordsOffset, size: wordsFor(n, bits) * 4 }, scales };
}

/**
 * Partial sums for the relative quantization error ‖x − x̂‖ / ‖x‖ of n values: workgroup k of
 * P = sumSquaresPartialCount(n) writes Σ(x − x̂)² to partials[errBase + k] and Σx² to
 * partials[refBase + k]. x̂ is `stored` (packed codes + scales of `spec`, decoded exactly as
 * `dequantize` does) or `xhat` (a fake-quantized fp32 copy). reduce.ts's normFinalize turns a block
 * of partials into a norm.
 */
export function quantErrorPartials(rt: Runtime, o: {
  label: string;
  x: Binding;
  n: number;
  partials: Binding;
  errBase: number;
  refBase: number;
  stored?: { spec: QuantizeSpec; words: Binding; scales: Binding };
  xhat?: Binding;
}): Dispatch {
  if (!o.stored === !o.xhat) throw new Error(`${o.label}: give exactly one of stored codes or a fake-quantized copy`);
  const P = sumSquaresPartialCount(o.n);
  requireBytes(o.label, 'x', o.x, o.n * 4);
  requireBytes(o.label, 'partials', o.partials, (Math.max(o.errBase, o.refBase) + P) * 4);
  if (o.stored) checkSpec(o.stored.spec);
  const { seg, columns } = o.stored ? segOf(o.stored.spec.granularity, o.n) : { seg: 1, columns: 0 };
  const params = rt.uniform(`${o.label}.qerr`, new Uniforms().u32(o.n).u32(seg).u32(columns).u32(o.errBase).u32(o.refBase));
  if (o.stored) {
    if (o.stored.spec.n !== o.n) throw new Error(`${o.label}: codes hold ${o.stored.spec.n} values, x has ${o.n}`);
    return rt.kernel({
      label: `${o.label}.qerr`,
      code: QUANTIZE_WGSL,
      entryPoint: 'quant_error',
      constants: { FMT: FORMAT_ID[o.stored.spec.format] },
      bindings: [params, o.x, o.stored.scales, o.partials, o.stored.words],
      workgroups: [P],
    });
  }
  requireBytes(o.label, 'xhat', o.xhat!, o.n * 4);
  return rt.kernel({
    label: `${o.label}.qerr`,
    code: QUANTIZE_WGSL,
    entryPoint: 'diff_partials',
    bindings: [params, o.x, o.xhat!, o.partials],
    workgroups: [P],
  });
}
