/**
 * Device acquisition, shared by the browser (navigator.gpu) and Node (Dawn, see ./node.ts).
 * The engine never looks up a GPU itself: callers hand it a `GPU` object, so the same code runs in
 * Chrome, in Vitest on SwiftShader and on a real GPU.
 */

export interface GpuFeatures {
  subgroups: boolean;
  timestampQuery: boolean;
  shaderF16: boolean;
  /** chromium-experimental-subgroup-matrix (tensor-core tiles from WGSL); only with unsafe APIs. */
  subgroupMatrix: boolean;
}

export interface Gpu {
  device: GPUDevice;
  adapterInfo: { vendor: string; architecture: string; device: string; description: string };
  features: GpuFeatures;
  limits: GPUSupportedLimits;
  /**
   * The adapter's subgroup-matrix configurations (GPUAdapterInfo.subgroupMatrixConfigs: component
   * type, result type, M×N×K), copied as plain objects; empty when the feature is off.
   */
  subgroupMatrixConfigs: { componentType: string; resultComponentType: string; M: number; N: number; K: number }[];
  /** Invocations per subgroup, at most (GPUAdapterInfo.subgroupMaxSize; 0 when unknown). */
  subgroupMaxSize: number;
  /** Invocations per subgroup, at least (GPUAdapterInfo.subgroupMinSize; 0 when unknown). */
  subgroupMinSize: number;
  /** Resolves when the device is lost; `lostMessage` is set then. */
  lost: Promise<GPUDeviceLostInfo>;
  lostMessage: string | null;
}

export class WebGpuUnavailableError extends Error {
  constructor(detail: string) {
    super(
      `WebGPU is not available: ${detail}. ` +
        'Use a recent Chrome or Edge (113+). On Linux enable chrome://flags/#enable-unsafe-webgpu and ' +
        '#enable-vulkan, or start Chrome with --enable-unsafe-webgpu --enable-features=Vulkan. ' +
        'In Node, the `webgpu` package needs a Vulkan driver (or Chromium\'s SwiftShader ICD).',
    );
    this.name = 'WebGpuUnavailableError';
  }
}

export class DeviceLostError extends Error {
  constructor(info: string) {
    super(`The GPU device was lost (${info}). Training state on the GPU is gone; ` +
      'reload or restart from the last checkpoint.');
    this.name = 'DeviceLostError';
  }
}

export interface AcquireOptions {
  powerPreference?: GPUPowerPreference;
  /** Optional features to leave off even if present (to test fallbacks). */
  disable?: string[];
}

/** Limits worth raising to the adapter's maximum: big buffers, big workgroups, more bindings. */
const RAISED_LIMITS = [
  'maxStorageBufferBindingSize',
  'maxBufferSize',
  'maxComputeWorkgroupStorageSize',
  'maxComputeInvocationsPerWorkgroup',
  'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY',
  'maxComputeWorkgroupSizeZ',
  'maxComputeWorkgroupsPerDimension',
  'maxStorageBuffersPerShaderStage',
] as const;

/** Dawn's subgroup matrices (tensor-core tiles from WGSL). */
export const SUBGROUP_MATRIX_FEATURE = 'chromium-experimental-subgroup-matrix';

const WANTED_FEATURES = ['subgroups', 'timestamp-query', 'shader-f16', SUBGROUP_MATRIX_FEATURE];

export async function acquireGpu(gpu: GPU | undefined | null, opts: AcquireOptions = {}): Promise<Gpu> {
  if (!gpu) throw new WebGpuUnavailableError('navigator.gpu is missing');
  let adapter: GPUAdapter | null = null;
  try {
    adapter = await gpu.requestAdapter({ powerPreference: opts.powerPreference ?? 'high-performance' });
  } catch (e) {
    throw new WebGpuUnavailableError(`requestAdapter failed (${(e as Error).message})`);
  }
  if (!adapter) throw new WebGpuUnavailableError('no GPU adapter was found');

  const disabled = new Set(opts.disable ?? []);
  const requiredFeatures = WANTED_FEATURES.filter(
    (f) => adapter!.features.has(f) && !disabled.has(f),
  ) as GPUFeatureName[];
  const requiredLimits: Record<string, number> = {};
  for (const name of RAISED_LIMITS) {
    const v = (adapter.limits as unknown as Record<string, number>)[name];
    if (typeof v === 'number') requiredLimits[name] = v;
  }
  let device: GPUDevice;
  try {
    device = await adapter.requestDevice({ requiredFeatures, requiredLimits, label: 'lab-device' });
  } catch {
    // Some adapters advertise features they then refuse together; fall back to the bare device.
    device = await adapter.requestDevice({ label: 'lab-device' });
  }
  const info = adapter.info ?? ({} as GPUAdapterInfo);
  const result: Gpu = {
    device,
    adapterInfo: {
      vendor: info.vendor ?? '',
      architecture: info.architecture ?? '',
      device: info.device ?? '',
      description: info.description ?? '',
    },
    features: {
      subgroups: device.features.has('subgroups'),
      timestampQuery: device.features.has('timestamp-query'),
      shaderF16: device.features.has('shader-f16'),
      subgroupMatrix: device.features.has(SUBGROUP_MATRIX_FEATURE as GPUFeatureName),
    },
    limits: device.limits,
    subgroupMatrixConfigs: [],
    subgroupMaxSize: Number((info as { subgroupMaxSize?: number }).subgroupMaxSize ?? 0),
    subgroupMinSize: Number((info as { subgroupMinSize?: number }).subgroupMinSize ?? 0),
    lost: device.lost,
    lostMessage: null,
  };
  if (result.features.subgroupMatrix) result.subgroupMatrixConfigs = subgroupMatrixConfigsOf(info);
  device.lost.then((i) => {
    result.lostMessage = `${i.reason}: ${i.message}`;
  });
  return result;
}

/** An adapter's subgroup-matrix configurations (GPUAdapterInfo.subgroupMatrixConfigs) as plain objects. */
export function subgroupMatrixConfigsOf(info: GPUAdapterInfo | undefined): Gpu['subgroupMatrixConfigs'] {
  const configs = (info as { subgroupMatrixConfigs?: Iterable<Gpu['subgroupMatrixConfigs'][number]> } | undefined)?.subgroupMatrixConfigs ?? [];
  return [...configs].map((c) => ({
    componentType: String(c.componentType), resultComponentType: String(c.resultComponentType),
    M: Number(c.M), N: Number(c.N), K: Number(c.K),
  }));
}

/**
 * Whether a measured-per-GPU table entry applies to this adapter: every field of `match` is a
 * substring of the adapter's field of the same name (case-insensitive). Used by the GEMM and
 * attention tables (matmul-tables.ts, attention.ts).
 */
export function adapterMatches(gpu: Gpu, match: Partial<Record<keyof Gpu['adapterInfo'], string>>): boolean {
  return Object.entries(match).every(([k, v]) =>
    (gpu.adapterInfo[k as keyof Gpu['adapterInfo']] ?? '').toLowerCase().includes(String(v).toLowerCase()));
}

/** Throws a clear error if the device was lost (checked before each submit). */
export function assertAlive(gpu: Gpu): void {
  if (gpu.lostMessage) throw new DeviceLostError(gpu.lostMessage);
}
