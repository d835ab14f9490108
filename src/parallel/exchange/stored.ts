/**
 * Quantized gradient storage (AGoQ) seen as GradExchange's fp32 exchange vector: every tensor at a
 * multiple of 256 floats of `vec`. Stored INT8 blocks of 256 are the wire's own blocks, so they
 * cross as they are (`direct`); any other format goes tensor by tensor through the model's fp32
 * stage in its own format.
 */
import type { Runtime } from '../../engine/gpu/runtime';
import { buildDequantize, buildQuantize, type QuantizeKernel } from '../../engine/kernels/quantize/quantize';
import { AGOQ_BLOCK } from '../../engine/scheme/wire';
import { alignUp, int8WireSpec, type Step, type StoredSlot, storedIsWire } from './wire';


export class StoredGradients {
  /** Every tensor in the wire's INT8 format: copied straight. */
  readonly direct: boolean;
  /** Storage → the exchange vector, two steps per slot (not direct). */
  readonly load: Step[] = [];
  private readonly store: Step[] = [];
  private readonly kernels: { destroy(): void }[] = [];

  constructor(private readonly rt: Runtime, readonly slots: StoredSlot[], readonly stage: GPUBuffer, private readonly vec: GPUBuffer) {
    this.direct = slots.every((s) => storedIsWire(s.st));
    if (this.direct) return;
    for (const s of slots) {
      const spec = { format: s.st.format, granularity: s.st.granularity, n: s.st.n };
      this.load.push(this.kernel(buildDequantize(rt, spec, s.words, s.scales, { out: stage })).dispatches);
      this.load.push((e) => e.copyBufferToBuffer(stage, 0, vec, 4 * s.at, 4 * s.st.n));
      this.store.push((e) => e.copyBufferToBuffer(vec, 4 * s.at, stage, 0, 4 * s.st.n));
      this.store.push(this.kernel(buildQuantize(rt, spec, stage, { words: s.words, scales: s.scales })).dispatches);
    }
  }

  private kernel<T extends { destroy(): void }>(k: T): T {
    this.kernels.push(k);
    return k;
  }

  /** Copies between the storage and the whole-vector wire buffers of `q` (direct storage: the same blocks). */
  private copies(q: QuantizeKernel, toStorage: boolean): Step {
    return (e) => {
      for (const s of this.slots) {
        const sb = 4 * Math.ceil(s.st.n / AGOQ_BLOCK);
        const cb = 4 * s.st.words;
        if (toStorage) {
          e.copyBufferToBuffer(q.scales, 4 * (s.at / AGOQ_BLOCK), s.scales, 0, sb);
          e.copyBufferToBuffer(q.words, s.at, s.words, 0, cb);
        } else {
          e.copyBufferToBuffer(s.scales, 0, q.scales, 4 * (s.at / AGOQ_BLOCK), sb);
          e.copyBufferToBuffer(s.words, 0, q.words, s.at, cb);
        }
      }
    };
  }

  /** Storage → the exchange vector (direct: through the whole-vector wire quantizer `q`'s buffers). */
  loadSteps(q: QuantizeKernel | null): Step[] {
    if (!this.direct) return this.load;
    const deq = this.kernel(buildDequantize(this.rt, int8WireSpec(q!.spec.n), q!.words, q!.scales, { out: this.vec }));
    return [this.copies(q!, false), deq.dispatches];
  }

  /** The exchange vector → storage: the padding between tensors cleared, then re-quantized. */
  storeSteps(q: QuantizeKernel | null): Step[] {
    const clear: Step = (e) => {
      for (const s of this.slots) {
        const end = alignUp(s.st.n, AGOQ_BLOCK);
        if (end > s.st.n) e.clearBuffer(this.vec, 4 * (s.at + s.st.n), 4 * (end - s.st.n));
      }
    };
    return this.direct ? [clear, q!.dispatches, this.copies(q!, true)] : [clear, ...this.store];
  }

  /** The slots holding any of [lo, hi) of the exchange vector. */
  slotsIn(lo: number, hi: number): number[] {
    return this.slots.flatMap((sl, i) => (sl.at < hi && sl.at + sl.st.n > lo ? [i] : []));
  }

  /** The steps that bring slot i's gradient into the exchange vector (storage not in the wire's format). */
  loadSlot(i: number): Step[] {
    return this.load.slice(2 * i, 2 * i + 2);
  }

  /**
   * Direct storage's blocks of [lo, hi) of the vector straight into a wire-layout staging buffer
   * (the range's scales, then its codes); the padding between tensors is not written.
   */
  toWire(staging: GPUBuffer, lo: number, hi: number): Step {
    const nb = Math.ceil((hi - lo) / AGOQ_BLOCK);
    const b0 = lo / AGOQ_BLOCK;
    return (e) => {
      for (const i of this.slotsIn(lo, hi)) {
        const s = this.slots[i];
        const sb0 = s.at / AGOQ_BLOCK;
        const x0 = Math.max(b0, sb0);
        const x1 = Math.min(b0 + nb, sb0 + Math.ceil(s.st.n / AGOQ_BLOCK));
        if (x1 > x0) e.copyBufferToBuffer(s.scales, 4 * (x0 - sb0), staging, 4 * (x0 - b0), 4 * (x1 - x0));
        const y0 = Math.max(lo, s.at);
        const y1 = Math.min(hi, s.at + 4 * s.st.words);
        if (y1 > y0) e.copyBufferToBuffer(s.words, y0 - s.at, staging, 4 * nb + (y0 - lo), y1 - y0);
      }
    };
  }

  destroy(): void {
    for (const k of this.kernels) k.destroy();
  }
}
