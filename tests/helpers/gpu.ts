import { afterEach } from 'vitest';
import { setGridMaxX } from '../../src/engine/kernels/launch';
/** Test support: one Dawn runtime per worker (SwiftShader when no GPU), seeded data, comparisons. */
import { acquireNodeGpu } from '../../src/engine/gpu/node';
import { Runtime } from '../../src/engine/gpu/runtime';

let runtime: Promise<Runtime> | null = null;

export function testRuntime(): Promise<Runtime> {
  runtime ??= acquireNodeGpu().then((gpu) => new Runtime(gpu));
  return runtime;
}

let attnRuntime: Promise<Runtime> | null = null;

/**
 * A runtime whose Dawn device zero-initialises workgroup memory with Tint's loop rather than Vulkan's
 * OpConstantNull extension: SwiftShader compiles the latter element by element (seconds per pipeline
 * with 16 KiB of tiles), the former in milliseconds. Same semantics; the attention kernels never read
 * workgroup memory they did not write.
 */
export function attentionTestRuntime(): Promise<Runtime> {
  attnRuntime ??= acquireNodeGpu({
    dawnFlags: ['disable-dawn-features=use_vulkan_zero_initialize_workgroup_memory_extension'],
  }).then((gpu) => new Runtime(gpu));
  return attnRuntime;
}

/**
 * Buffers a GPU test file uploads, freed after each test (the forced 2-D grid is reset too).
 * Call once at the top level of a test file.
 */
export function trackBuffers(): {
  track(b: GPUBuffer): GPUBuffer;
  up(rt: Runtime, data: Float32Array | Int32Array | Uint32Array): GPUBuffer;
} {
  const live: GPUBuffer[] = [];
  afterEach(async () => {
    setGridMaxX(null);
    const rt = await testRuntime();
    live.splice(0).forEach((b) => rt.mem.free(b));
  });
  const track = (b: GPUBuffer) => {
    live.push(b);
    return b;
  };
  return { track, up: (rt, data) => track(rt.upload('activations', 'test', data)) };
}
