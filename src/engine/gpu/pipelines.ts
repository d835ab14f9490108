/** Compiled pipelines keyed by (code, entry point, override constants): each is built once. */

export interface PipelineSpec {
  label: string;
  code: string;
  entryPoint?: string;
  /** WGSL `override` constants: compile-time, part of the cache key. */
  constants?: Record<string, number>;
}

export class PipelineCache {
  private modules = new Map<string, GPUShaderModule>();
  private pipelines = new Map<string, GPUComputePipeline>();
  /** Set to true (or LAB_DUMP_WGSL=1 in Node) to print every generated shader once. */
  dump = false;
  /** Called with the count after each new pipeline: a slow (software) GPU compiles for minutes, and callers say so. */
  onCreate: ((count: number) => void) | null = null;
  /** Milliseconds spent creating modules and pipelines (Dawn in Node compiles there; a browser may compile later, at first use). */
  createMs = 0;

  constructor(private readonly device: GPUDevice) {}

  get(spec: PipelineSpec): GPUComputePipeline {
    const entryPoint = spec.entryPoint ?? 'main';
    const constKey = spec.constants ? JSON.stringify(Object.entries(spec.constants).sort()) : '';
    const key = `${entryPoint}|${constKey}|${spec.code}`;
    let p = this.pipelines.get(key);
    if (p) return p;
    const t0 = performance.now();
    let module = this.modules.get(spec.code);
    if (!module) {
      if (this.dump) console.log(`// ---- WGSL ${spec.label} ----\n${spec.code}`);
      module = this.device.createShaderModule({ label: spec.label, code: spec.code });
      this.modules.set(spec.code, module);
    }
    p = this.device.createComputePipeline({
      label: spec.label,
      layout: 'auto',
      compute: { module, entryPoint, constants: spec.constants },
    });
    this.pipelines.set(key, p);
    this.createMs += performance.now() - t0;
    this.onCreate?.(this.pipelines.size);
    return p;
  }

  /** Compiles eagerly and reports WGSL errors with line numbers (used by tests and at start-up). */
  async check(spec: PipelineSpec): Promise<void> {
    const errors = await wgslErrors(this.device, spec.label, spec.code);
    if (errors.length) throw new Error(`WGSL errors in ${spec.label}:\n` + errors.map((e) => `  line ${e}`).join('\n'));
  }

  get size(): number {
    return this.pipelines.size;
  }
}

/**
 * The WGSL compile errors of `code`, one `line:column message` each (empty when it compiles). With
 * `quiet` the device's validation error for a bad module is captured rather than reported: for
 * probes that try alternative spellings (sgmat.ts, qgemm-tc.ts), where a rejected one is expected.
 */
export async function wgslErrors(device: GPUDevice, label: string, code: string, quiet = false): Promise<string[]> {
  if (quiet) device.pushErrorScope('validation');
  const module = device.createShaderModule({ label, code });
  const info = await module.getCompilationInfo();
  if (quiet) await device.popErrorScope();
  return info.messages.filter((m) => m.type === 'error').map((m) => `${m.lineNum}:${m.linePos} ${m.message}`);
}
