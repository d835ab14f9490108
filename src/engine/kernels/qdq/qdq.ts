/**
 * Fused fake quantization ("quantize then dequantize") of any binding slice, in place or into
 * `out`: x̂ = s·decode(encode(x / s)), s = max|x| / QMAX per tensor, row, column or group. Matches
 * qdqRef (./qdq.ref.ts = quantizeRef + dequantizeRef) bit for bit, stochastic rounding included.
 * Legend: N = elements, L = row length (rows, columns) or group size, C = columns (= L), R = N / C.
 *
 * Dispatches: row / group = one (a workgroup reduces whole segments in workgroup memory, then
 * writes); tensor / column = two (partial absmax, then qdq that folds the partials). Format,
 * granularity, rounding and seed are uniforms, so every spec shares three pipelines per binding
 * mode (in place, out of place): SwiftShader compiles stay few, and a new SR seed per step is a
 * 4-byte write (`setSeed`).
 *
 * Bindings may be {buffer, offset, size} slices (offsets multiples of 256 bytes). In place = `out`
 * omitted or the same binding as `x`. `x` and a different `out` must lie in different buffers:
 * WebGPU forbids one buffer as read-only and writable storage in one dispatch.
 * Groups run along the flattened slice (the reference's `group` granularity), not per row.
 */
import codecWgsl from '../../../../shaders/quant/codec.wgsl?raw';
import qdqWgsl from './qdq.wgsl?raw';
import type { MemCategory } from '../../gpu/memory';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { FORMAT_ID, QMAX } from '../../quant/formats';
import { type Granularity, validateGranularity } from '../../quant/quantizer';
import type { QuantSpec } from '../../scheme/scheme';
import { asSlice, grid2d, nextPow2, requireBytes, sameBinding } from '../launch';
import { specGranularity } from './qdq.ref';

const WG = 256;
/** Byte offset of `seed` in Params (n, len, tpseg, nseg, mode, nparts, rows_a, chunk, fmt, stochastic, seed, qmax). */
const SEED_OFFSET = 40;
/** fmt id of the identity (fp32 spec with a separate `out`: a plain copy through qdq_seg). */
const FMT_COPY = 4;
/** Tensor mode: at most this many partials (one workgroup of qdq_part folds them). */
const MAX_PARTS = 256;
/** Tensor mode: elements per qdq_part workgroup (amortises its fold of the partials). */
const TENSOR_CHUNK = WG * 8;
/** Column mode: amax_part row blocks ≤ COL_PARTS; qdq_part rows per workgroup. */
const COL_PARTS = 32;
const COL_CHUNK = 64;

const IN_PLACE_HEADER = `
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read_write> part: array<u32>;
fn ld(i: u32) -> f32 { return y[i]; }
fn st(i: u32, v: f32) { y[i] = v; }
fn touch_out() {}
`;
// touch_out keeps `y` in amax_part's auto layout so bindings stay contiguous (0..3) in every entry.
const OUT_OF_PLACE_HEADER = `
@group(0) @binding(1) var<storage, read> xin: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
@group(0) @binding(3) var<storage, read_write> part: array<u32>;
fn ld(i: u32) -> f32 { return xin[i]; }
fn st(i: u32, v: f32) { y[i] = v; }
fn touch_out() { _ = arrayLength(&y); }
`;

// In place, skipped when word 2 of `skip_state` (the loss scaler's found_inf) is set: a step the
// scaler skips must leave what it quantizes bit-identical. A guarded store rather than an early
// return keeps the barriers in uniform control flow.
const IN_PLACE_GUARDED_HEADER = `
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> skip_state: array<u32>;
@group(0) @binding(3) var<storage, read_write> part: array<u32>;
fn ld(i: u32) -> f32 { return y[i]; }
fn st(i: u32, v: f32) { if (skip_state[2] == 0u) { y[i] = v; } }
fn touch_out() { _ = skip_state[2]; }
`;

export const QDQ_WGSL_IN_PLACE = `${codecWgsl}\n${IN_PLACE_HEADER}\n${qdqWgsl}`;
const QDQ_WGSL_IN_PLACE_GUARDED = `${codecWgsl}\n${IN_PLACE_GUARDED_HEADER}\n${qdqWgsl}`;
export const QDQ_WGSL_OUT_OF_PLACE = `${codecWgsl}\n${OUT_OF_PLACE_HEADER}\n${qdqWgsl}`;

export interface QdqOptions {
  label: string;
  /** N f32 values (a whole buffer or a slice). */
  x: Binding;
  /** Destination (default: x, in place). */
  out?: Binding;
  n: number;
  /** Row length for 'row' / 'column' granularity (must divide n). */
  rowLength?: number;
  spec: QuantSpec;
  /**
   * Stochastic-rounding seed: element i (index within this slice) draws srUniform(seed, i). Give
   * each tensor its own seed (e.g. deriveSeed(step, label)), or slices see the same draws; rewrite
   * it per step with setSeed.
   */
  seed?: number;
  /** Ledger category of the scratch partials (tensor / column). Default 'workspace'. */
  category?: MemCategory;
  /**
   * In place only: leave x unchanged when word 2 of this buffer is nonzero (the loss scaler's state,
   * optim/loss-scale-gpu.ts: found_inf) — the study's fake-quantized Adam moments on a skipped step.
   */
  skipIf?: Binding;
}

/** The dispatches, plus the handles of the one uniform (and scratch) they share. */
export type QdqDispatches = Dispatch[] & {
  /** Rewrites the SR seed used by the next run of these dispatches (no-op for nearest / fp32). */
  setSeed(seed: number): void;
  /** Frees the uniform and scratch buffers this call allocated. */
  destroy(): void;
};

function withHandles(ds: Dispatch[], setSeed: (seed: number) => void, owned: GPUBuffer[], rt: Runtime): QdqDispatches {
  return Object.assign(ds, {
    setSeed,
    destroy() {
      for (const b of owned.splice(0)) rt.mem.free(b);
    },
  });
}

export function qdq(rt: Runtime, o: QdqOptions): QdqDispatches {
  const { label, spec, n } = o;
  if (!Number.isInteger(n) || n < 0) throw new Error(`${label}: invalid element count ${n}`);
  if (n > 2 ** 31) throw new Error(`${label}: ${n} elements exceed the kernel's u32 indexing`);
  const out = o.out ?? o.x;
  const inPlace = sameBinding(o.x, out);
  if (!inPlace && asSlice(o.x).buffer === asSlice(out).buffer) {
    throw new Error(`${label}: out-of-place qdq needs x and out in different buffers (or the same binding for in place)`);
  }
  requireBytes(label, 'x', o.x, n * 4);
  if (!inPlace) requireBytes(label, 'out', out, n * 4);
  const identity = spec.format === 'fp32';
  if (identity && inPlace) return withHandles([], () => {}, [], rt);
  if (o.skipIf && !inPlace) throw new Error(`${label}: skipIf needs an in-place qdq`);
  const fmt = spec.format === 'fp32' ? null : spec.format;
  const gran: Granularity = identity ? { kind: 'group', size: WG } : specGranularity(spec, o.rowLength);
  validateGranularity(gran, n);

  // Segmented path: rows, groups, and the fp32 copy (segments of 256, nothing to reduce).
  const segLen = gran.kind === 'row' ? gran.rowLength : gran.kind === 'group' ? gran.size : 0;
  const twoPass = segLen === 0;
  const mode = gran.kind === 'column' ? 1 : 0;
  const cols = gran.kind === 'column' ? gran.rowLength : 1;
  const rows = n / cols;

  let tpseg = 1;
  let nseg = 0;
  let nparts = 0;
  let rowsA = 0;
  let chunk = 0;
  if (!twoPass) {
    tpseg = Math.min(WG, nextPow2(segLen));
    nseg = Math.ceil(n / segLen);
  } else if (mode === 0) {
    nparts = Math.max(1, Math.min(MAX_PARTS, Math.ceil(n / TENSOR_CHUNK)));
    chunk = TENSOR_CHUNK;
  } else {
    rowsA = Math.max(COL_CHUNK, Math.ceil(rows / COL_PARTS));
    nparts = Math.max(1, Math.ceil(rows / rowsA));
    chunk = Math.max(COL_CHUNK, Math.ceil(rows / rt.device.limits.maxComputeWorkgroupsPerDimension));
  }
  const params = rt.uniform(
    label,
    new Uniforms()
      .u32(n)
      .u32(twoPass ? cols : segLen)
      .u32(tpseg)
      .u32(nseg)
      .u32(mode)
      .u32(nparts)
      .u32(rowsA)
      .u32(chunk)
      .u32(fmt ? FORMAT_ID[fmt] : FMT_COPY)
      .u32(spec.rounding === 'stochastic' ? 1 : 0)
      .u32((o.seed ?? 0) >>> 0)
      .f32(fmt ? QMAX[fmt] : 1),
  );
  const owned: GPUBuffer[] = [params];
  const setSeed = (seed: number) => rt.write(params, Uint32Array.of(seed >>> 0), SEED_OFFSET);
  const code = o.skipIf ? QDQ_WGSL_IN_PLACE_GUARDED : inPlace ? QDQ_WGSL_IN_PLACE : QDQ_WGSL_OUT_OF_PLACE;
  const data: Binding[] = o.skipIf ? [params, o.x, o.skipIf] : inPlace ? [params, o.x] : [params, o.x, out];
  const tag = `${label}.qdq.${spec.format}.${identity ? 'copy' : gran.kind}`;

  if (!twoPass) {
    const d = rt.kernel({ label: tag, code, entryPoint: 'qdq_seg', bindings: data, workgroups: grid2d(rt, Math.ceil(nseg / (WG / tpseg))) });
    return withHandles([d], setSeed, owned, rt);
  }
  const part = rt.createBuffer(o.category ?? 'workspace', `${tag}.part`, Math.max(1, nparts * cols) * 4);
  owned.push(part);
  const bindings = [...data, part];
  const colBlocks = Math.ceil(cols / WG);
  const empty = n === 0;
  const ds = [
    rt.kernel({
      label: `${tag}.amax`,
      code,
      entryPoint: 'amax_part',
      bindings,
      workgroups: empty ? [0] : mode === 0 ? [nparts] : [colBlocks, nparts],
    }),
    rt.kernel({
      label: `${tag}.apply`,
      code,
      entryPoint: 'qdq_part',
      bindings,
      workgroups: empty ? [0] : mode === 0 ? grid2d(rt, Math.ceil(n / chunk)) : [colBlocks, Math.ceil(rows / chunk)],
    }),
  ];
  return withHandles(ds, setSeed, owned, rt);
}
