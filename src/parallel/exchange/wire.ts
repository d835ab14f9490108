/**
 * Host-side pieces of the GPU gradient exchange (grad-exchange.ts): the exchange vector's layout
 * over a model's gradient, the cheap checks of a received contribution (length and scales only:
 * ⌈n/256⌉ floats, never the codes), the screening norm from per-block integer sums, and the
 * command-buffer and readback plumbing.
 */
import type { Dispatch, Runtime } from '../../engine/gpu/runtime';
import type { LlamaGpu, SavedStorage } from '../../engine/model/llama';
import { AGOQ_BLOCK, chunkPayloadBytes, type GradWire } from '../../engine/scheme/wire';
import { wireScales } from '../../engine/kernels/exchange/exchange.ref';

/** A scale above FLT_MAX/128 would decode code −128 to infinity (peers/allreduce.ts's decodeInt8Chunk rejects it too). */
export const MAX_WIRE_SCALE = 3.4028234663852886e38 / 128;

/** A contribution that cannot be averaged; `member` is its index in the list given. */
export class ContributionError extends Error {
  constructor(readonly member: number, message: string) {
    super(`contribution of member ${member}: ${message}`);
    this.name = 'ContributionError';
  }
}

export const alignUp = (n: number, a: number): number => Math.ceil(n / a) * a;

/** The quantizer spec of the INT8 wire for n floats: absmax per block of 256 (AGoQ's gradient blocks). */
export const int8WireSpec = (n: number) => ({ format: 'int8' as const, granularity: { kind: 'group' as const, size: AGOQ_BLOCK }, n });

/** Wire bytes of a vector (or chunk) of n elements. */
export function wireBytes(n: number, wire: GradWire): number {
  return chunkPayloadBytes(n, wire);
}

/**
 * Why `bytes` is not a well-formed contribution of n elements, or null: the length, and for INT8
 * every scale finite, ≥ 0 and ≤ MAX_WIRE_SCALE. fp32 values are checked on the GPU.
 */
export function contributionProblem(bytes: Uint8Array, n: number, wire: GradWire): string | null {
  const want = wireBytes(n, wire);
  if (bytes.length !== want) return `${bytes.length} B, expected ${want} (${wire}, ${n} elements)`;
  if (wire === 'fp32') return null;
  const s = wireScales(bytes, n);
  for (let k = 0; k < s.length; k++) {
    if (!(s[k] >= 0 && s[k] <= MAX_WIRE_SCALE)) return `bad scale ${s[k]} in block ${k}`;
  }
  return null;
}

export function checkContribution(bytes: Uint8Array, n: number, wire: GradWire, member: number): void {
  const p = contributionProblem(bytes, n, wire);
  if (p) throw new ContributionError(member, p);
}

/**
 * x_a·x_b of two INT8 contributions: Σ_b (s_a,b · s_b,b) · Σ_{i∈b} c_a,i c_b,i, the inner sums
 * exact integers, the outer sum in fp64 in block order — the same double on every member for the
 * same bytes. ‖x‖² is the dot of x with itself.
 */
export function int8Dot(sa: Float32Array, sb: Float32Array, sums: ArrayLike<number>): number {
  let t = 0;
  for (let b = 0; b < sa.length; b++) t += sa[b] * sb[b] * sums[b];
  return t;
}

export function int8Norm2(scales: Float32Array, sums: Uint32Array): number {
  return int8Dot(scales, scales, sums);
}

const f32View = (bytes: Uint8Array, n: number): Float32Array =>
  bytes.byteOffset % 4 === 0 ? new Float32Array(bytes.buffer, bytes.byteOffset, n) : new Float32Array(bytes.slice(0, 4 * n).buffer);

/** x_a·x_b of two fp32 contributions in fp64, index order (host: the GPU has no fp64). */
export function fp32Dot(a: Uint8Array, b: Uint8Array, n: number): number {
  const x = f32View(a, n);
  const y = a === b ? x : f32View(b, n);
  let t = 0;
  for (let i = 0; i < n; i++) t += x[i] * y[i];
  return t;
}

/** ‖x‖² of an fp32 contribution in fp64, index order. */
export function fp32Norm2(bytes: Uint8Array, n: number): number {
  return fp32Dot(bytes, bytes, n);
}

/** One tensor of a model's quantized gradient storage, at `at` (a multiple of 256) in the exchange vector. */
export interface StoredSlot {
  name: string;
  st: SavedStorage;
  at: number;
  words: GPUBuffer;
  scales: GPUBuffer;
}

/** The exchange vector over AGoQ-style storage: each tensor at a multiple of 256 floats (peers/dp-grads.ts's layout). */
export function storedLayout(model: LlamaGpu): { slots: StoredSlot[]; length: number } | null {
  const store = model.plan.grads;
  if (!store) return null;
  const slots: StoredSlot[] = [];
  let at = 0;
  for (const v of model.layout.views) {
    slots.push({ name: v.name, st: store.get(v.name)!, at, words: model.b(`grads.codes.${v.name}`), scales: model.b(`grads.scales.${v.name}`) });
    at += alignUp(v.size, AGOQ_BLOCK);
  }
  return { slots, length: at };
}

/** Whether stored gradients are in the wire's own INT8 format (absmax per block of 256, nearest: storeGrad's). */
export function storedIsWire(st: SavedStorage): boolean {
  return st.format === 'int8' && st.granularity.kind === 'group' && st.granularity.size === AGOQ_BLOCK;
}

/** A command-buffer program: dispatches (grouped into compute passes) and encoder commands, in order. */
export type Step = Dispatch[] | ((e: GPUCommandEncoder) => void);

export function submitSteps(rt: Runtime, steps: Step[]): void {
  const enc = rt.device.createCommandEncoder();
  let pass: Dispatch[] = [];
  for (const s of steps) {
    if (Array.isArray(s)) {
      pass.push(...s);
      continue;
    }
    if (pass.length) rt.encode(enc, pass);
    pass = [];
    s(enc);
  }
  if (pass.length) rt.encode(enc, pass);
  rt.submit(enc.finish());
}

/**
 * A persistent staging buffer and host array: one map per read, no per-call allocation of the
 * payload. What `read` returns is overwritten by the next read.
 */
export class Readback {
  private staging: GPUBuffer | null = null;
  private host = new Uint8Array(0);
  private busy = false;

  constructor(private readonly rt: Runtime, private readonly label: string) {}

  /** The staging buffer, at least `bytes` long (a new, zeroed one when it grows). */
  buffer(bytes: number): GPUBuffer {
    const size = alignUp(Math.max(bytes, 4), 4);
    if (!this.staging || this.staging.size < size) {
      if (this.staging) this.rt.mem.free(this.staging);
      this.staging = this.rt.createBuffer('comm', this.label, size, GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ);
    }
    return this.staging;
  }

  async read(bytes: number): Promise<Uint8Array> {
    if (this.busy) throw new Error(`${this.label}: a readback is already in flight`);
    const b = this.buffer(bytes);
    this.busy = true;
    try {
      const size = alignUp(Math.max(bytes, 4), 4);
      await b.mapAsync(GPUMapMode.READ, 0, size);
      if (this.host.length < bytes) this.host = new Uint8Array(bytes);
      this.host.set(new Uint8Array(b.getMappedRange(0, size), 0, bytes));
      b.unmap();
    } finally {
      this.busy = false;
    }
    return this.host.subarray(0, bytes);
  }

  destroy(): void {
    if (this.staging) this.rt.mem.free(this.staging);
    this.staging = null;
  }
}

/**
 * The wire bytes of chunk [lo, hi) cut from a whole vector's (n elements): what encodeInt8Chunk
 * of the chunk would give, since lo is a multiple of 256 (two copies, no per-element work).
 */
export function wireChunk(bytes: Uint8Array, n: number, wire: GradWire, lo: number, hi: number): Uint8Array {
  if (!(Number.isInteger(lo) && Number.isInteger(hi) && lo >= 0 && lo <= hi && hi <= n)) throw new Error(`wireChunk: [${lo}, ${hi}) outside [0, ${n})`);
  if (wire === 'fp32') return bytes.slice(4 * lo, 4 * hi);
  if (lo % AGOQ_BLOCK !== 0) throw new Error(`wireChunk: chunk start ${lo} is not a multiple of ${AGOQ_BLOCK}`);
  const nb = Math.ceil(n / AGOQ_BLOCK);
  const b0 = lo / AGOQ_BLOCK;
  const cb = Math.ceil((hi - lo) / AGOQ_BLOCK);
  const out = new Uint8Array(4 * cb + hi - lo);
  out.set(bytes.subarray(4 * b0, 4 * (b0 + cb)), 0);
  out.set(bytes.subarray(4 * nb + lo, 4 * nb + hi), 4 * cb);
  return out;
}
