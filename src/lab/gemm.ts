/**
 * fp32 GEMM benchmark: GFLOP/s of every GEMM variant (or a chosen few) on each shape, timed on the
 * GPU (timestamp queries where present). The CLI formats the rows and adds the baseline (cuBLAS
 * figures measured separately); this module only measures.
 *   M, N, K: C[M,N] = op(A)[M,K]·op(B)[K,N]; FLOPs counted as 2·M·N·K.
 */
import type { Runtime } from '../engine/gpu/runtime';
import { buildMatmul, matmulFlops } from '../engine/kernels/matmul/matmul';
import { chooseMatmulVariant } from '../engine/kernels/matmul/choice';
import { type MatmulShape, matmulWorkspaceBytes } from '../engine/kernels/matmul/plan';
import { availableVariants } from '../engine/kernels/matmul/variants';

// Operands and timing live with the tuner (engine/tune/measure.ts); the benchmarks use the same.
export { fillPattern, type GemmOperands, gemmOperands, timeMatmul } from '../engine/tune/measure';
import { gemmOperands, timeMatmul } from '../engine/tune/measure';

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
