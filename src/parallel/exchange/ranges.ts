/**
 * Streaming the GPU gradient exchange (grad-exchange.ts) behind backward: which buckets of the
 * exchange vector are final after which backward dispatch (LlamaGpu.gradFinal mapped onto the
 * vector's layout), and each bucket's wire bytes encoded on its own — its own command buffer and
 * readback, submitted right after the backward segment that completes it, so the host can send it
 * while the GPU runs the rest of backward. The bytes are wireChunk's of the whole encode for the
 * same span (tests/parallel/grad-exchange.test.ts checks it).
 */
import type { Runtime } from '../../engine/gpu/runtime';
import { buildQuantize, type QuantizeKernel } from '../../engine/kernels/quantize/quantize';
import type { LlamaGpu } from '../../engine/model/llama';
import { AGOQ_BLOCK, type GradWire } from '../../engine/scheme/wire';
import { alignUp, int8WireSpec, Readback, type Step, type StoredSlot, submitSteps, wireBytes } from './wire';
import type { StoredGradients } from './stored';

/** A tensor's extent [lo, hi) in the exchange vector, final once `after` backward dispatches have run. */
export interface FinalRange {
  lo: number;
  hi: number;
  after: number;
}

/** The backward cuts a streamed exchange needs, and which spans (indices) each segment completes. */
export interface StreamPlan {
  cuts: number[];
  bySegment: number[][];
}

/** Each tensor's extent in the exchange vector (flat gradient, or the stored layout's slots) and when backward finishes it. */
export function modelFinals(model: LlamaGpu, slots: StoredSlot[] | null): FinalRange[] {
  const after = (name: string) => model.gradFinal.get(name) ?? model.backward.length;
  if (slots) return slots.map((s) => ({ lo: s.at, hi: s.at + s.st.n, after: after(s.name) }));
  return model.layout.views.map((v) => ({ lo: v.offset, hi: v.offset + v.size, after: after(v.name) }));
}

/** How many backward dispatches [lo, hi) needs: the latest of the tensors it overlaps (padding only: 1, the first segment). */
export function finalAfter(finals: FinalRange[], lo: number, hi: number): number {
  let at = 1;
  for (const f of finals) if (f.lo < hi && f.hi > lo) at = Math.max(at, f.after);
  return at;
}

/** One backward segment per distinct readiness of the spans, in backward order. */
export function streamPlan(finals: FinalRange[], spans: [number, number][]): StreamPlan {
  const at = spans.map(([lo, hi]) => finalAfter(finals, lo, hi));
  const cuts = [...new Set(at)].sort((a, b) => a - b);
  const bySegment = cuts.map(() => [] as number[]);
  at.forEach((a, b) => bySegment[cuts.indexOf(a)].push(b));
  return { cuts, bySegment };
}

/** What the range encoder reads: the exchange vector, and over quantized storage the storage. */
export interface RangeSource {
  rt: Runtime;
  wire: GradWire;
  n: number;
  vec: GPUBuffer;
  /** Quantized storage (null: `vec` is the gradient itself). */
  stored: StoredGradients | null;
}

export class RangeEncoder {
  /** One readback per bucket index: the buckets of one contribution are in flight together. */
  private readonly backs = new Map<number, Readback>();
  /** Per bucket length: a copy of the bucket's floats and its wire quantizer (INT8 from fp32). */
  private readonly quant = new Map<number, { input: GPUBuffer; q: QuantizeKernel }>();

  constructor(private readonly s: RangeSource) {
    if (s.stored?.direct && s.wire === 'fp32') throw new Error('RangeEncoder: fp32 wire over INT8-stored gradients is not streamed');
  }

  /** The wire bytes of [lo, hi) (valid until the next encode of the same slot). */
  encode(lo: number, hi: number, slot: number): Promise<Uint8Array> {
    const { n, wire } = this.s;
    if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 0 && lo < hi && hi <= n)) throw new Error(`RangeEncoder: [${lo}, ${hi}) outside [0, ${n})`);
    if (wire === 'int8' && lo % AGOQ_BLOCK !== 0) throw new Error(`RangeEncoder: range start ${lo} is not a multiple of ${AGOQ_BLOCK}`);
    let back = this.backs.get(slot);
    if (!back) this.backs.set(slot, (back = new Readback(this.s.rt, `exchange.range${slot}`)));
    const bytes = wireBytes(hi - lo, wire);
    submitSteps(this.s.rt, this.steps(lo, hi, back.buffer(bytes)));
    return back.read(bytes);
  }

  private steps(lo: number, hi: number, staging: GPUBuffer): Step[] {
    const { vec, wire, stored } = this.s;
    const len = hi - lo;
    const nb = Math.ceil(len / AGOQ_BLOCK);
    // The range's padding between tensors must read zero: the staging of a slot is reused.
    if (wire === 'int8' && stored?.direct) return [(e) => e.clearBuffer(staging, 0, staging.size), stored.toWire(staging, lo, hi)];
    const loads = stored ? stored.slotsIn(lo, hi).flatMap((i) => stored.loadSlot(i)) : [];
    if (wire === 'fp32') return [...loads, (e) => e.copyBufferToBuffer(vec, 4 * lo, staging, 0, 4 * len)];
    const { input, q } = this.quantizer(len);
    return [...loads, (e) => e.copyBufferToBuffer(vec, 4 * lo, input, 0, 4 * len), q.dispatches, (e) => {
      e.copyBufferToBuffer(q.scales, 0, staging, 0, 4 * nb);
      e.copyBufferToBuffer(q.words, 0, staging, 4 * nb, alignUp(len, 4));
    }];
  }

  private quantizer(len: number): { input: GPUBuffer; q: QuantizeKernel } {
    let k = this.quant.get(len);
    if (!k) {
      const input = this.s.rt.createBuffer('comm', 'exchange.rangeIn', 4 * len);
      k = { input, q: buildQuantize(this.s.rt, int8WireSpec(len), input, { category: 'comm' }) };
      this.quant.set(len, k);
    }
    return k;
  }

  destroy(): void {
    for (const b of this.backs.values()) b.destroy();
    for (const { input, q } of this.quant.values()) {
      q.destroy();
      this.s.rt.mem.free(input);
    }
    this.backs.clear();
    this.quant.clear();
  }
}
