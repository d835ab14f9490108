/**
 * Page-side WebGPU probe, only to decide what to show: the worker acquires its own device. An
 * adapter found here is released at once (nothing is created on it).
 */
import { adapterOffersI8TensorCores } from '../engine/kernels/qgemm/tc';
import type { GpuSupport } from '../state/lab';

export async function detectWebGpu(gpu: GPU | undefined = navigator.gpu): Promise<GpuSupport> {
  if (!gpu) return { state: 'unavailable', reason: 'no-api', detail: 'navigator.gpu is missing' };
  try {
    // The worker's adapter (acquireGpu): the GEMM paths shown are the ones its device would run.
    const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (!adapter) return { state: 'unavailable', reason: 'no-adapter', detail: 'No WebGPU adapter was found (the browser has the API but no usable GPU backend)' };
    const i = adapter.info;
    const name = [i?.vendor, i?.architecture, i?.device, i?.description].filter(Boolean).join(' ');
    const limits = { maxBufferSize: adapter.limits.maxBufferSize, maxStorageBufferBindingSize: adapter.limits.maxStorageBufferBindingSize };
    return { state: 'available', adapter: name || 'WebGPU adapter', limits, i8TensorCores: adapterOffersI8TensorCores(adapter), shaderF16: adapter.features.has('shader-f16') };
  } catch (e) {
    return { state: 'unavailable', reason: 'error', detail: `requestAdapter failed: ${(e as Error).message}` };
  }
}
