/**
 * Quantized gradient storage (AGoQ) seen as GradExchange's fp32 exchange vector: every tensor at a
 * multiple of 256 floats of `vec`. Stored INT8 blocks of 256 are the wire's own blocks, so they
 * cross as they are (`direct`); any other format goes tensor by tensor through the model's fp32
 * stage in its own format.
 */
import type { Runtime } from '../gpu/runtime';
import { buildDequantize, buildQuantize, type QuantizeKernel } from '../kernels/quantize';
import { AGOQ_BLOCK } from '../scheme/wire';
import { alignUp, type Step, type StoredSlot, storedIsWire } from './exchange-wire';

const WIRE_SPEC = (n: number) => ({ format: 'int8' as const, granularity: { kind: 'group' as const, size: AGOQ_BLOCK }, n });

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
    const deq = this.kernel(buildDequantize(this.rt, WIRE_SPEC(q!.spec.n), q!.words, q!.scales, { out: this.vec }));
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

  /** Direct storage straight into a wire-layout staging buffer (codes at `codesAt`); the padding codes stay zero. */
  toWire(staging: GPUBuffer, codesAt: number): Step {
    return (e) => {
      for (const s of this.slots) {
        e.copyBufferToBuffer(s.scales, 0, staging, 4 * (s.at / AGOQ_BLOCK), 4 * Math.ceil(s.st.n / AGOQ_BLOCK));
        e.copyBufferToBuffer(s.words, 0, staging, codesAt + s.at, 4 * s.st.words);
      }
    };
  }

  destroy(): void {
    for (const k of this.kernels) k.destroy();
  }
}
