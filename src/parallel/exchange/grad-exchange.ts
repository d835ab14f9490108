/**
 * The data-parallel exchange on the GPU: this member's contribution in wire bytes, and the mean of
 * every member's contribution written where the optimizer reads the gradient — with no
 * per-element JavaScript. The wire is peers/allreduce.ts's, byte for byte, applied to the whole
 * exchange vector: 'int8' = ⌈n/256⌉ fp32 LE scales, then n int8 codes (absmax per block of 256,
 * round to nearest, encodeInt8Chunk's codes); 'fp32' = n LE floats.
 *
 * The exchange vector is a flat fp32 buffer of n floats (the model's `grads`, or any buffer: DiLoCo
 * exchanges pseudo-gradients θ_start − θ_local), or, over quantized gradient storage (AGoQ), every
 * tensor at a multiple of 256 floats (peers/dp-grads.ts's layout) with zero padding between.
 *
 * - encode: quantized on the GPU by the engine's block quantizer; codes and scales (or floats)
 *   reach the host in one readback through a persistent staging buffer. Stored INT8 blocks of 256
 *   are the wire's own blocks, so their codes and scales are copied straight. That equals
 *   re-encoding the dequantized gradient: a stored block has s = RN(a/127) for its absmax a, so
 *   RN(127·s) lies within 63·ulp(s) of 127·s (a itself is that close, and RN picks the nearest),
 *   hence RN(RN(127·s)/127) = s; every code c ≤ 127 in magnitude decodes to RN(c·s) = c·s·(1+δ),
 *   |δ| ≤ 2^-24, which re-encodes to c (tests/parallel/grad-exchange.test.ts checks it).
 * - reduce: the contributions are uploaded with queue writes into one buffer, their mean computed
 *   on the GPU (kernels/exchange.ts: fp32 sum in member order, divided by the count — the JS
 *   all-reduce's arithmetic for INT8), then re-quantized on the GPU into the storage, if any.
 * - reduceChunk / assign: the owner's step and the final step of the two-shot all-reduce.
 * - stats: screening figures of each contribution (‖x‖², finite), the same on every member.
 * - gram: every pair's dot product x_j·x_k (the screen's cosines), the same on every member.
 * - encodeRange / streamPlan: one bucket's bytes at a time behind backward (exchange-ranges.ts).
 *
 * Byte arrays returned by encode and reduceChunk are overwritten by the next call of the same
 * method: send or copy them first. One operation at a time (calls are awaited in turn).
 */
import type { Binding, Runtime } from '../../engine/gpu/runtime';
import { exchangeCheckFp32, exchangeGramInt8, type ExchangeKernel, exchangeMean, exchangeSumSquares, gramPairs, type InboxShape } from '../../engine/kernels/exchange/exchange';
import { buildQuantize, type QuantizeKernel } from '../../engine/kernels/quantize/quantize';
import type { LlamaGpu } from '../../engine/model/llama';
import { AGOQ_BLOCK, type GradWire } from '../../engine/scheme/wire';
import { wireScales } from '../../engine/kernels/exchange/exchange.ref';
import {
  alignUp, checkContribution, ContributionError, contributionProblem, fp32Dot, fp32Norm2, int8Dot, int8Norm2, Readback, type Step,
  int8WireSpec, type StoredSlot, storedLayout, submitSteps, wireBytes,
} from './wire';
import { type FinalRange, modelFinals, RangeEncoder, streamPlan, type StreamPlan } from './ranges';
import { StoredGradients } from './stored';

export { ContributionError } from './wire';


/** Screening figures of one contribution; `problem` says why it could not be measured (then finite is false). */
export interface ContributionStats {
  finite: boolean;
  /** ‖x‖² (NaN where not finite). */
  norm2: number;
  problem?: string;
}

export class GradExchange {
  /** Floats in the exchange vector. */
  readonly n: number;
  /** Wire bytes of one contribution. */
  readonly bytes: number;
  private readonly nb: number;
  /** The fp32 exchange vector (the source buffer, or an own buffer over quantized storage). */
  private readonly vec: GPUBuffer;
  /** Where the mean goes (flat: the source unless `out` was given). */
  private readonly out: GPUBuffer;
  private readonly stored: StoredGradients | null;
  private readonly owned: GPUBuffer[] = [];
  private readonly kernels: { destroy(): void }[] = [];
  /** The whole vector quantized to the wire (int8 wire, or direct storage). */
  private readonly wireQ: QuantizeKernel | null;
  private readonly encodeSteps: Step[];
  private readonly encodeBack: Readback;
  private readonly smallBack: Readback;
  private readonly chunkBack: Readback;
  private inbox: GPUBuffer | null = null;
  private flags: GPUBuffer | null = null;
  private chunkMean: GPUBuffer | null = null;
  private sums: GPUBuffer | null = null;
  private gramBuf: GPUBuffer | null = null;
  private readonly cache = new Map<string, ExchangeKernel>();
  private readonly chunkQ = new Map<number, QuantizeKernel>();
  /**
   * The arrays the last stats call uploaded, slot by slot: the next reduce or reduceChunk of the
   * same arrays (unchanged in between) reads them from there and clears this; any other upload or
   * an encode clears it too (encode's array is refilled in place).
   */
  private uploaded: { arrays: Uint8Array[]; n: number } | null = null;
  /** Where each tensor lies in the vector and after which backward dispatch it is final (null: not a model's gradient). */
  private finals: FinalRange[] | null = null;
  private ranges: RangeEncoder | null = null;

  /** The exchange of a training model's gradient (flat `grads`, or its quantized storage). */
  static forModel(model: LlamaGpu, wire: GradWire): GradExchange {
    if (!model.training) throw new Error('GradExchange: the model was built without training buffers');
    const layout = storedLayout(model);
    const ex = layout ? new GradExchange(model.rt, wire, { layout, stage: model.b('gradStage') }) : new GradExchange(model.rt, wire, { buffer: model.b('grads'), n: model.layout.totalFloats });
    ex.finals = modelFinals(model, layout?.slots ?? null);
    return ex;
  }

  /** Whether buckets can be encoded one by one behind backward (a model's gradient; not fp32 over INT8 storage). */
  get streamable(): boolean {
    return this.finals !== null && !(this.stored?.direct && this.wire === 'fp32');
  }

  /** The backward segments that complete the given buckets (Trainer.computeGradients' cuts). */
  streamPlan(spans: [number, number][]): StreamPlan {
    if (!this.streamable) throw new Error('GradExchange: this exchange is not streamed behind backward');
    return streamPlan(this.finals!, spans);
  }

  /**
   * The wire bytes of bucket [lo, hi) alone: wireChunk's of the whole encode, with its own command
   * buffer and readback (slot: the bucket's index; valid until the next encodeRange of that slot).
   * Call it once the backward segment that completes the bucket is submitted.
   */
  encodeRange(lo: number, hi: number, slot: number): Promise<Uint8Array> {
    if (!this.streamable) throw new Error('GradExchange: this exchange is not streamed behind backward');
    this.uploaded = null;
    this.ranges ??= new RangeEncoder({ rt: this.rt, wire: this.wire, n: this.n, vec: this.vec, stored: this.stored });
    return this.ranges.encode(lo, hi, slot);
  }

  /** The exchange of any fp32 buffer of n floats; the mean goes to `out` (default: the buffer itself). */
  static forBuffer(rt: Runtime, wire: GradWire, buffer: GPUBuffer, n: number, out?: GPUBuffer): GradExchange {
    return new GradExchange(rt, wire, { buffer, n, out });
  }

  private constructor(
    private readonly rt: Runtime,
    readonly wire: GradWire,
    src: { buffer: GPUBuffer; n: number; out?: GPUBuffer } | { layout: { slots: StoredSlot[]; length: number }; stage: GPUBuffer },
  ) {
    if (wire !== 'fp32' && wire !== 'int8') throw new Error(`GradExchange: unknown wire format '${String(wire)}'`);
    this.encodeBack = new Readback(rt, 'exchange.encode');
    this.smallBack = new Readback(rt, 'exchange.small');
    this.chunkBack = new Readback(rt, 'exchange.chunk');
    if ('buffer' in src) {
      if (!(Number.isInteger(src.n) && src.n >= 1) || src.buffer.size < 4 * src.n) throw new Error(`GradExchange: buffer of ${src.buffer.size} B cannot hold ${src.n} floats`);
      this.n = src.n;
      this.vec = src.buffer;
      this.out = src.out ?? src.buffer;
      if (this.out.size < 4 * this.n) throw new Error(`GradExchange: output buffer of ${this.out.size} B cannot hold ${this.n} floats`);
      this.stored = null;
    } else {
      this.n = src.layout.length;
      this.vec = this.own(rt.createBuffer('comm', 'exchange.vec', 4 * this.n));
      this.out = this.vec;
      this.stored = new StoredGradients(rt, src.layout.slots, src.stage, this.vec);
    }
    this.nb = Math.ceil(this.n / AGOQ_BLOCK);
    this.bytes = wireBytes(this.n, wire);
    this.wireQ = wire === 'int8' || this.stored?.direct ? this.kernel(buildQuantize(rt, int8WireSpec(this.n), this.vec, { category: 'comm' })) : null;
    this.encodeSteps = this.buildEncode();
  }

  /** Whether stored gradients cross to the wire as they are (AGoQ's INT8 blocks of 256). */
  get direct(): boolean {
    return !!this.stored?.direct && this.wire === 'int8';
  }

  private own(b: GPUBuffer): GPUBuffer {
    this.owned.push(b);
    return b;
  }

  private kernel<T extends { destroy(): void }>(k: T): T {
    this.kernels.push(k);
    return k;
  }

  private loadSteps(): Step[] {
    return this.stored ? this.stored.loadSteps(this.wireQ) : [];
  }

  private buildEncode(): Step[] {
    const staging = this.encodeBack.buffer(this.bytes);
    const codesAt = 4 * this.nb;
    if (this.wire === 'fp32') return [...this.loadSteps(), (e) => e.copyBufferToBuffer(this.vec, 0, staging, 0, 4 * this.n)];
    if (this.direct) {
      // Straight from the storage; the padding codes between tensors are never written (zero).
      return [this.stored!.toWire(staging, 0, this.n)];
    }
    const q = this.wireQ!;
    return [...this.loadSteps(), q.dispatches, (e) => {
      e.copyBufferToBuffer(q.scales, 0, staging, 0, 4 * this.nb);
      e.copyBufferToBuffer(q.words, 0, staging, codesAt, alignUp(this.n, 4));
    }];
  }

  /** This member's contribution in wire bytes (valid until the next encode). */
  async encode(): Promise<Uint8Array> {
    this.uploaded = null;
    submitSteps(this.rt, this.encodeSteps);
    return this.encodeBack.read(this.bytes);
  }

  // ---- the inbox: every contribution's bytes, one stride apart -------------------------------------

  private ensureInbox(slots: number, strideBytes: number): void {
    const need = slots * strideBytes;
    if (this.inbox && this.inbox.size >= need) return;
    if (this.inbox) this.rt.mem.free(this.inbox);
    for (const k of this.cache.values()) k.destroy();
    this.cache.clear();
    this.inbox = this.rt.createBuffer('comm', 'exchange.inbox', Math.max(need, 2 * this.bytes));
  }

  private strideOf(n: number): number {
    return alignUp(wireBytes(n, this.wire), 256);
  }

  private shape(n: number): InboxShape {
    const stride = this.strideOf(n);
    return { n, wire: this.wire, strideWords: stride / 4, slots: Math.floor(this.inbox!.size / stride) };
  }

  private cached(key: string, build: () => ExchangeKernel): ExchangeKernel {
    let k = this.cache.get(key);
    if (!k) this.cache.set(key, (k = build()));
    return k;
  }

  private write(offset: number, bytes: Uint8Array): void {
    const q = this.rt.device.queue;
    const whole = bytes.length & ~3;
    if (whole) q.writeBuffer(this.inbox!, offset, bytes, 0, whole);
    if (whole < bytes.length) {
      const tail = new Uint8Array(4);
      tail.set(bytes.subarray(whole));
      q.writeBuffer(this.inbox!, offset + whole, tail);
    }
  }

  /**
   * Checks and uploads the non-null contributions (of n elements each) into consecutive slots;
   * returns the member index of each slot. Skips the upload where stats just uploaded these very
   * arrays (the same list, or the list less some of its last members); `keep` (stats) lets the next call do so.
   */
  private upload(list: (Uint8Array | null)[], n: number, what: string, keep = false): number[] {
    const members = list.flatMap((b, i) => (b ? [i] : []));
    if (members.length === 0) throw new Error(`GradExchange.${what}: no contribution to average (all ${list.length} left out)`);
    for (const m of members) checkContribution(list[m]!, n, this.wire, m);
    const arrays = members.map((m) => list[m]!);
    const u = this.uploaded;
    this.uploaded = null;
    if (!(u && u.n === n && arrays.length <= u.arrays.length && arrays.every((b, i) => b === u.arrays[i]))) {
      const stride = this.strideOf(n);
      this.ensureInbox(members.length, stride);
      arrays.forEach((b, slot) => this.write(slot * stride, b));
    }
    if (keep) this.uploaded = { arrays, n };
    return members;
  }

  /** fp32 contributions: throws naming the first member whose values are not all finite. */
  private async checkFinite(n: number, members: number[]): Promise<void> {
    if (this.wire !== 'fp32') return;
    const s = this.shape(n);
    this.flags ??= this.own(this.rt.createBuffer('comm', 'exchange.flags', 4 * 1024));
    if (s.slots > 1024) throw new Error(`GradExchange: more than 1024 contributions`);
    const k = this.cached(`check:${n}`, () => exchangeCheckFp32(this.rt, 'exchange', s, this.inbox!, this.flags!));
    k.setCount(members.length);
    const bytes = 4 * members.length;
    const staging = this.smallBack.buffer(bytes);
    submitSteps(this.rt, [(e) => e.clearBuffer(this.flags!, 0, bytes), [k.dispatch], (e) => e.copyBufferToBuffer(this.flags!, 0, staging, 0, bytes)]);
    const flags = new Uint32Array((await this.smallBack.read(bytes)).slice().buffer);
    const bad = flags.findIndex((f) => f !== 0);
    if (bad >= 0) throw new ContributionError(members[bad], 'NaN or infinite values');
  }

  /** The mean of the uploaded slots into `out` (n floats at offset 0). */
  private meanKernel(n: number, out: Binding, key: string, count: number): ExchangeKernel {
    const k = this.cached(`mean:${key}:${n}`, () => exchangeMean(this.rt, 'exchange', this.shape(n), this.inbox!, out));
    k.setCount(count);
    return k;
  }

  /** Where the optimizer reads: the mean re-quantized into the storage, if any. */
  private storeSteps(): Step[] {
    return this.stored ? this.stored.storeSteps(this.wireQ) : [];
  }

  /**
   * The mean of the members' contributions (member order; null = left out, the mean is over the
   * others), written where the optimizer reads the gradient. Throws ContributionError naming the
   * member of a malformed contribution before anything is written.
   */
  async reduce(contributions: (Uint8Array | null)[]): Promise<void> {
    const members = this.upload(contributions, this.n, 'reduce');
    await this.checkFinite(this.n, members);
    submitSteps(this.rt, [[this.meanKernel(this.n, this.out, 'full', members.length).dispatch], ...this.storeSteps()]);
  }

  /**
   * The two-shot all-reduce's owner step: the mean of the members' pieces of chunk [lo, hi) (each
   * in the wire's format for hi − lo elements, member order, null = left out), re-quantized to the
   * wire (INT8) or as fp32 bytes. Valid until the next reduceChunk.
   */
  async reduceChunk(pieces: (Uint8Array | null)[], lo: number, hi: number): Promise<Uint8Array> {
    this.checkChunk(lo, hi);
    const len = hi - lo;
    const members = this.upload(pieces, len, 'reduceChunk');
    await this.checkFinite(len, members);
    this.chunkMean ??= this.own(this.rt.createBuffer('comm', 'exchange.chunkMean', 4 * this.n));
    const mean = this.meanKernel(len, this.chunkMean, 'chunk', members.length);
    const bytes = wireBytes(len, this.wire);
    const staging = this.chunkBack.buffer(bytes);
    if (this.wire === 'fp32') {
      submitSteps(this.rt, [[mean.dispatch], (e) => e.copyBufferToBuffer(this.chunkMean!, 0, staging, 0, 4 * len)]);
    } else {
      let q = this.chunkQ.get(len);
      if (!q) this.chunkQ.set(len, (q = this.kernel(buildQuantize(this.rt, int8WireSpec(len), this.chunkMean, { category: 'comm' }))));
      const nb = Math.ceil(len / AGOQ_BLOCK);
      submitSteps(this.rt, [[mean.dispatch], q.dispatches, (e) => {
        e.copyBufferToBuffer(q.scales, 0, staging, 0, 4 * nb);
        e.copyBufferToBuffer(q.words, 0, staging, 4 * nb, alignUp(len, 4));
      }]);
    }
    return this.chunkBack.read(bytes);
  }

  private checkChunk(lo: number, hi: number): void {
    if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 0 && lo < hi && hi <= this.n)) throw new Error(`GradExchange: chunk [${lo}, ${hi}) outside [0, ${this.n})`);
    if (this.wire === 'int8' && lo % AGOQ_BLOCK !== 0) throw new Error(`GradExchange: chunk start ${lo} is not a multiple of ${AGOQ_BLOCK}`);
  }

  /**
   * The two-shot all-reduce's last step: the owners' reduced chunks (chunk r covers bounds[r], in
   * order, together [0, n)) decoded into where the optimizer reads the gradient.
   */
  async assign(chunks: Uint8Array[], bounds: [number, number][]): Promise<void> {
    if (chunks.length !== bounds.length) throw new Error(`GradExchange.assign: ${chunks.length} chunks for ${bounds.length} bounds`);
    let at = 0;
    const parts = chunks.map((c, r) => {
      const [lo, hi] = bounds[r];
      if (lo !== at) throw new Error(`GradExchange.assign: chunk ${r} starts at ${lo}, expected ${at}`);
      at = hi;
      if (hi === lo) return null;
      this.checkChunk(lo, hi);
      checkContribution(c, hi - lo, this.wire, r);
      return { c, lo, hi };
    });
    if (at !== this.n) throw new Error(`GradExchange.assign: chunks cover [0, ${at}), expected [0, ${this.n})`);
    this.uploaded = null;
    this.ensureInbox(1, this.strideOf(this.n));
    for (const p of parts) {
      if (!p) continue;
      if (this.wire === 'fp32') {
        this.write(4 * p.lo, p.c);
        continue;
      }
      const nb = Math.ceil((p.hi - p.lo) / AGOQ_BLOCK);
      this.write(4 * (p.lo / AGOQ_BLOCK), p.c.subarray(0, 4 * nb));
      this.write(4 * this.nb + p.lo, p.c.subarray(4 * nb));
    }
    // Slot 0 holds every owner's chunk: a NaN is reported without its owner.
    await this.checkFinite(this.n, [0]).catch((e: unknown) => {
      throw e instanceof ContributionError ? new Error('GradExchange.assign: a gathered fp32 chunk holds NaN or infinite values') : e;
    });
    submitSteps(this.rt, [[this.meanKernel(this.n, this.out, 'full', 1).dispatch], ...this.storeSteps()]);
  }

  /**
   * Screening figures per member (null entries stay null): ‖x‖² and finiteness; a malformed
   * contribution gets finite = false and the problem, never an exception. INT8: per-block
   * integer sums of squares on the GPU (the contributions stay uploaded for a reduce of the same
   * arrays), combined with the scales in fp64; fp32: fp64 on the host.
   */
  async stats(contributions: (Uint8Array | null)[], n = this.n): Promise<(ContributionStats | null)[]> {
    const out: (ContributionStats | null)[] = contributions.map((b) => {
      if (!b) return null;
      const problem = contributionProblem(b, n, this.wire);
      return problem ? { finite: false, norm2: NaN, problem } : { finite: true, norm2: 0 };
    });
    const ok = contributions.map((b, i) => (out[i]?.finite ? b : null));
    if (this.wire === 'fp32') {
      ok.forEach((b, i) => {
        if (!b) return;
        const norm2 = fp32Norm2(b, n);
        out[i] = Number.isFinite(norm2) ? { finite: true, norm2 } : { finite: false, norm2: NaN, problem: 'NaN or infinite values' };
      });
      return out;
    }
    if (!ok.some((b) => b)) return out;
    const members = this.upload(ok, n, 'stats', true);
    const nb = Math.ceil(n / AGOQ_BLOCK);
    const bytes = 4 * nb * members.length;
    const sumsBuf = this.sumsBuffer(bytes);
    const k = this.cached(`sumsq:${n}`, () => exchangeSumSquares(this.rt, 'exchange', this.shape(n), this.inbox!, sumsBuf));
    k.setCount(members.length);
    const staging = this.smallBack.buffer(bytes);
    submitSteps(this.rt, [[k.dispatch], (e) => e.copyBufferToBuffer(sumsBuf, 0, staging, 0, bytes)]);
    const raw = await this.smallBack.read(bytes);
    const sums = new Uint32Array(raw.buffer, raw.byteOffset, nb * members.length);
    members.forEach((m, slot) => {
      out[m] = { finite: true, norm2: int8Norm2(wireScales(ok[m]!, n), sums.subarray(slot * nb, (slot + 1) * nb)) };
    });
    return out;
  }

  /**
   * The Gram matrix G[j][k] = x_j·x_k of the given well-formed contributions (null entries: null
   * rows). INT8: per-block integer dot products of every pair on the GPU, combined with the scales
   * in fp64 in block order (int8Dot; the diagonal is stats' ‖x‖² exactly); the contributions stay
   * uploaded for a reduce of the same arrays. fp32: fp64 on the host, index order.
   */
  async gram(contributions: (Uint8Array | null)[], n = this.n): Promise<(number[] | null)[]> {
    const members = contributions.flatMap((b, i) => (b ? [i] : []));
    const G: (number[] | null)[] = contributions.map((b) => (b ? new Array<number>(contributions.length).fill(NaN) : null));
    const set = (j: number, k: number, v: number) => ((G[j]![k] = v), (G[k]![j] = v));
    if (members.length === 0) return G;
    if (this.wire === 'fp32') {
      for (const m of members) checkContribution(contributions[m]!, n, this.wire, m);
      members.forEach((j, a) => members.slice(a).forEach((k) => set(j, k, fp32Dot(contributions[j]!, contributions[k]!, n))));
      return G;
    }
    this.upload(contributions, n, 'gram', true);
    const nb = Math.ceil(n / AGOQ_BLOCK);
    // Room for 8 members (the full mesh's limit) or this call's, not the inbox's every slot.
    const full = this.shape(n);
    const shape = { ...full, slots: Math.min(full.slots, Math.max(8, members.length)) };
    const need = 4 * Math.max(1, nb * gramPairs(shape.slots));
    if (!this.gramBuf || this.gramBuf.size < need) {
      if (this.gramBuf) this.rt.mem.free(this.gramBuf);
      this.dropCached('gram:');
      this.gramBuf = this.rt.createBuffer('comm', 'exchange.gram', need);
    }
    const k = this.cached(`gram:${n}:${shape.slots}`, () => exchangeGramInt8(this.rt, 'exchange', shape, this.inbox!, this.gramBuf!));
    k.setCount(members.length);
    const bytes = 4 * nb * gramPairs(members.length);
    const staging = this.smallBack.buffer(bytes);
    submitSteps(this.rt, [[k.dispatch], (e) => e.copyBufferToBuffer(this.gramBuf!, 0, staging, 0, bytes)]);
    const raw = await this.smallBack.read(bytes);
    const sums = new Int32Array(raw.buffer, raw.byteOffset, bytes / 4);
    const scales = members.map((m) => wireScales(contributions[m]!, n));
    let q = 0;
    for (let a = 0; a < members.length; a++) {
      for (let b = a; b < members.length; b++, q++) set(members[a], members[b], int8Dot(scales[a], scales[b], sums.subarray(q * nb, (q + 1) * nb)));
    }
    return G;
  }

  private dropCached(prefix: string): void {
    for (const [key, k] of this.cache) {
      if (!key.startsWith(prefix)) continue;
      k.destroy();
      this.cache.delete(key);
    }
  }

  private sumsBuffer(bytes: number): GPUBuffer {
    if (!this.sums || this.sums.size < bytes) {
      if (this.sums) this.rt.mem.free(this.sums);
      this.dropCached('sumsq:');
      this.sums = this.rt.createBuffer('comm', 'exchange.sums', Math.max(bytes, 4 * this.nb * 4));
    }
    return this.sums;
  }

  destroy(): void {
    for (const k of this.kernels) k.destroy();
    for (const k of this.cache.values()) k.destroy();
    this.cache.clear();
    for (const b of [...this.owned, this.inbox, this.sums, this.gramBuf]) if (b) this.rt.mem.free(b);
    this.ranges?.destroy();
    this.stored?.destroy();
    this.encodeBack.destroy();
    this.smallBack.destroy();
    this.chunkBack.destroy();
  }
}
