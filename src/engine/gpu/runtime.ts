/**
 * The runtime every kernel, model and benchmark uses: one device, one memory ledger, one pipeline
 * cache. A kernel call is data (code + bindings + uniforms + grid) turned once into a `Dispatch`;
 * a training step is a list of dispatches encoded into one command buffer, so shapes are fixed at
 * build time and no CPU work happens per kernel at run time.
 */
import { assertAlive, type Gpu } from './device';
import { GpuMemory, type MemCategory } from './memory';
import { PipelineCache } from './pipelines';

export interface BufSlice {
  buffer: GPUBuffer;
  offset?: number;
  size?: number;
}
export type Binding = GPUBuffer | BufSlice;

export interface KernelCall {
  label: string;
  code: string;
  entryPoint?: string;
  constants?: Record<string, number>;
  /** Bound in order at @group(0) @binding(0..n-1): storage buffers and uniform buffers alike. */
  bindings: Binding[];
  workgroups: [number, number?, number?];
}

export interface Dispatch {
  label: string;
  pipeline: GPUComputePipeline;
  bindGroup: GPUBindGroup;
  workgroups: [number, number, number];
}

/** Packs 4-byte scalars in declaration order, matching a WGSL struct of u32/i32/f32 fields. */
export class Uniforms {
  private view = new DataView(new ArrayBuffer(256));
  private offset = 0;
  u32(v: number): this {
    this.view.setUint32(this.offset, v >>> 0, true);
    this.offset += 4;
    return this;
  }
  i32(v: number): this {
    this.view.setInt32(this.offset, v | 0, true);
    this.offset += 4;
    return this;
  }
  f32(v: number): this {
    this.view.setFloat32(this.offset, v, true);
    this.offset += 4;
    return this;
  }
  bytes(): ArrayBuffer {
    const size = Math.max(16, Math.ceil(this.offset / 16) * 16);
    return this.view.buffer.slice(0, size);
  }
}

export function toEntry(b: Binding, binding: number): GPUBindGroupEntry {
  if (typeof (b as GPUBuffer).mapAsync !== 'function') {
    const s = b as BufSlice;
    return { binding, resource: { buffer: s.buffer, offset: s.offset ?? 0, size: s.size } };
  }
  return { binding, resource: { buffer: b as GPUBuffer } };
}

/** Readback buffers kept between reads at most (outside the memory ledger). */
const STAGING_KEEP_BYTES = 128 * 2 ** 20;

export class Runtime {
  readonly device: GPUDevice;
  readonly mem: GpuMemory;
  readonly pipelines: PipelineCache;

  constructor(readonly gpu: Gpu) {
    this.device = gpu.device;
    this.mem = new GpuMemory(this.device);
    this.pipelines = new PipelineCache(this.device);
    if (typeof process !== 'undefined' && process.env?.LAB_DUMP_WGSL) this.pipelines.dump = true;
  }

  /** A uniform buffer holding `u`'s bytes (counted apart from the six memory categories). */
  uniform(label: string, u: Uniforms): GPUBuffer {
    const data = u.bytes();
    const buf = this.mem.allocUniform(label, data.byteLength);
    this.device.queue.writeBuffer(buf, 0, data);
    return buf;
  }

  kernel(call: KernelCall): Dispatch {
    const pipeline = this.pipelines.get({
      label: call.label,
      code: call.code,
      entryPoint: call.entryPoint,
      constants: call.constants,
    });
    const bindGroup = this.device.createBindGroup({
      label: call.label,
      layout: pipeline.getBindGroupLayout(0),
      entries: call.bindings.map(toEntry),
    });
    const [x, y = 1, z = 1] = call.workgroups;
    const max = this.device.limits.maxComputeWorkgroupsPerDimension;
    if (x > max || y > max || z > max) {
      throw new Error(`${call.label}: grid ${x}x${y}x${z} exceeds maxComputeWorkgroupsPerDimension ${max}`);
    }
    return { label: call.label, pipeline, bindGroup, workgroups: [x, y, z] };
  }

  /** Records dispatches into one compute pass (WebGPU orders storage writes between dispatches). */
  encode(encoder: GPUCommandEncoder, dispatches: Dispatch[], timestamps?: GPUComputePassTimestampWrites): void {
    const pass = encoder.beginComputePass({ timestampWrites: timestamps });
    for (const d of dispatches) {
      if (d.workgroups[0] === 0 || d.workgroups[1] === 0 || d.workgroups[2] === 0) continue;
      pass.setPipeline(d.pipeline);
      pass.setBindGroup(0, d.bindGroup);
      pass.dispatchWorkgroups(d.workgroups[0], d.workgroups[1], d.workgroups[2]);
    }
    pass.end();
  }

  /**
   * Records dispatches (and optional extra commands) into one command buffer without submitting it.
   * What a command buffer reads is read when it runs, so one recorded ahead sees every queue write
   * made before its submit (the trainer records step n + 1 while the GPU runs step n).
   */
  record(dispatches: Dispatch[], extra?: (encoder: GPUCommandEncoder) => void): GPUCommandBuffer {
    assertAlive(this.gpu);
    const encoder = this.device.createCommandEncoder();
    this.encode(encoder, dispatches);
    extra?.(encoder);
    return encoder.finish();
  }

  /** Encodes and submits dispatches (and optional extra commands) as one command buffer. */
  run(dispatches: Dispatch[], extra?: (encoder: GPUCommandEncoder) => void): void {
    this.submit(this.record(dispatches, extra));
  }

  submit(commands: GPUCommandBuffer): void {
    assertAlive(this.gpu);
    this.device.queue.submit([commands]);
  }

  createBuffer(category: MemCategory, label: string, bytes: number, usage?: GPUBufferUsageFlags): GPUBuffer {
    return this.mem.alloc(category, label, bytes, usage);
  }

  upload(category: MemCategory, label: string, data: ArrayBufferView): GPUBuffer {
    const buf = this.mem.alloc(category, label, data.byteLength);
    this.write(buf, data);
    return buf;
  }

  write(buffer: GPUBuffer, data: ArrayBufferView, offset = 0): void {
    // writeBuffer needs a multiple of 4 bytes.
    const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
    if (bytes.byteLength % 4 === 0) {
      this.device.queue.writeBuffer(buffer, offset, bytes);
    } else {
      const padded = new Uint8Array(Math.ceil(bytes.byteLength / 4) * 4);
      padded.set(bytes);
      this.device.queue.writeBuffer(buffer, offset, padded);
    }
  }

  /** Copies `size` bytes at `offset` back to the CPU (a staging buffer outside the ledger). */
  async read(buffer: GPUBuffer, offset = 0, size = buffer.size - offset): Promise<ArrayBuffer> {
    assertAlive(this.gpu);
    const staging = this.takeStaging(Math.ceil(size / 4) * 4);
    const enc = this.device.createCommandEncoder();
    enc.copyBufferToBuffer(buffer, offset, staging, 0, Math.ceil(size / 4) * 4);
    this.device.queue.submit([enc.finish()]);
    try {
      await staging.mapAsync(GPUMapMode.READ, 0, Math.ceil(size / 4) * 4);
    } catch (e) {
      staging.destroy();
      throw e;
    }
    const out = staging.getMappedRange(0, Math.ceil(size / 4) * 4).slice(0, size);
    staging.unmap();
    this.giveStaging(staging);
    return out;
  }

  // Readback buffers are kept for reuse: creating (and zeroing) a mappable buffer per read cost more
  // than the copy for a group's per-step readbacks. Sizes are powers of two, the pool is bounded.
  private staging: GPUBuffer[] = [];

  private takeStaging(bytes: number): GPUBuffer {
    const size = Math.max(4096, 2 ** Math.ceil(Math.log2(Math.max(bytes, 1))));
    const i = this.staging.findIndex((b) => b.size === size);
    if (i >= 0) return this.staging.splice(i, 1)[0];
    return this.device.createBuffer({ label: 'readback', size, usage: GPUBufferUsage.COPY_DST | GPUBufferUsage.MAP_READ });
  }

  private giveStaging(b: GPUBuffer): void {
    this.staging.push(b);
    let total = this.staging.reduce((a, x) => a + x.size, 0);
    while (total > STAGING_KEEP_BYTES && this.staging.length > 0) {
      const old = this.staging.shift()!;
      total -= old.size;
      old.destroy();
    }
  }

  async readF32(buffer: GPUBuffer, offset = 0, count?: number): Promise<Float32Array> {
    const size = count === undefined ? buffer.size - offset : count * 4;
    return new Float32Array(await this.read(buffer, offset, size));
  }

  async readU32(buffer: GPUBuffer, offset = 0, count?: number): Promise<Uint32Array> {
    const size = count === undefined ? buffer.size - offset : count * 4;
    return new Uint32Array(await this.read(buffer, offset, size));
  }

  /**
   * Runs `build` (which creates pipelines, bind groups, buffers) inside a validation scope and throws
   * the first WebGPU validation error as an exception, instead of letting it surface later as an
   * uncaptured error (or a crash in Dawn).
   */
  async checked<T>(label: string, build: () => T): Promise<T> {
    this.device.pushErrorScope('validation');
    let result: T;
    try {
      result = build();
    } finally {
      const err = await this.device.popErrorScope();
      if (err) throw new Error(`${label}: WebGPU validation failed: ${err.message}`);
    }
    return result;
  }

  async sync(): Promise<void> {
    await this.device.queue.onSubmittedWorkDone();
  }

  destroy(): void {
    for (const b of this.staging.splice(0)) b.destroy();
    this.mem.freeAll();
  }
}
