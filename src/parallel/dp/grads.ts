/**
 * The gradient as the data-parallel exchange sees it: read from the model's gradient storage after
 * backward, and the group's mean written back before the optimizer runs.
 *
 * - fp32 storage: the flat `grads` buffer, in the parameters' flat layout.
 * - quantized storage (AGoQ: INT8, absmax per block of 256 of each tensor): the codes and scales of
 *   every tensor are copied back in one readback and dequantized exactly as the GPU does
 *   (dequantizeRef is the kernels' reference, code for code). The exchange vector lays each tensor
 *   out at a multiple of 256 floats, so the INT8 all-reduce's blocks are the storage's blocks: the
 *   wire's first quantization of a single micro-batch's gradient re-derives the stored codes, and the
 *   INT8 blocks on the wire are the engine's own. Writing re-quantizes the mean with the storage's
 *   format per tensor (quantizeRef), the same bytes on every peer.
 */
import type { Runtime } from '../../engine/gpu/runtime';
import type { LlamaGpu, SavedStorage } from '../../engine/model/llama';
import { dequantizeRef, quantizeRef } from '../../engine/quant/quantizer';
import { AGOQ_BLOCK } from '../../peers/collectives/allreduce';

export interface GradientAccess {
  /** Floats in the exchange vector. */
  readonly length: number;
  /** 'fp32' or the storage's format (e.g. 'int8'). */
  readonly storage: string;
  read(): Promise<Float32Array>;
  write(x: Float32Array): void;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

export function gradientAccess(model: LlamaGpu): GradientAccess {
  if (!model.training) throw new Error('gradientAccess: the model was built without training buffers');
  const store = model.plan.grads;
  return store ? new QuantizedGradients(model, store) : new FlatGradients(model);
}

class FlatGradients implements GradientAccess {
  readonly storage = 'fp32';
  readonly length: number;

  constructor(private readonly model: LlamaGpu) {
    this.length = model.layout.totalFloats;
  }

  read(): Promise<Float32Array> {
    return this.model.readFlat('grads');
  }

  write(x: Float32Array): void {
    if (x.length !== this.length) throw new Error(`gradient of ${x.length} floats, the model's has ${this.length}`);
    this.model.rt.write(this.model.b('grads'), x);
  }
}

interface TensorSlot {
  name: string;
  st: SavedStorage;
  /** Offset of the tensor in the exchange vector (a multiple of AGOQ_BLOCK). */
  at: number;
  words: GPUBuffer;
  scales: GPUBuffer;
}

class QuantizedGradients implements GradientAccess {
  readonly storage: string;
  readonly length: number;
  private readonly slots: TensorSlot[] = [];

  constructor(
    private readonly model: LlamaGpu,
    store: Map<string, SavedStorage>,
  ) {
    let at = 0;
    for (const v of model.layout.views) {
      const st = store.get(v.name)!;
      this.slots.push({ name: v.name, st, at, words: model.b(`grads.codes.${v.name}`), scales: model.b(`grads.scales.${v.name}`) });
      at += alignUp(v.size, AGOQ_BLOCK);
    }
    this.length = at;
    this.storage = this.slots[0]?.st.format ?? 'int8';
  }

  async read(): Promise<Float32Array> {
    const parts = await readBuffers(this.model.rt, this.slots.flatMap((s) => [
      { buffer: s.words, bytes: s.st.words * 4 },
      { buffer: s.scales, bytes: s.st.scales * 4 },
    ]));
    const out = new Float32Array(this.length);
    this.slots.forEach((s, i) => {
      const words = new Uint32Array(parts[2 * i]);
      const scales = new Float32Array(parts[2 * i + 1]);
      out.set(dequantizeRef({ format: s.st.format, granularity: s.st.granularity, n: s.st.n, words, scales }), s.at);
    });
    return out;
  }

  write(x: Float32Array): void {
    if (x.length !== this.length) throw new Error(`gradient of ${x.length} floats, the exchange layout has ${this.length}`);
    const { rt } = this.model;
    for (const s of this.slots) {
      const q = quantizeRef(x.subarray(s.at, s.at + s.st.n), s.st.format, s.st.granularity);
      rt.write(s.words, q.words);
      rt.write(s.scales, q.scales);
    }
  }
}

/** Copies several buffers' leading bytes back in one command buffer and one map (not one round trip each). */
async function readBuffers(rt: Runtime, parts: { buffer: GPUBuffer; bytes: number }[]): Promise<ArrayBuffer[]> {
  const offsets: number[] = [];
  let total = 0;
  for (const p of parts) {
    offsets.push(total);
    total += alignUp(p.bytes, 4);
  }
  const staging = rt.device.createBuffer({ label: 'dp.gradReadback', size: Math.max(4, total), usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
  try {
    const enc = rt.device.createCommandEncoder();
    parts.forEach((p, i) => enc.copyBufferToBuffer(p.buffer, 0, staging, offsets[i], alignUp(p.bytes, 4)));
    rt.device.queue.submit([enc.finish()]);
    await staging.mapAsync(GPUMapMode.READ);
    const all = staging.getMappedRange();
    const out = parts.map((p, i) => all.slice(offsets[i], offsets[i] + p.bytes));
    staging.unmap();
    return out;
  } finally {
    staging.destroy();
  }
}
