/**
 * GEMM jobs of the tuner: the choices worth timing on a shape (within the adapter's limits, ranked
 * by the cost model with the shipped picks first, tiles that cannot win on the shape left out), the
 * check of a choice against the float64 reference on a small shape that runs the same pipeline, and
 * its build on the job's shape for timing.
 */
import type { Runtime } from '../gpu/runtime';
import { buildMatmul } from '../kernels/matmul/matmul';
import { matmulRef } from '../kernels/matmul/matmul.ref';
import { heuristicCosts, measuredChoice } from '../kernels/matmul/choice';
import { choiceName, type MatmulShape, matmulWorkspaceBytes, parseChoice, shapeKey, splitCandidates, streamKPlan } from '../kernels/matmul/plan';
import { availableVariants, MATMUL_VARIANTS, type MatmulVariant, variantFits, variantThreads } from '../kernels/matmul/variants';
import { Rng } from '../util/rng';
import { builtInForms, type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import { callForms, type MatmulJob } from './jobs';
import { gemmInner, gemmOperands } from './measure';

/** Why a GEMM choice cannot run on this device for a shape (checked before compiling), or null. */
export function matmulCandidateProblem(limits: GPUSupportedLimits, s: MatmulShape, choice: string, workspaceBytes: number): string | null {
  let c;
  try {
    c = parseChoice(choice);
  } catch (e) {
    return (e as Error).message;
  }
  const v = c.variant;
  const t = variantThreads(v);
  if (t > limits.maxComputeInvocationsPerWorkgroup || t > limits.maxComputeWorkgroupSizeX) return `${t} invocations per workgroup (limit ${limits.maxComputeInvocationsPerWorkgroup})`;
  if (!variantFits(v, limits)) return `workgroup storage over ${limits.maxComputeWorkgroupStorageSize} B`;
  const need = matmulWorkspaceBytes(s, choice);
  if (need > workspaceBytes) return `needs ${need} B of workspace, the call has ${workspaceBytes}`;
  if (c.streamK > 0) {
    const plan = streamKPlan(s, v, c.streamK);
    const rows = Math.ceil((plan.dpTiles + plan.parts.length / 4) / plan.tilesX);
    if (rows > limits.maxComputeWorkgroupsPerDimension) return `${rows} rows of workgroups (limit ${limits.maxComputeWorkgroupsPerDimension})`;
  }
  const tiles = Math.ceil(s.N / v.BN);
  if (tiles > limits.maxComputeWorkgroupsPerDimension) return `${tiles} workgroups across (limit ${limits.maxComputeWorkgroupsPerDimension})`;
  return null;
}

/** C's elements a choice's tiles cover on a shape (M×N rounded up to whole tiles). */
function tiledArea(s: MatmulShape, choice: string): number {
  const v = parseChoice(choice).variant;
  return Math.ceil(s.M / v.BM) * v.BM * Math.ceil(s.N / v.BN) * v.BN;
}

/**
 * Whether a GEMM choice cannot win on a shape against the others (the tiny models' GEMMs): a tile
 * that would be mostly padding (more than twice C's elements), or one longer than the problem in M
 * or N (its threads past the edge compute nothing) while another choice pads less.
 */
export function tileCannotWin(s: MatmulShape, choice: string, others: readonly string[]): boolean {
  const area = tiledArea(s, choice);
  if (area / (s.M * s.N) > 2) return true;
  const v = parseChoice(choice).variant;
  return (v.BM > s.M || v.BN > s.N) && others.some((o) => tiledArea(s, o) < area);
}

/**
 * The choices worth timing on a GEMM job: every variant within the limits with its split-K choices
 * (within the call's workspace) and stream-K over `streamK` workgroup counts, ranked by the cost
 * model; the shipped table's picks for the shape and the heuristic's pick always among them.
 */
export function matmulCandidates(rt: Runtime, job: MatmulJob, o: { max?: number; streamK?: readonly number[] } = {}): { candidates: string[]; rejected: { candidate: string; why: string }[] } {
  const { shape, workspaceBytes: ws } = job;
  const limits = rt.device.limits;
  const shipped = measuredChoice(rt, shape);
  const streamK = new Set(o.streamK ?? []);
  const seeded: string[] = [];
  if (shipped) seeded.push(shipped.name);
  // Every ranked pick of a shipped table for this shape (ever smaller workspaces) and its stream-K counts.
  for (const f of [(c: string) => matmulWorkspaceBytes(shape, c) <= ws, () => true]) {
    const m = measuredChoice(rt, shape, f);
    if (m && !seeded.includes(m.name)) seeded.push(m.name);
  }
  for (const s of seeded) {
    const c = parseChoice(s);
    if (c.streamK > 0) streamK.add(c.streamK);
  }
  const costs = heuristicCosts(shape, limits, { workspaceBytes: ws });
  const cost = new Map(costs.map((c) => [c.name, c.cost]));
  const all = new Set<string>(costs.map((c) => c.name));
  for (const v of availableVariants(limits)) {
    for (const S of splitCandidates(shape, v, ws)) all.add(choiceName(v.name, S));
    if (v.swizzle <= 1) {
      for (const W of streamK) {
        const name = choiceName(v.name, 1, W);
        if (matmulWorkspaceBytes(shape, name) > 0) {
          all.add(name);
          cost.set(name, (cost.get(v.name) ?? Infinity) * 0.97);
        }
      }
    }
  }
  const rejected: { candidate: string; why: string }[] = [];
  // Variants over this adapter's limits never reach the cost model; say which and why.
  for (const v of MATMUL_VARIANTS) {
    if (variantFits(v, limits)) continue;
    rejected.push({ candidate: v.name, why: matmulCandidateProblem(limits, shape, v.name, ws) ?? 'over the limits' });
  }
  const ok = (c: string) => {
    const p = matmulCandidateProblem(limits, shape, c, ws);
    if (p) rejected.push({ candidate: c, why: p });
    return !p;
  };
  const within = [...all].filter(ok);
  const lean = within.filter((c) => !tileCannotWin(shape, c, within));
  const ranked = (lean.length ? lean : within).sort((a, b) => (cost.get(a) ?? Infinity) - (cost.get(b) ?? Infinity));
  const heuristic = ranked[0];
  const max = o.max ?? 14;
  const first = [...seeded.filter((s) => within.includes(s)), ...(heuristic && !seeded.includes(heuristic) ? [heuristic] : [])];
  const out = [...first, ...ranked.filter((c) => !first.includes(c))].slice(0, Math.max(1, max));
  for (const s of seeded) if (!within.includes(s) && !rejected.some((r) => r.candidate === s)) rejected.push({ candidate: s, why: 'shipped pick over the limits' });
  return { candidates: out, rejected };
}

/**
 * The shape a GEMM choice is checked on for a job: the job's own when small, else at most three
 * tiles each way with the same remainders, so the check runs the same pipeline as the timing (the
 * same transposes, vec4 access and whole-tile path: one compile for both) on a shape the float64
 * reference computes quickly. K keeps enough k tiles for split-K to split.
 */
export function checkShape(s: MatmulShape, v: MatmulVariant): MatmulShape {
  if (s.M * s.N * s.K <= 1 << 21) return { ...s };
  const cut = (n: number, b: number, tiles: number) => (n <= tiles * b ? n : (tiles - 1) * b + (n % b || b));
  return { M: cut(s.M, v.BM, 3), N: cut(s.N, v.BN, 3), K: cut(s.K, v.BK, 6), transA: s.transA, transB: s.transB };
}

/**
 * Runs a choice on a shape against matmulRef (float64 reference): null when within tolerance. Writing C
 * with alpha 0.5, or (`accumulate`) adding alpha 1 times the product to a C that holds values already.
 */
async function checkMatmulOn(rt: Runtime, choice: string, s: MatmulShape, seed: number, accumulate = false): Promise<string | null> {
  const { M, N, K } = s;
  const rng = new Rng(seed);
  const a = rng.uniformArray(M * K);
  const b = rng.uniformArray(K * N);
  const c0 = accumulate ? rng.uniformArray(M * N) : undefined;
  const alpha = accumulate ? 1 : 0.5;
  const want = matmulRef(a, b, M, N, K, { transA: s.transA, transB: s.transB, alpha, c0 });
  const need = matmulWorkspaceBytes(s, choice);
  const ops = gemmOperands(rt, s, 'tune.check', need);
  try {
    rt.write(ops.a, a);
    rt.write(ops.b, b);
    if (c0) rt.write(ops.c, c0);
    const built = await rt.checked(choice, () => buildMatmul(rt, { label: 'tune.check', ...s, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: choice, alpha, accumulate }));
    try {
      rt.run(built.dispatches);
      const got = await rt.readF32(ops.c, 0, M * N);
      const tol = 2e-6 * K + 1e-6;
      let err = 0;
      for (let i = 0; i < want.length; i++) err = Math.max(err, Math.abs(got[i] - want[i]) || (Number.isNaN(got[i]) ? Infinity : 0));
      return err <= tol ? null : `wrong on ${M}x${N}x${K}: max error ${err.toExponential(2)} > ${tol.toExponential(2)}`;
    } finally {
      built.uniforms.forEach((u) => rt.mem.free(u));
    }
  } finally {
    ops.free();
  }
}

/** Checks a GEMM choice against the reference on its job's check shape (memoized per device, shape and form). */
export function checkMatmulChoice(rt: Runtime, choice: string, s: MatmulShape, accumulate = false): Promise<string | null> {
  const cs = checkShape(s, parseChoice(choice).variant);
  return memoCheck(rt, `matmul:${choice}:${shapeKey(cs)}${accumulate ? '+acc' : ''}`, () => checkMatmulOn(rt, choice, cs, 7, accumulate));
}

export function prepareMatmul(rt: Runtime, job: MatmulJob, o: CandidateOptions): PreparedJob {
  const { candidates, rejected } = matmulCandidates(rt, job, { max: o.maxGemmCandidates, streamK: o.streamK });
  const s = job.shape;
  const need = Math.max(0, ...candidates.map((c) => matmulWorkspaceBytes(s, c)));
  let ops: ReturnType<typeof gemmOperands> | null = null;
  const operands = () => (ops ??= gemmOperands(rt, s, 'tune', need));
  const forms = callForms(job.calls);
  return {
    job, rejected,
    candidates: candidates.map((name) => ({
      name,
      // Each form the step runs is checked: an accumulating pipeline is compiled apart from the writing one.
      check: async () => {
        for (const acc of new Set(forms)) {
          const e = await checkMatmulChoice(rt, name, s, acc);
          if (e) return acc ? `accumulating: ${e}` : e;
        }
        return null;
      },
      build: () => {
        const x = operands();
        return builtInForms(rt, forms, o.gemmInner ?? gemmInner(s), (acc) =>
          rt.checked(name, () => buildMatmul(rt, { label: 'tune', ...s, a: x.a, b: x.b, c: x.c, workspace: x.workspace, variant: name, accumulate: acc })));
      },
    })),
    // The fastest, then the fastest for ever smaller workspaces, down to one pass (what a call with less workspace takes).
    picks: (times) => {
      const rows = [...times].sort((a, b) => a[1] - b[1]);
      const ladder: string[] = [];
      let least = Infinity;
      for (const [c] of rows) {
        const w = matmulWorkspaceBytes(s, c);
        if (w < least) {
          ladder.push(c);
          least = w;
        }
        if (w === 0) break;
      }
      return ladder;
    },
    free: () => {
      ops?.free();
      ops = null;
    },
  };
}
