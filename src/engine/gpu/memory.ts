/**
 * Every GPU buffer the engine creates goes through here, labelled and charged to a category, so
 * the memory shown in the lab and written to metrics is what was actually allocated, not a formula.
 */

export const MEM_CATEGORIES = ['weights', 'grads', 'optimizer', 'activations', 'workspace', 'comm'] as const;
export type MemCategory = (typeof MEM_CATEGORIES)[number];
export type MemReport = Record<MemCategory | 'total', number>;

/**
 * GPUBufferUsage flag values (fixed by the WebGPU spec), usable where the WebGPU globals are absent
 * (memory plans are computed without a device).
 */
export const BUFFER_USAGE = { MAP_READ: 0x1, COPY_SRC: 0x4, COPY_DST: 0x8, UNIFORM: 0x40, STORAGE: 0x80 } as const;

export interface Allocation {
  label: string;
  /** Who allocated it (a run id), so several runs sharing one device each see their own bytes. */
  owner: string | null;
  category: MemCategory;
  bytes: number;
  buffer: GPUBuffer;
}

/** WebGPU buffer sizes must be multiples of 4; storage bindings like 16. We allocate exactly this. */
export function roundBufferSize(bytes: number): number {
  return Math.max(16, Math.ceil(bytes / 16) * 16);
}

export function emptyMemReport(): MemReport {
  return { weights: 0, grads: 0, optimizer: 0, activations: 0, workspace: 0, comm: 0, total: 0 };
}

export class GpuMemory {
  private live = new Map<GPUBuffer, Allocation>();
  private peak = 0;
  /**
   * Uniform parameter blocks (16–256 B per kernel) are counted apart from the six categories: they are
   * per-dispatch constants, not model state, and their number depends on how kernels are split.
   */
  private uniforms = new Map<GPUBuffer, number>();
  private owner: string | null = null;

  constructor(private readonly device: GPUDevice) {}

  alloc(
    category: MemCategory,
    label: string,
    bytes: number,
    usage: GPUBufferUsageFlags = BUFFER_USAGE.STORAGE | BUFFER_USAGE.COPY_SRC | BUFFER_USAGE.COPY_DST,
  ): GPUBuffer {
    if (!Number.isFinite(bytes) || bytes < 0) throw new Error(`alloc ${label}: invalid size ${bytes}`);
    const size = roundBufferSize(bytes);
    const max = this.device.limits.maxBufferSize;
    if (size > max) {
      throw new Error(`alloc ${label}: ${size} bytes exceeds this GPU's maxBufferSize (${max})`);
    }
    this.device.pushErrorScope('out-of-memory');
    const buffer = this.device.createBuffer({ label: `${category}:${label}`, size, usage });
    void this.device.popErrorScope().then((err) => {
      if (err) console.error(`GPU out of memory allocating ${label} (${size} bytes): ${err.message}`);
    });
    this.live.set(buffer, { label, owner: this.owner, category, bytes: size, buffer });
    this.peak = Math.max(this.peak, this.totalBytes());
    return buffer;
  }

  allocUniform(label: string, bytes: number): GPUBuffer {
    const size = roundBufferSize(bytes);
    const buffer = this.device.createBuffer({
      label: `uniform:${label}`,
      size,
      usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST,
    });
    this.uniforms.set(buffer, size);
    return buffer;
  }

  /** Runs `fn` and returns the uniform buffers it made with its result (for a caller that frees what a builder it calls made). */
  newUniforms<T>(fn: () => T): { result: T; uniforms: GPUBuffer[] } {
    const before = new Set(this.uniforms.keys());
    const result = fn();
    return { result, uniforms: [...this.uniforms.keys()].filter((u) => !before.has(u)) };
  }

  uniformBytes(): number {
    let t = 0;
    for (const v of this.uniforms.values()) t += v;
    return t;
  }

  free(buffer: GPUBuffer): void {
    if (this.live.delete(buffer) || this.uniforms.delete(buffer)) buffer.destroy();
  }

  freeAll(): void {
    for (const b of this.live.keys()) b.destroy();
    for (const b of this.uniforms.keys()) b.destroy();
    this.live.clear();
    this.uniforms.clear();
  }

  totalBytes(): number {
    let t = 0;
    for (const a of this.live.values()) t += a.bytes;
    return t;
  }

  peakBytes(): number {
    return this.peak;
  }

  /** Runs `fn` with every allocation it makes charged to `owner`. */
  withOwner<T>(owner: string, fn: () => T): T {
    const prev = this.owner;
    this.owner = owner;
    try {
      return fn();
    } finally {
      this.owner = prev;
    }
  }

  /** Bytes per category: all live allocations, or only `owner`'s. */
  report(owner?: string): MemReport {
    const r = emptyMemReport();
    for (const a of this.live.values()) {
      if (owner !== undefined && a.owner !== owner) continue;
      r[a.category] += a.bytes;
      r.total += a.bytes;
    }
    return r;
  }

  allocations(): Allocation[] {
    return [...this.live.values()];
  }
}
