/**
 * The page's look at the GPU before any run: acquires a device the way the engine does (acquireGpu,
 * whose WebGpuUnavailableError says how to turn WebGPU on), reads what a bench JSON records about
 * it, and releases it at once; the worker acquires its own device for the run.
 */
import { acquireGpu } from '../engine/gpu/device';
import { gpuReport } from '../lab/suites';
import type { GpuReport } from './protocol';

export type GpuProbe = { state: 'checking' } | { state: 'available'; report: GpuReport } | { state: 'unavailable'; message: string };

export async function probeGpu(gpu: GPU | undefined = navigator.gpu): Promise<GpuProbe> {
  try {
    const g = await acquireGpu(gpu);
    const report = gpuReport(g);
    g.device.destroy();
    return { state: 'available', report };
  } catch (e) {
    return { state: 'unavailable', message: (e as Error).message };
  }
}
