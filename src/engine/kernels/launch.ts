/**
 * Small launch helpers shared by the elementwise, norm, loss, embedding, reduction and optimizer
 * kernels: 2-D grids for more than 65535 workgroups, power-of-two workgroup sizes for row kernels,
 * and binding identity checks for in-place variants.
 */
import type { Binding, BufSlice, Runtime } from '../gpu/runtime';

/** Testing hook: pretend the grid's x extent is at most this (exercises the 2-D path on small data). */
let gridMaxOverride: number | null = null;
export function setGridMaxX(max: number | null): void {
  gridMaxOverride = max;
}

/**
 * A grid of at least `groups` workgroups: [x, y] with x ≤ maxComputeWorkgroupsPerDimension. Kernels
 * rebuild the linear workgroup index as wid.x + wid.y * nwg.x and skip indices ≥ groups.
 * Zero groups gives a [0, 1] grid, which Runtime.encode skips.
 */
export function grid2d(rt: Runtime, groups: number): [number, number] {
  if (groups <= 0) return [0, 1];
  const max = gridMaxOverride ?? rt.device.limits.maxComputeWorkgroupsPerDimension;
  const x = Math.min(groups, max);
  const y = Math.ceil(groups / x);
  if (y > rt.device.limits.maxComputeWorkgroupsPerDimension) {
    throw new Error(`grid of ${groups} workgroups is too large for this device`);
  }
  return [x, y];
}

export function nextPow2(n: number): number {
  let p = 1;
  while (p < n) p *= 2;
  return p;
}

/**
 * Workgroup size for a kernel that reduces along a row of `len` elements with a tree: a power of
 * two, at least 32 (one warp) and at most 256 (SwiftShader's limit; larger buys little for rows of
 * a few thousand elements, and many rows already fill a big GPU).
 */
export function rowWorkgroupSize(len: number, max = 256): number {
  return Math.max(32, Math.min(max, nextPow2(len)));
}

export function asSlice(b: Binding): BufSlice {
  return typeof (b as GPUBuffer).mapAsync === 'function' ? { buffer: b as GPUBuffer } : (b as BufSlice);
}

/** Whether a binding's offset allows 16-byte (vec4) access (offsets here are 256-aligned by convention; checked, not assumed). */
export function vec4Aligned(b: Binding): boolean {
  return (asSlice(b).offset ?? 0) % 16 === 0;
}

/** Whether elementwise work over `elements` floats can run on vec4s: a whole number of them, every binding 16-byte aligned. */
export function vec4Elementwise(elements: number, bindings: Binding[]): boolean {
  return elements % 4 === 0 && bindings.every(vec4Aligned);
}

/** Same buffer, offset and size: an in-place call. */
export function sameBinding(a: Binding, b: Binding): boolean {
  const sa = asSlice(a);
  const sb = asSlice(b);
  return sa.buffer === sb.buffer && (sa.offset ?? 0) === (sb.offset ?? 0) && sa.size === sb.size;
}

/** Bytes available to a binding (its slice size, or the buffer minus the offset). */
export function bindingBytes(b: Binding): number {
  const s = asSlice(b);
  return s.size ?? s.buffer.size - (s.offset ?? 0);
}

/** Throws a readable error when a binding is smaller than the shape needs (instead of a silent clamp). */
export function requireBytes(label: string, name: string, b: Binding, bytes: number): void {
  const have = bindingBytes(b);
  if (have < bytes) throw new Error(`${label}: ${name} has ${have} bytes, needs ${bytes}`);
}
