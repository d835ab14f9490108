/**
 * Tensor parallelism simulated on one device: the four all-reduces of a Megatron layer (forward:
 * after the row-parallel O-proj and down-proj; backward: the input gradients of the column-parallel
 * QKV and gate/up projections) are computed as t per-rank partial products, and each partial goes
 * through exactly the compression it would cross the wire with — a two-shot all-reduce: every rank
 * sends its chunk c (c ≠ own) compressed to chunk c's owner, owners sum in fp32, and the reduced
 * chunks are compressed once more for the all-gather (all ranks, the owner too, use the decompressed
 * values so replicas stay identical). With codec fp32 the same partial sums run uncompressed.
 * The same points across real peers: TpPeer (tp-peer.ts), whose numerics equal this simulation's.
 *
 * Shapes: N tokens, C hidden, F intermediate, KVC = nKV·D; t = degree; ranks own their heads'
 * columns of q/o, their KV heads' of k/v and F/t of the MLP (tpSharesOf: uneven when t does not
 * divide the heads — the simulation allows it, real peers (TpPeer) need even shards).
 */
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { axpy, copy } from '../../kernels/elementwise/elementwise';
import { matmul } from '../../kernels/matmul/matmul';
import { qdq } from '../../kernels/qdq/qdq';
import { gatherColumns } from '../../kernels/slice/slice';
import { tacoCompress, tacoDecompress } from '../../kernels/taco/taco';
import { tacoPayloadBytes } from '../../quant/taco';
import type { Scheme } from '../../scheme/scheme';
import type { BufferSpec, ModelDims } from '../dims';

export interface TpConfig {
  degree: number;
  codec: Scheme['tp']['codec'];
  group: number;
}

/** One projection sharing the input of a column-parallel group: its output gradient and the rows of W it holds. */
export interface ColumnParallelPart {
  dy: Binding;
  w: GPUBuffer;
  wOffset: number;
  /** Rows of W this model holds (all of them in the simulation, which splits them t ways). */
  rows: number;
}

/**
 * The four communication points of a Megatron layer, as LlamaGpu calls them; implemented on one
 * device (TpSim) and across peers (TpPeer, tp-peer.ts).
 */
export interface TensorParallel {
  /** target += all-reduce of x·Wᵀ, x [N, K], W [C, K] (this model's K input columns). */
  rowParallel(label: string, x: Binding, w: Binding, K: number, target: Binding): Dispatch[];
  /** target = all-reduce of Σ_j dY_j·W_j over the projections sharing an input. */
  columnParallelDx(label: string, parts: ColumnParallelPart[], target: Binding): Dispatch[];
}

export function tpActive(s: Scheme | undefined): s is Scheme {
  return !!s && s.tp.degree > 1;
}

/** A rank's slice of a sharded dimension: columns (or weight rows) [start, start + width). */
export interface TpShare {
  start: number;
  width: number;
}

/**
 * How a dimension of `units` slices of `unit` columns splits over t ranks: evenly when t divides
 * the units, else the first (units mod t) ranks take one slice more (Megatron needs even splits;
 * the simulation does not, so small's 6 heads can be simulated at TP 4 as 2+2+1+1).
 */
export function tpShares(units: number, unit: number, t: number): TpShare[] {
  const out: TpShare[] = [];
  let start = 0;
  for (let r = 0; r < t; r++) {
    const width = (Math.floor(units / t) + (r < units % t ? 1 : 0)) * unit;
    out.push({ start, width });
    start += width;
  }
  return out;
}

/**
 * The rank shares of a sharded width: q / attention output (QC) by query heads in whole KV groups
 * (a rank holds its KV heads' query heads), k / v (KVC) by KV heads, the MLP (F) by units.
 */
export function tpSharesOf(d: ModelDims, width: number, t: number): TpShare[] {
  const groups = tpShares(d.nKV, 1, t);
  const G = d.nH / d.nKV;
  if (width === d.QC) return groups.map((g) => ({ start: g.start * G * d.D, width: g.width * G * d.D }));
  if (width === d.KVC) return groups.map((g) => ({ start: g.start * d.D, width: g.width * d.D }));
  if (width === d.F) return tpShares(d.F, 1, t);
  throw new Error(`tensor parallel: no sharding rule for a width of ${width}`);
}

/** Why this model cannot be split t ways (null when it can). */
export function tpProblem(d: ModelDims, tp: TpConfig): string | null {
  const t = tp.degree;
  if (d.nKV < t || d.F < t) return `TP degree ${t} needs at least ${t} KV heads (${d.nKV}) and MLP units (${d.F}): every rank owns a KV head with its query heads`;
  const chunk = (d.N * d.C) / t;
  if (!Number.isInteger(chunk) || chunk % 64 || chunk % tp.group) {
    return `TP degree ${t}: a rank's chunk of ${d.N}x${d.C} (${chunk} values) must be a multiple of 64 and of the group ${tp.group}`;
  }
  for (const [width, what] of [[d.QC, 'q/o'], [d.KVC, 'k/v'], [d.F, 'gate/up']] as const) {
    if (tpSharesOf(d, width, t).some((sh) => (sh.start * d.C * 4) % 256 !== 0)) return `TP degree ${t}: ${what} weight shards (rows of ${d.C}) do not start 256-byte aligned`;
  }
  return null;
}

/** The widest share of any sharded width: sizes the gathered operand buffers. */
function maxShare(d: ModelDims, t: number): number {
  return Math.max(...[d.QC, d.KVC, d.F].flatMap((w) => tpSharesOf(d, w, t).map((sh) => sh.width)));
}

export function tpBufferPlan(d: ModelDims, tp: TpConfig): BufferSpec[] {
  const f = 4;
  const w = maxShare(d, tp.degree);
  const out: BufferSpec[] = [
    { key: 'tp.part', category: 'workspace', bytes: d.N * d.C * f },
    { key: 'tp.sum', category: 'workspace', bytes: d.N * d.C * f },
    { key: 'tp.a', category: 'workspace', bytes: d.N * w * f },
    { key: 'tp.w', category: 'workspace', bytes: d.C * w * f },
  ];
  // The send buffer: what one compressed tensor occupies on the wire.
  if (tp.codec === 'taco') out.push({ key: 'tp.payload', category: 'comm', bytes: tacoPayloadBytes(d.N * d.C, tp.group) });
  return out;
}

/** Bytes of one rank's chunk (N·C/t values) of an all-reduced [N, C] tensor in the codec. */
export function tpChunkWireBytes(d: ModelDims, tp: TpConfig): number {
  const chunk = (d.N * d.C) / tp.degree;
  return tp.codec === 'taco' ? tacoPayloadBytes(chunk, tp.group)
    : tp.codec === 'fp32' ? chunk * 4
      : chunk + 4 * Math.ceil(chunk / tp.group);
}

/** Bytes one rank sends per all-reduce of an [N, C] tensor (two-shot: (t−1) chunks out, then (t−1) copies of its reduced chunk). */
export function tpWireBytes(d: ModelDims, tp: TpConfig): number {
  return 2 * (tp.degree - 1) * tpChunkWireBytes(d, tp);
}

export class TpSim implements TensorParallel {
  constructor(
    private readonly rt: Runtime,
    private readonly d: ModelDims,
    private readonly tp: TpConfig,
    private readonly b: (key: string) => GPUBuffer,
  ) {
    const p = tpProblem(d, tp);
    if (p) throw new Error(p);
  }

  /** Compress + decompress `n` values in place (what arrives after crossing the wire). */
  private roundtrip(label: string, x: Binding, n: number): Dispatch[] {
    const { rt, tp } = this;
    switch (tp.codec) {
      case 'fp32':
        return [];
      case 'taco': {
        const payload = this.b('tp.payload');
        return [
          tacoCompress(rt, { label: `${label}.taco.c`, x, payload, n, G: tp.group }),
          tacoDecompress(rt, { label: `${label}.taco.d`, payload, y: x, n, G: tp.group }),
        ];
      }
      default:
        return [...qdq(rt, { label: `${label}.qdq`, x, n, spec: { format: tp.codec, granularity: 'group', group: tp.group, rounding: 'nearest' } })];
    }
  }

  /**
   * target (=, or += with accumulate) ← all-reduce over ranks of the [N, C] partials that
   * `partial(r)` writes into tp.part.
   */
  allReduce(label: string, partial: (r: number, part: GPUBuffer) => Dispatch[], target: Binding, accumulate: boolean): Dispatch[] {
    const { rt, d, tp } = this;
    const t = tp.degree;
    const n = d.N * d.C;
    const chunk = n / t;
    const part = this.b('tp.part');
    const sum = this.b('tp.sum');
    const out: Dispatch[] = [];
    for (let r = 0; r < t; r++) {
      out.push(...partial(r, part));
      for (let c = 0; c < t; c++) {
        if (c !== r) out.push(...this.roundtrip(`${label}.r${r}.c${c}`, { buffer: part, offset: c * chunk * 4, size: chunk * 4 }, chunk));
      }
      out.push(r === 0
        ? copy(rt, { label: `${label}.sum0`, src: part, dst: sum, n })
        : axpy(rt, { label: `${label}.sum${r}`, x: part, out: sum, alpha: 1, n }));
    }
    for (let c = 0; c < t; c++) {
      out.push(...this.roundtrip(`${label}.gather.c${c}`, { buffer: sum, offset: c * chunk * 4, size: chunk * 4 }, chunk));
    }
    out.push(accumulate
      ? axpy(rt, { label: `${label}.out`, x: sum, out: target, alpha: 1, n })
      : copy(rt, { label: `${label}.out`, src: sum, dst: target, n }));
    return out;
  }

  /** Row-parallel forward: target += Σ_r x[:, K_r]·W[:, K_r]ᵀ, x [N, K], W [C, K] (HF [out, in]). */
  rowParallel(label: string, x: Binding, w: Binding, K: number, target: Binding): Dispatch[] {
    const { rt, d } = this;
    const shares = tpSharesOf(d, K, this.tp.degree);
    const a = this.b('tp.a');
    const ws = this.b('tp.w');
    return this.allReduce(label, (r, part) => {
      const { start: c0, width: k } = shares[r];
      return [
        gatherColumns(rt, { label: `${label}.r${r}.x`, src: x, dst: a, rows: d.N, cols: K, c0, width: k }),
        gatherColumns(rt, { label: `${label}.r${r}.w`, src: w, dst: ws, rows: d.C, cols: K, c0, width: k }),
        matmul(rt, { label: `${label}.r${r}.gemm`, a, b: ws, c: part, M: d.N, N: d.C, K: k, transB: true }),
      ];
    }, target, true);
  }

  /**
   * Column-parallel input gradient: target = Σ_r Σ_j dY_j[:, rows_r]·W_j[rows_r, :] over the projections
   * j sharing the input (q, k, v or gate, up); each rank owns rows_r of every W_j.
   */
  columnParallelDx(label: string, parts: ColumnParallelPart[], target: Binding): Dispatch[] {
    const { rt, d } = this;
    const t = this.tp.degree;
    const a = this.b('tp.a');
    return this.allReduce(label, (r, part) => parts.flatMap((p, j) => {
      const { start, width: rr } = tpSharesOf(d, p.rows, t)[r];
      const wSlice = { buffer: p.w, offset: p.wOffset + start * d.C * 4, size: rr * d.C * 4 };
      return [
        gatherColumns(rt, { label: `${label}.r${r}.p${j}.dy`, src: p.dy, dst: a, rows: d.N, cols: p.rows, c0: start, width: rr }),
        matmul(rt, { label: `${label}.r${r}.p${j}.gemm`, a, b: wSlice, c: part, M: d.N, N: d.C, K: rr, accumulate: j > 0 }),
      ];
    }), target, false);
  }
}
