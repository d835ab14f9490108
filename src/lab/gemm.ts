/**
 * fp32 GEMM benchmark: GFLOP/s of every GEMM variant (or a chosen few) on each shape, timed on the
 * GPU (timestamp queries where present). The CLI formats the rows and adds the baseline (cuBLAS
 * figures measured separately); this module only measures.
 *   M, N, K: C[M,N] = op(A)[M,K]·op(B)[K,N]; FLOPs counted as 2·M·N·K.
 */
import type { Dispatch, Runtime } from '../engine/gpu/runtime';
import { timeDispatches } from '../engine/gpu/timer';
import { buildMatmul, matmulFlops } from '../engine/kernels/matmul/matmul';
import { chooseMatmulVariant } from '../engine/kernels/matmul/choice';
import { type MatmulShape, matmulWorkspaceBytes } from '../engine/kernels/matmul/plan';
import { availableVariants } from '../engine/kernels/matmul/variants';

/** Deterministic non-zero operand data (zeros can run faster than real data on some GPUs). */
export function fillPattern(n: number, seed: number): Float32Array {
  const x = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    x[i] = (s >>> 8) / 16777216 - 0.5;
  }
  return x;
}

export interface GemmOperands {
  a: GPUBuffer;
  b: GPUBuffer;
  c: GPUBuffer;
  /** Split-K partials, when asked for. */
  workspace?: GPUBuffer;
  free(): void;
}

/** Workspace buffers for timing one shape (filled with a fixed pattern). */
export function gemmOperands(rt: Runtime, s: MatmulShape, label = 'gemm', workspaceBytes = 0): GemmOperands {
  const a = rt.upload('workspace', `${label}.a`, fillPattern(s.M * s.K, 1));
  const b = rt.upload('workspace', `${label}.b`, fillPattern(s.K * s.N, 2));
  const c = rt.createBuffer('workspace', `${label}.c`, s.M * s.N * 4);
  const workspace = workspaceBytes > 0 ? rt.createBuffer('workspace', `${label}.splitk`, workspaceBytes) : undefined;
  const all = [a, b, c, ...(workspace ? [workspace] : [])];
  return { a, b, c, workspace, free: () => all.forEach((x) => rt.mem.free(x)) };
}

/** Times one built GEMM (its one or two dispatches): median ms per GEMM, repeated `inner` times per pass. */
export async function timeMatmul(
  rt: Runtime, dispatches: Dispatch[], s: MatmulShape, opts: { warmup?: number; reps?: number; inner?: number; warmupMs?: number } = {},
): Promise<{ ms: number; method: 'timestamp' | 'wallclock' }> {
  const inner = opts.inner ?? Math.min(20, Math.max(1, Math.round(1e9 / matmulFlops(s))));
  const pass = Array.from({ length: inner }, () => dispatches).flat();
  const r = await timeDispatches(rt, pass, { warmup: opts.warmup, reps: opts.reps ?? 5, warmupMs: opts.warmupMs });
  return { ms: r.medianMs / inner, method: r.method };
}

export interface GemmBenchRow {
  M: number;
  N: number;
  K: number;
  transA: boolean;
  transB: boolean;
  variant: string;
  /** The heuristic's pick for this shape (what matmul() uses without autotuning). */
  heuristic: boolean;
  /** Fastest variant measured for this shape. */
  best: boolean;
  ms: number;
  gflops: number;
  method: 'timestamp' | 'wallclock';
}

export interface GemmBenchOptions {
  /**
   * Choice names to time, for every shape or per shape (default: every variant that fits the
   * device; `_skS` names get a workspace).
   */
  variants?: string[] | ((shape: MatmulShape) => string[]);
  warmup?: number;
  reps?: number;
  /** GEMMs per timed pass (default: enough for ~1 GFLOP, at most 20). */
  inner?: number;
  /**
   * Then run each choice until its time per run is steady, for at least this many ms (default 200;
   * 0: no such warm-up): a GPU that idled while the previous choice's pipelines compiled runs the
   * next one slower at first.
   */
  warmupMs?: number;
  /** Each shape's rows once they are all timed (`best` marked). */
  onShape?: (rows: GemmBenchRow[]) => void;
}

export async function benchGemm(rt: Runtime, shapes: MatmulShape[], opts: GemmBenchOptions = {}): Promise<GemmBenchRow[]> {
  const all = availableVariants(rt.device.limits).map((v) => v.name);
  const rows: GemmBenchRow[] = [];
  for (const s of shapes) {
    const shape: MatmulShape = { M: s.M, N: s.N, K: s.K, transA: !!s.transA, transB: !!s.transB };
    const names = typeof opts.variants === 'function' ? opts.variants(shape) : opts.variants ?? all;
    const pick = chooseMatmulVariant(shape, rt.device.limits);
    const ops = gemmOperands(rt, shape, 'bench', Math.max(0, ...names.map((n) => matmulWorkspaceBytes(shape, n))));
    const mine: GemmBenchRow[] = [];
    try {
      for (const variant of names) {
        const built = buildMatmul(rt, { label: 'bench', ...shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant });
        try {
          // The first timing of a call also waits out a GPU still clocking up from idle (1 s); 0: none (quick runs).
          const warmupMs = opts.warmupMs === 0 ? 0 : Math.max(opts.warmupMs ?? 200, rows.length + mine.length === 0 ? 1000 : 0);
          const t = await timeMatmul(rt, built.dispatches, shape, { warmup: opts.warmup ?? 3, reps: opts.reps ?? 10, inner: opts.inner, warmupMs });
          const row: GemmBenchRow = {
            M: shape.M, N: shape.N, K: shape.K, transA: !!shape.transA, transB: !!shape.transB, variant,
            heuristic: variant === pick, best: false, ms: t.ms, gflops: matmulFlops(shape) / (t.ms * 1e6), method: t.method,
          };
          mine.push(row);
        } finally {
          built.uniforms.forEach((u) => rt.mem.free(u));
        }
      }
    } finally {
      ops.free();
    }
    const best = mine.reduce<GemmBenchRow | null>((b, r) => (!b || r.ms < b.ms ? r : b), null);
    if (best) best.best = true;
    rows.push(...mine);
    opts.onShape?.(mine);
  }
  return rows;
}
