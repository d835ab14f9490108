// Every GEMM pipeline the dispatch code builds, recorded without a GPU: for each variant and choice
// (one pass, split-K, stream-K) on a few shapes and all three of the model's forms, the WGSL text,
// entry point, override constants, grid and uniform bytes of each dispatch, as a digest. Any change
// to what a pipeline runs shows up here; update the snapshot (vitest -u) only for an intended one.
import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { KernelCall, Runtime, Uniforms } from '../../src/engine/gpu/runtime';
import { buildMatmul, type MatmulArgs } from '../../src/engine/kernels/matmul/matmul';
import { type MatmulShape, matmulWorkspaceBytes } from '../../src/engine/kernels/matmul/plan';
import { MATMUL_VARIANTS } from '../../src/engine/kernels/matmul/variants';
import { MEASURED_TABLES } from '../../src/engine/kernels/matmul/tables';

const LIMITS = {
  maxComputeWorkgroupStorageSize: 65536, maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024,
  maxComputeWorkgroupsPerDimension: 65535,
};

interface Recorded { label: string; digest: string }

/** The parts of a Runtime buildMatmul touches, recording each kernel and uniform instead of creating it. */
function recordingRuntime(adapter: { vendor: string; device: string }) {
  const log: Recorded[] = [];
  const buffer = (label: string, size: number) => ({ label, size, mapAsync() {} }) as unknown as GPUBuffer;
  const uniformBytes = new Map<GPUBuffer, string>();
  const rt = {
    device: { limits: LIMITS },
    gpu: { adapterInfo: { ...adapter, architecture: '', description: '' } },
    mem: { free() {} },
    uniform(label: string, u: Uniforms) {
      const b = buffer(label, 256);
      uniformBytes.set(b, Buffer.from(u.bytes()).toString('hex'));
      return b;
    },
    upload(_c: string, label: string, data: ArrayBufferView) {
      const b = buffer(label, data.byteLength);
      uniformBytes.set(b, Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString('hex'));
      return b;
    },
    kernel(call: KernelCall) {
      const h = createHash('sha256');
      h.update(call.code).update(call.entryPoint ?? '').update(JSON.stringify(call.constants ?? {}))
        .update(JSON.stringify(call.workgroups)).update(String(call.bindings.length));
      for (const b of call.bindings) h.update(uniformBytes.get(b as GPUBuffer) ?? '');
      log.push({ label: call.label, digest: h.digest('hex').slice(0, 16) });
      return {} as never;
    },
  };
  return { rt: rt as unknown as Runtime, log };
}

const operands = (s: MatmulShape, wsBytes: number) => {
  const buf = (n: number) => ({ size: n, mapAsync() {} }) as unknown as GPUBuffer;
  return { a: buf(s.M * s.K * 4), b: buf(s.K * s.N * 4), c: buf(s.M * s.N * 4), workspace: wsBytes > 0 ? buf(wsBytes) : undefined };
};

const forms = (M: number, N: number, K: number): MatmulShape[] => [
  { M, N, K, transA: false, transB: true },
  { M, N: K, K: N, transA: false, transB: false },
  { M: N, N: K, K: M, transA: true, transB: false },
];

const SHAPES = [...forms(256, 256, 256), ...forms(100, 65, 36), ...forms(2048, 384, 384)];

/** Per shape and variant, one digest over its choices (one pass, split-K, stream-K) × accumulate × specialize. */
function record(): Record<string, string> {
  const out: Record<string, string> = {};
  const perVariant = new Map<string, string[]>();
  const { rt, log } = recordingRuntime({ vendor: 'test', device: 'recorder' });
  const build = (key: string, args: MatmulArgs) => {
    log.length = 0;
    try {
      const built = buildMatmul(rt, args);
      out[key] = `${built.variant} ${built.fullTiles ? 'full' : 'edge'} ${log.map((r) => `${r.label}=${r.digest}`).join(' ')}`;
    } catch (e) {
      out[key] = `error: ${(e as Error).message}`;
    }
  };
  for (const s of SHAPES) {
    const tag = `${s.M}x${s.N}x${s.K}${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'}`;
    for (const v of MATMUL_VARIANTS) {
      for (const choice of [v.name, `${v.name}_sk3`, `${v.name}_st7`]) {
        if (choice.endsWith('_st7') && v.swizzle > 1) continue;
        const ws = matmulWorkspaceBytes(s, choice);
        for (const accumulate of [false, true]) {
          for (const specialize of [true, false]) {
            const key = `${tag} ${choice} acc${+accumulate} spec${+specialize}`;
            build(key, { label: 'g', ...s, ...operands(s, ws), variant: choice, accumulate, specialize, alpha: accumulate ? 0.5 : 1 });
            const group = `${tag} ${v.name}`;
            perVariant.set(group, [...(perVariant.get(group) ?? []), `${key}: ${out[key]}`]);
            delete out[key];
          }
        }
      }
    }
    // The default pick (heuristic here), with and without a workspace.
    for (const ws of [0, 64 << 20]) build(`${tag} default ws${ws}`, { label: 'g', ...s, ...operands(s, ws) });
  }
  // The measured table's picks on the GPU it names, for every shape it lists.
  const t = MEASURED_TABLES[0];
  const { rt: h200 } = recordingRuntime({ vendor: t.match.vendor ?? '', device: t.match.device ?? '' });
  for (const key of Object.keys(t.table)) {
    const m = /^(\d+)x(\d+)x(\d+)([NT])([NT])$/.exec(key);
    if (!m) continue;
    const s = { M: +m[1], N: +m[2], K: +m[3], transA: m[4] === 'T', transB: m[5] === 'T' };
    for (const ws of [0, 64 << 20]) {
      log.length = 0;
      const built = buildMatmul(h200, { label: 'g', ...s, ...operands(s, ws) });
      out[`table ${key} ws${ws}`] = built.variant;
    }
  }
  for (const [group, lines] of perVariant) out[group] = createHash('sha256').update(lines.join('\n')).digest('hex').slice(0, 16);
  return out;
}

describe('GEMM pipelines', () => {
  it('every variant and choice builds the same dispatches as recorded', () => {
    expect(record()).toMatchSnapshot();
  });
});
