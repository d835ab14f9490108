/**
 * Tensor parallelism across peers, the GPU side of one rank: the model is the rank's shard
 * (tp-shard.ts), so every GEMM computes only this rank's heads / MLP units, and at each of the four
 * communication points of a layer (forward: after the row-parallel O-proj and down-proj; backward:
 * the input gradients of the column-parallel QKV and gate/up) it writes its [N, C] partial into
 * tp.part and the dispatch list is cut: src/parallel/tp/group.ts runs the list segment by segment and
 * all-reduces in between, in the two shots of TpSim (tp.ts), so the numerics are the simulation's:
 *
 *   1. end of a segment: the partial's chunks c ≠ own, compressed (TACO: one payload per chunk,
 *      from the GPU kernel) or as fp32, go to chunk c's owner (all-to-all);
 *   2. reduce: the owner decodes what it received and sums its chunk in fp32 in rank order (its
 *      own chunk uncompressed), then compresses the reduced chunk once more;
 *   3. every rank uploads all t reduced chunks (all-gather; the owner uses the decoded bytes too),
 *      and the next segment decodes them into tp.sum and adds it to the residual (forward) or
 *      copies it into dh (backward).
 * Every rank ends with bit-identical sums, so the replicated tensors (embeddings, norms, lm_head)
 * and everything computed from the all-reduced activations stay identical on all ranks.
 *
 * Shapes: n = N·C values all-reduced, m = n/t per rank's chunk, `wire` bytes per chunk on the
 * wire, each in a 256-byte-aligned slot of the send / receive buffers.
 */
import { BUFFER_USAGE } from '../../gpu/memory';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { axpy, copy } from '../../kernels/elementwise/elementwise';
import { matmul } from '../../kernels/matmul/matmul';
import { globalNormMulti, globalNormPartialsBytes } from '../../kernels/reduce/reduce';
import { tacoCompress, tacoDecompress } from '../../kernels/taco/taco';
import { FP8_NAN } from '../../quant/fp8';
import { parseTacoPayload } from '../../quant/taco';
import type { ParamLayout } from '../params';
import type { BufferSpec, ModelDims } from '../dims';
import { type ColumnParallelPart, type TensorParallel, tpChunkWireBytes, type TpConfig } from './tp';
import { shardKind } from './shard';

const SLOT_ALIGN = 256;
/** Byte offset of the replicated tensors' norm in tp.norms (storage bindings start 256-byte aligned). */
const REPLICATED_NORM_OFFSET = 256;

/** Sizes of one rank's exchange. */
export interface TpPeerSizes {
  /** Values all-reduced at each point (N·C) and per rank's chunk. */
  n: number;
  m: number;
  /** Bytes of one chunk on the wire, and of its slot in the send/receive buffers. */
  wire: number;
  slot: number;
}

export function tpPeerSizes(d: ModelDims, tp: TpConfig): TpPeerSizes {
  const n = d.N * d.C;
  const wire = tpChunkWireBytes(d, tp);
  return { n, m: n / tp.degree, wire, slot: Math.ceil(wire / SLOT_ALIGN) * SLOT_ALIGN };
}

/** Why a shard with local dims `d` cannot be rank `rank` of this TP group (null when it can). */
export function tpPeerProblem(d: ModelDims, tp: TpConfig, rank?: number): string | null {
  const t = tp.degree;
  if (!Number.isInteger(t) || t < 2 || t > 8) return `TP degree ${t} must be an integer in [2, 8]`;
  if (tp.codec !== 'fp32' && tp.codec !== 'taco') return `tensor parallelism across peers sends fp32 or taco, not ${tp.codec}`;
  if (rank !== undefined && !(Number.isInteger(rank) && rank >= 0 && rank < t)) return `TP rank ${rank} is outside [0, ${t})`;
  const { n, m } = tpPeerSizes(d, tp);
  if (!Number.isInteger(m) || m % 64) return `TP degree ${t}: a rank's chunk of the ${d.N}x${d.C} activations (${n / t} values) must be a multiple of 64`;
  if (tp.codec === 'taco' && m % tp.group) return `TP degree ${t}: a rank's chunk (${m} values) must be a multiple of the TACO group ${tp.group}`;
  return null;
}

/** The buffers TpPeer adds to its model (layout: the shard's, for the gradient-norm partials; null without training). */
export function tpPeerBufferPlan(d: ModelDims, tp: TpConfig, layout: ParamLayout | null): BufferSpec[] {
  const t = tp.degree;
  const { n, m, slot } = tpPeerSizes(d, tp);
  const taco = tp.codec === 'taco';
  const out: BufferSpec[] = [
    { key: 'tp.part', category: 'workspace', bytes: 4 * n },
    { key: 'tp.sum', category: 'workspace', bytes: 4 * n },
    { key: 'tp.recv', category: 'comm', bytes: t * slot },
    // Shot 1 reads back every outgoing chunk at once (for fp32 the whole partial: t·slot = 4n).
    { key: 'tp.readback', category: 'comm', bytes: t * slot, usage: BUFFER_USAGE.MAP_READ | BUFFER_USAGE.COPY_DST },
  ];
  if (taco) out.push({ key: 'tp.send', category: 'comm', bytes: t * slot }, { key: 'tp.stage', category: 'workspace', bytes: 4 * m });
  if (layout) {
    out.push({ key: 'tp.normPartials', category: 'workspace', bytes: globalNormPartialsBytes(layout.views.map((v) => v.size)) });
    out.push({ key: 'tp.norms', category: 'workspace', bytes: REPLICATED_NORM_OFFSET + 4 });
  }
  return out;
}

/**
 * Why bytes a peer sent cannot be one chunk of this exchange (null when they can): the length of a
 * chunk, and values the sender's codec cannot produce (non-finite fp32; TACO scales outside the
 * compressor's range or the FP8 NaN code). Checked before anything is uploaded.
 */
export function tpChunkProblem(bytes: Uint8Array, m: number, tp: TpConfig): string | null {
  if (tp.codec === 'fp32') {
    if (bytes.length !== 4 * m) return `fp32 chunk of ${bytes.length} B, expected ${4 * m}`;
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    for (let i = 0; i < m; i++) if (!Number.isFinite(dv.getFloat32(4 * i, true))) return `fp32 chunk: non-finite value at ${i}`;
    return null;
  }
  try {
    const c = parseTacoPayload(bytes, m, tp.group);
    for (let i = 0; i < c.codes.length; i++) if ((c.codes[i] & 0x7f) === FP8_NAN) return `TACO chunk: NaN code at ${i}`;
  } catch (e) {
    return (e as Error).message;
  }
  return null;
}

/** A piece of a TP rank's dispatch list; one that ends at a communication point is followed by an all-reduce. */
export interface TpSegment {
  dispatches: Dispatch[];
  /** The point's label, or null for the list's tail. */
  allReduce: string | null;
}

export class TpPeer implements TensorParallel {
  readonly sizes: TpPeerSizes;
  /** The last dispatch before each communication point → the point's label. */
  private readonly points = new Map<Dispatch, string>();
  /** Shot 1 → 2: decode the received chunks, sum this rank's chunk, (TACO) compress it. */
  private readonly reduceDispatches: Dispatch[];
  private normDispatches: Dispatch[] | null = null;

  constructor(
    private readonly rt: Runtime,
    private readonly d: ModelDims,
    readonly tp: TpConfig,
    readonly rank: number,
    private readonly layout: ParamLayout,
    private readonly b: (key: string) => GPUBuffer,
  ) {
    const p = tpPeerProblem(d, tp, rank);
    if (p) throw new Error(p);
    this.sizes = tpPeerSizes(d, tp);
    this.reduceDispatches = this.buildReduce();
  }

  get degree(): number {
    return this.tp.degree;
  }

  private get taco(): boolean {
    return this.tp.codec === 'taco';
  }

  /** Chunk c of an fp32 [N, C] buffer. */
  private chunk(key: 'tp.part' | 'tp.sum' | 'tp.recv', c: number): Binding {
    const { m } = this.sizes;
    return { buffer: this.b(key), offset: c * m * 4, size: m * 4 };
  }

  /** Slot c (one chunk's wire bytes) of the send or receive payloads. */
  private slot(key: 'tp.send' | 'tp.recv', c: number): Binding {
    return { buffer: this.b(key), offset: c * this.sizes.slot, size: this.sizes.wire };
  }

  private compress(label: string, x: Binding, c: number): Dispatch {
    return tacoCompress(this.rt, { label: `${label}.taco.c${c}`, x, payload: this.slot('tp.send', c), n: this.sizes.m, G: this.tp.group });
  }

  private decompress(label: string, c: number, y: Binding): Dispatch {
    return tacoDecompress(this.rt, { label: `${label}.taco.d${c}`, payload: this.slot('tp.recv', c), y, n: this.sizes.m, G: this.tp.group });
  }

  private buildReduce(): Dispatch[] {
    const { rt, rank } = this;
    const { m } = this.sizes;
    const out: Dispatch[] = [];
    const sum = this.chunk('tp.sum', rank);
    for (let r = 0; r < this.degree; r++) {
      let src: Binding;
      if (r === rank) src = this.chunk('tp.part', rank);
      else if (this.taco) {
        src = { buffer: this.b('tp.stage'), offset: 0, size: m * 4 };
        out.push(this.decompress('tp.reduce', r, src));
      } else src = this.chunk('tp.recv', r);
      out.push(r === 0 ? copy(rt, { label: `tp.reduce.r${r}`, src, dst: sum, n: m }) : axpy(rt, { label: `tp.reduce.r${r}`, x: src, out: sum, alpha: 1, n: m }));
    }
    if (this.taco) out.push(this.compress('tp.reduce', sum, rank));
    return out;
  }

  /**
   * The partial's dispatches, the outgoing chunks' compression, the cut, then (after the exchange)
   * the decoding of the gathered sum and its use: target += sum, or target = sum.
   */
  private point(label: string, partial: Dispatch[], target: Binding, accumulate: boolean): Dispatch[] {
    const { rt } = this;
    const { n } = this.sizes;
    const before = [...partial];
    const after: Dispatch[] = [];
    if (this.taco) {
      for (let c = 0; c < this.degree; c++) {
        if (c !== this.rank) before.push(this.compress(label, this.chunk('tp.part', c), c));
        after.push(this.decompress(label, c, this.chunk('tp.sum', c)));
      }
    }
    this.points.set(before[before.length - 1], label);
    const sum = this.b('tp.sum');
    after.push(accumulate
      ? axpy(rt, { label: `${label}.out`, x: sum, out: target, alpha: 1, n })
      : copy(rt, { label: `${label}.out`, src: sum, dst: target, n }));
    return [...before, ...after];
  }

  rowParallel(label: string, x: Binding, w: Binding, K: number, target: Binding): Dispatch[] {
    const { d } = this;
    return this.point(label, [
      matmul(this.rt, { label: `${label}.gemm`, a: x, b: w, c: this.b('tp.part'), M: d.N, N: d.C, K, transB: true }),
    ], target, true);
  }

  columnParallelDx(label: string, parts: ColumnParallelPart[], target: Binding): Dispatch[] {
    const { d } = this;
    return this.point(label, parts.map((p, j) => matmul(this.rt, {
      label: `${label}.p${j}.gemm`, a: p.dy, b: { buffer: p.w, offset: p.wOffset, size: p.rows * d.C * 4 }, c: this.b('tp.part'),
      M: d.N, N: d.C, K: p.rows, accumulate: j > 0,
    })), target, false);
  }

  /** Splits one of the model's dispatch lists at its communication points. */
  segments(list: Dispatch[]): TpSegment[] {
    const out: TpSegment[] = [];
    let cur: Dispatch[] = [];
    for (const x of list) {
      cur.push(x);
      const label = this.points.get(x);
      if (label !== undefined) {
        out.push({ dispatches: cur, allReduce: label });
        cur = [];
      }
    }
    if (cur.length) out.push({ dispatches: cur, allReduce: null });
    return out;
  }

  /** Why bytes from a peer cannot be a chunk of this exchange (null when they can). */
  chunkProblem(bytes: Uint8Array): string | null {
    return tpChunkProblem(bytes, this.sizes.m, this.tp);
  }

  /** Runs dispatches, then copies `sources` (buffer, byte offset, bytes) back to the CPU, concatenated. */
  private async runAndRead(dispatches: Dispatch[], sources: [GPUBuffer, number, number][]): Promise<Uint8Array> {
    const rb = this.b('tp.readback');
    let at = 0;
    this.rt.run(dispatches, (enc) => {
      for (const [src, off, bytes] of sources) {
        enc.copyBufferToBuffer(src, off, rb, at, bytes);
        at += bytes;
      }
    });
    await rb.mapAsync(GPUMapMode.READ, 0, at);
    const out = new Uint8Array(rb.getMappedRange(0, at).slice(0));
    rb.unmap();
    return out;
  }

  /** Shot 1: runs a segment that ends at a point; returns the chunk for each rank (own: empty). */
  async runToPoint(dispatches: Dispatch[]): Promise<Uint8Array[]> {
    const { slot, wire } = this.sizes;
    const t = this.degree;
    // fp32: the partial's chunks are its slots (slot = 4m); TACO: the compressed slots.
    const bytes = await this.runAndRead(dispatches, [[this.b(this.taco ? 'tp.send' : 'tp.part'), 0, t * slot]]);
    return Array.from({ length: t }, (_, r) => (r === this.rank ? new Uint8Array(0) : bytes.subarray(r * slot, r * slot + wire)));
  }

  /**
   * Shot 1 → 2: uploads the chunks the other ranks sent for this rank's chunk (each checked with
   * chunkProblem first), sums it and returns the reduced chunk's wire bytes.
   */
  async reduce(received: Uint8Array[]): Promise<Uint8Array> {
    const { slot, wire } = this.sizes;
    for (let r = 0; r < this.degree; r++) if (r !== this.rank) this.rt.write(this.b('tp.recv'), received[r], r * slot);
    const src = this.taco ? this.b('tp.send') : this.b('tp.sum');
    return this.runAndRead(this.reduceDispatches, [[src, this.rank * slot, wire]]);
  }

  /** Shot 2: uploads every rank's reduced chunk (checked); the next segment decodes them into tp.sum. */
  loadGathered(chunks: Uint8Array[]): void {
    const dst = this.b(this.taco ? 'tp.recv' : 'tp.sum');
    chunks.forEach((c, r) => this.rt.write(dst, c, r * this.sizes.slot));
  }

  /** Sum-of-squares partials of the sharded and of the replicated gradients into tp.norms. */
  private get gradNormDispatches(): Dispatch[] {
    if (!this.normDispatches) {
      const grads = this.b('grads');
      const part = (v: { offset: number; size: number }) => ({ x: { buffer: grads, offset: v.offset * 4, size: v.size * 4 }, n: v.size });
      const sharded = this.layout.views.filter((v) => shardKind(v.name) !== 'replicated');
      const replicated = this.layout.views.filter((v) => shardKind(v.name) === 'replicated');
      const norms = this.b('tp.norms');
      const partials = this.b('tp.normPartials');
      this.normDispatches = [
        ...globalNormMulti(this.rt, { label: 'tp.norm.sharded', parts: sharded.map(part), partials, out: { buffer: norms, offset: 0, size: 4 } }),
        ...globalNormMulti(this.rt, { label: 'tp.norm.replicated', parts: replicated.map(part), partials, out: { buffer: norms, offset: REPLICATED_NORM_OFFSET, size: 4 } }),
      ];
    }
    return this.normDispatches;
  }

  /**
   * The gradient norms of this rank's shards and of the replicated tensors (identical on every
   * rank), and the step's loss: what the global clipping norm is assembled from.
   */
  async gradNormsAndLoss(): Promise<{ sharded: number; replicated: number; loss: number }> {
    const norms = this.b('tp.norms');
    const bytes = await this.runAndRead(this.gradNormDispatches, [[norms, 0, 4], [norms, REPLICATED_NORM_OFFSET, 4], [this.b('loss'), 0, 4]]);
    const [sharded, replicated, loss] = new Float32Array(bytes.buffer, bytes.byteOffset, 3);
    return { sharded, replicated, loss };
  }

  /** The mean loss of the last forward (evaluation). */
  async loss(): Promise<number> {
    const bytes = await this.runAndRead([], [[this.b('loss'), 0, 4]]);
    return new Float32Array(bytes.buffer, bytes.byteOffset, 1)[0];
  }

  /** Writes the global gradient norm the optimizer clips with. */
  setGradNorm(norm: number): void {
    this.rt.write(this.b('gradNorm'), Float32Array.of(norm));
  }
}
