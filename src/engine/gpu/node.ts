/**
 * Node-only: a WebGPU `GPU` object from Dawn (the `webgpu` package). On a machine without a GPU,
 * Dawn falls back to Chromium's SwiftShader Vulkan ICD (CPU), which is slow but exact.
 * Import this only from Node entry points (CLI, tests, benchmarks), never from the browser bundle.
 */
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { acquireGpu, type AcquireOptions, type Gpu, WebGpuUnavailableError } from './device';

const SWIFTSHADER_ICD = '/usr/lib/chromium/vk_swiftshader_icd.json';
const ICD_DIRS = ['/etc/vulkan/icd.d', '/usr/share/vulkan/icd.d', '/usr/local/share/vulkan/icd.d', '/usr/local/etc/vulkan/icd.d', '/usr/local/nvidia/share/vulkan/icd.d'];

/**
 * Whether the Vulkan loader can find a driver of its own: without one, asking Dawn for a hardware
 * adapter only prints the loader's "found no drivers" warnings before the SwiftShader fallback.
 */
function hasVulkanDriver(): boolean {
  if (process.env.VK_ICD_FILENAMES || process.env.VK_DRIVER_FILES) return true;
  const dirs = [...ICD_DIRS, ...(process.env.XDG_DATA_DIRS ?? '').split(':').filter(Boolean).map((d) => `${d}/vulkan/icd.d`)];
  return dirs.some((d) => {
    try {
      return readdirSync(d).some((f) => f.endsWith('.json'));
    } catch {
      return false;
    }
  });
}

interface DawnModule {
  create(flags: string[]): GPU;
  globals: Record<string, unknown>;
}

async function loadDawn(): Promise<DawnModule> {
  try {
    // A variable specifier keeps bundlers from inlining the native addon's loader.
    const name = 'webgpu';
    return (await import(/* @vite-ignore */ name)) as DawnModule;
  } catch (e) {
    throw new WebGpuUnavailableError(`the 'webgpu' package could not be loaded (${(e as Error).message})`);
  }
}

/**
 * Dawn instances must outlive their devices: if the GPU object is garbage-collected while a device
 * made from it is in use, Dawn frees the instance and crashes (futex/mutex errors, "Invalid argument").
 * Every instance made here is kept for the life of the process.
 */
const KEEP_ALIVE: GPU[] = [];

function createInstance(dawn: DawnModule, flags: string[]): GPU {
  const gpu = dawn.create(flags);
  KEEP_ALIVE.push(gpu);
  return gpu;
}

export interface NodeGpuOptions extends AcquireOptions {
  /** Extra Dawn toggles, e.g. 'enable-dawn-features=allow_unsafe_apis'. */
  dawnFlags?: string[];
  /** Force the SwiftShader CPU adapter even when a GPU is present. */
  forceSwiftShader?: boolean;
  /**
   * Default true: enable Dawn's `vulkan_enable_f16_on_nvidia`, without which Dawn hides `shader-f16`
   * (and the f16 subgroup-matrix configurations) on every NVIDIA GPU under Vulkan (crbug 42251215).
   * No effect on other adapters. false: leave it off (to test the fp32 fallback).
   */
  f16?: boolean;
}

/** Dawn's toggle that exposes shader-f16 on NVIDIA under Vulkan. */
export const F16_ON_NVIDIA_TOGGLE = 'vulkan_enable_f16_on_nvidia';

/**
 * `flags` with `toggle` added to its `<key>=a,b` entry (e.g. enable-dawn-features), or a new entry
 * when there is none; unchanged when the toggle is already there.
 */
export function withDawnToggle(flags: string[], key: 'enable-dawn-features' | 'disable-dawn-features', toggle: string): string[] {
  const i = flags.findIndex((f) => f.startsWith(`${key}=`));
  if (i < 0) return [...flags, `${key}=${toggle}`];
  if (flags[i].slice(key.length + 1).split(',').includes(toggle)) return flags;
  return flags.map((f, j) => (j === i ? `${f},${toggle}` : f));
}

export async function acquireNodeGpu(opts: NodeGpuOptions = {}): Promise<Gpu> {
  if (!process.env.XDG_RUNTIME_DIR) {
    const dir = '/tmp/xdg-runtime';
    mkdirSync(dir, { recursive: true });
    process.env.XDG_RUNTIME_DIR = dir;
  }
  const dawn = await loadDawn();
  Object.assign(globalThis, dawn.globals);
  const flags = opts.f16 === false ? opts.dawnFlags ?? [] : withDawnToggle(opts.dawnFlags ?? [], 'enable-dawn-features', F16_ON_NVIDIA_TOGGLE);
  if (!opts.forceSwiftShader && hasVulkanDriver()) {
    const gpu = createInstance(dawn, flags);
    const adapter = await gpu.requestAdapter({ powerPreference: 'high-performance' });
    if (adapter) return acquireGpu(gpu, opts);
  }
  // No hardware adapter: point the Vulkan loader at SwiftShader (shipped with Debian's chromium).
  if (!existsSync(SWIFTSHADER_ICD)) {
    throw new WebGpuUnavailableError(
      `no GPU adapter, and no SwiftShader ICD at ${SWIFTSHADER_ICD} (apt-get install chromium libvulkan1)`,
    );
  }
  process.env.VK_ICD_FILENAMES = SWIFTSHADER_ICD;
  process.env.VK_DRIVER_FILES = SWIFTSHADER_ICD;
  // Dawn's Vulkan path to zero workgroup memory makes SwiftShader compile each tiled pipeline in
  // seconds; Dawn's own (shader-side) zeroing is kept, so memory is still zeroed, in ~0.2 s.
  const swFlags = withDawnToggle(flags, 'disable-dawn-features', 'use_vulkan_zero_initialize_workgroup_memory_extension');
  return acquireGpu(createInstance(dawn, swFlags), opts);
}
