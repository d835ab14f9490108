/**
 * The bench's exhaustive GEMM autotuner: times every candidate choice per shape (no pruning, no
 * budget) and sets the fastest as this device's pick (setTunedVariant). The product's tuner, which
 * runs tuned runs (npm run tune, train --tune, the page), is src/engine/tune: its limits check,
 * reference check, operands and timing are what this file and bench/gemm-tune.ts use too.
 */
import type { Runtime } from '../src/engine/gpu/runtime';
import { buildMatmul } from '../src/engine/kernels/matmul/matmul';
import { setTunedVariant } from '../src/engine/kernels/matmul/choice';
import { choiceName, type MatmulShape, matmulWorkspaceBytes, splitCandidates } from '../src/engine/kernels/matmul/plan';
import { availableVariants } from '../src/engine/kernels/matmul/variants';
import { gemmOperands, timeMatmul } from '../src/engine/tune/measure';
import { matmulCandidateProblem } from '../src/engine/tune/tuner';

export interface AutotuneOptions {
  /** Candidate choices (default: every variant that fits the device, plus its split-K choices). */
  variants?: string[];
  /** Split-K workspace the tuned calls will have (default 0: one-pass choices only). */
  workspaceBytes?: number;
  warmup?: number;
  reps?: number;
  /** Dispatches per timed pass (default: enough for ~1 GFLOP, at most 20). */
  inner?: number;
  /**
   * Run each candidate until its time per run is steady, at least this many ms, before timing it
   * (default 0): the GPU idles while a candidate's pipeline compiles, and a short GEMM timed right
   * after runs at the idle clock, several times slower.
   */
  warmupMs?: number;
}

export interface AutotuneResult {
  shape: MatmulShape;
  variant: string;
  /** Median ms of one GEMM, per candidate. */
  timesMs: Record<string, number>;
  method: 'timestamp' | 'wallclock';
}

/**
 * Every choice worth timing on a shape: the variants that fit, plus their split-K choices within
 * the workspace, plus stream-K over each of `streamK` workgroup counts (how many workgroups the GPU
 * holds at once is not something WebGPU reports: the caller names the counts to try) where the
 * plan shares tiles and its workspace fits.
 */
export function autotuneCandidates(rt: Runtime, s: MatmulShape, workspaceBytes = 0, streamK: readonly number[] = []): string[] {
  return availableVariants(rt.device.limits).flatMap((v) => [
    v.name,
    ...splitCandidates(s, v, workspaceBytes).map((S) => choiceName(v.name, S)),
    ...(v.swizzle > 1 ? [] : streamK.map((W) => choiceName(v.name, 1, W)).filter((c) => {
      const bytes = matmulWorkspaceBytes(s, c);
      return bytes > 0 && bytes <= workspaceBytes;
    })),
  ]);
}

/**
 * Times every candidate choice on each shape on this GPU and caches the fastest, so later
 * matmul()/matmulSteps() calls for the same (M,N,K,transA,transB) use it. Call before building the model.
 */
export async function autotuneMatmul(rt: Runtime, shapes: MatmulShape[], opts: AutotuneOptions = {}): Promise<AutotuneResult[]> {
  const wsBytes = opts.workspaceBytes ?? 0;
  const results: AutotuneResult[] = [];
  for (const shape of shapes) {
    // The product's check of a choice against the adapter's limits and the call's workspace, before compiling.
    const candidates = (opts.variants ?? autotuneCandidates(rt, shape, wsBytes)).filter((n) => matmulCandidateProblem(rt.device.limits, shape, n, wsBytes) === null);
    if (candidates.length === 0) throw new Error('autotuneMatmul: no candidate variant fits this device');
    const need = Math.max(0, ...candidates.map((n) => matmulWorkspaceBytes(shape, n)));
    const ops = gemmOperands(rt, shape, 'autotune', need);
    const timesMs: Record<string, number> = {};
    let method: AutotuneResult['method'] = 'wallclock';
    try {
      for (const name of candidates) {
        const built = buildMatmul(rt, { label: 'autotune', ...shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: name });
        try {
          const t = await timeMatmul(rt, built.dispatches, shape, opts);
          timesMs[name] = t.ms;
          method = t.method;
        } finally {
          built.uniforms.forEach((u) => rt.mem.free(u));
        }
      }
    } finally {
      ops.free();
    }
    // Ties (and NaN) go to the earlier, larger-tile candidate.
    const best = candidates.reduce((x, y) => (timesMs[y] < timesMs[x] ? y : x));
    setTunedVariant(rt, shape, best);
    results.push({ shape: { ...shape }, variant: best, timesMs, method });
  }
  return results;
}
