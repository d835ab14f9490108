/**
 * The in-product tuner: for the kernel choices a run makes (./jobs.ts), the candidates that fit the
 * adapter's limits (checked before anything is compiled), each checked on the device against its
 * reference (the float64 GEMM and attention references on small shapes of the same form), then
 * warmed until steady and timed on the run's shape; the fastest becomes this device's pick (store.ts)
 * and a cache entry (cache.ts). Incremental (jobs the cache already holds for this adapter and code
 * are skipped), budgeted (no new candidate starts past the budget; a job cut short is not recorded),
 * cancellable (AbortSignal, checked between candidates) and reporting progress with an estimate.
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { timeDispatches } from '../gpu/timer';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward, attentionTileProblem, measuredAttentionTile } from '../kernels/attention/attention';
import { attentionBackwardRef, attentionForwardRef } from '../kernels/attention/attention.ref';
import {
  attentionBackwardI8, attentionForwardI8, attentionI8DkdvTileProblem, attentionI8FwdTileProblem, chooseAttentionI8DkdvTile,
  chooseAttentionI8Tile, quantizeHeadsI8,
} from '../kernels/attention/i8';
import { headCodesLayout } from '../kernels/attention/head-codes';
import { ATTENTION_CANDIDATES, type AttnTile, attnTileName, attnTileOf } from '../kernels/attention/tables';
import { buildMatmul } from '../kernels/matmul/matmul';
import { matmulRef } from '../kernels/matmul/matmul.ref';
import { heuristicCosts, measuredChoice } from '../kernels/matmul/choice';
import { choiceName, type MatmulShape, matmulWorkspaceBytes, parseChoice, shapeKey, splitCandidates, streamKPlan } from '../kernels/matmul/plan';
import { availableVariants, MATMUL_VARIANTS, type MatmulVariant, variantFits, variantThreads } from '../kernels/matmul/variants';
import { Rng } from '../util/rng';
import { type AdapterKey, adapterKeyOf } from './adapter';
import { type TuneCache, type TuneEntry } from './cache';
import type { AttentionJob, AttentionKernel, MatmulJob, TuneJob } from './jobs';
import { gemmInner, gemmOperands, timeAgainstLeader } from './measure';
import { setTunedPicks } from './store';

export interface TuneOptions {
  /** Seconds after which no new candidate starts (default 90). */
  budgetS?: number;
  signal?: AbortSignal;
  onProgress?: (p: TuneProgress) => void;
  /** Timed repetitions per candidate (median; default 5). */
  reps?: number;
  /** Run each candidate until its time per run is steady, at least this many ms (default 30). */
  warmupMs?: number;
  /** Runs of the candidate before timing (default 2). */
  warmup?: number;
  /** GEMMs per timed pass (default: timeMatmul's, up to 20 for a small GEMM on a GPU's clock). */
  gemmInner?: number;
  /** Most GEMM candidates timed per shape, ranked by the cost model with the shipped picks first (default 14; 2 on a CPU adapter). */
  maxGemmCandidates?: number;
  /** Most attention tiles timed per kernel, the shipped and default tile first (default all that fit; 2 on a CPU adapter). */
  maxAttentionCandidates?: number;
  /**
   * Stream-K workgroup counts to try (WebGPU does not say how many workgroups a GPU holds at once);
   * default: the counts the shipped picks for this shape name.
   */
  streamK?: readonly number[];
  /** Re-time jobs the cache already holds. */
  force?: boolean;
  /**
   * A candidate whose first timed sample is over this many times the job's fastest so far gets no
   * more samples (default: every candidate gets `reps`; 1.5 on a CPU adapter).
   */
  earlyStopMargin?: number;
}

export interface TuneProgress {
  phase: 'check' | 'time' | 'done';
  /** The job being tuned (its label), jobs done and all jobs. */
  job: string;
  jobsDone: number;
  jobs: number;
  candidate?: string;
  /** Candidates checked or timed so far, of all the jobs' candidates. */
  done: number;
  total: number;
  elapsedS: number;
  /** Seconds still to go (an estimate from the candidates so far), capped by the budget left. */
  remainingS: number;
}

export interface TuneOutcome {
  adapter: AdapterKey;
  /** Jobs tuned now, jobs the cache already held, jobs not finished (budget, cancel, no candidate). */
  tuned: { key: string; label: string; pick: string; ms: number; candidates: number }[];
  cached: string[];
  unfinished: { key: string; why: string }[];
  /** Candidates left out before compiling (over the adapter's limits) or after (failed the check, or did not build). */
  rejected: { job: string; candidate: string; why: string }[];
  elapsedS: number;
  cancelled: boolean;
  outOfBudget: boolean;
}

/** A candidate of a job: its name, how to check it against its reference, and how to time it on the run's shape. */
interface Candidate {
  name: string;
  /** Null when it passes; a problem otherwise. Shared checks are memoized per device. */
  check(): Promise<string | null>;
  /** Its ms on the run's shape; `leaderMs`, the job's fastest so far, lets a clear loser stop early. */
  time(leaderMs?: number): Promise<number>;
}

interface PreparedJob {
  job: TuneJob;
  candidates: Candidate[];
  rejected: { candidate: string; why: string }[];
  /** Turns the timings into the cache entry's picks (best first). */
  picks(times: Map<string, number>): string[];
  free(): void;
}

const checks = new WeakMap<object, Map<string, Promise<string | null>>>();

/** Memoized per device: a check already run for this key is not run again in this session. */
function memoCheck(rt: Runtime, key: string, run: () => Promise<string | null>): Promise<string | null> {
  let m = checks.get(rt.device);
  if (!m) checks.set(rt.device, (m = new Map()));
  let p = m.get(key);
  if (!p) m.set(key, (p = run().catch((e: Error) => `does not build: ${e.message}`)));
  return p;
}

// ---- GEMM ---------------------------------------------------------------------------------------

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

/** Runs a choice on a shape against matmulRef (alpha 0.5, float64 reference): null when within tolerance. */
async function checkMatmulOn(rt: Runtime, choice: string, s: MatmulShape, seed: number): Promise<string | null> {
  const { M, N, K } = s;
  const rng = new Rng(seed);
  const a = rng.uniformArray(M * K);
  const b = rng.uniformArray(K * N);
  const want = matmulRef(a, b, M, N, K, { transA: s.transA, transB: s.transB, alpha: 0.5 });
  const need = matmulWorkspaceBytes(s, choice);
  const ops = gemmOperands(rt, s, 'tune.check', need);
  try {
    rt.write(ops.a, a);
    rt.write(ops.b, b);
    const built = await rt.checked(choice, () => buildMatmul(rt, { label: 'tune.check', ...s, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: choice, alpha: 0.5 }));
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

/** Checks a GEMM choice against the reference on its job's check shape (memoized per device and shape). */
function checkMatmulChoice(rt: Runtime, choice: string, s: MatmulShape): Promise<string | null> {
  const cs = checkShape(s, parseChoice(choice).variant);
  return memoCheck(rt, `matmul:${choice}:${shapeKey(cs)}`, () => checkMatmulOn(rt, choice, cs, 7));
}

function prepareMatmul(rt: Runtime, job: MatmulJob, o: TuneOptions): PreparedJob {
  const { candidates, rejected } = matmulCandidates(rt, job, { max: o.maxGemmCandidates, streamK: o.streamK });
  const s = job.shape;
  const need = Math.max(0, ...candidates.map((c) => matmulWorkspaceBytes(s, c)));
  let ops: ReturnType<typeof gemmOperands> | null = null;
  const operands = () => (ops ??= gemmOperands(rt, s, 'tune', need));
  return {
    job, rejected,
    candidates: candidates.map((name) => ({
      name,
      check: () => checkMatmulChoice(rt, name, s),
      time: async (leaderMs) => {
        const x = operands();
        const built = await rt.checked(name, () => buildMatmul(rt, { label: 'tune', ...s, a: x.a, b: x.b, c: x.c, workspace: x.workspace, variant: name }));
        try {
          const inner = o.gemmInner ?? gemmInner(s);
          return await timeCandidate(rt, Array.from({ length: inner }, () => built.dispatches).flat(), inner, o, leaderMs);
        } finally {
          built.uniforms.forEach((u) => rt.mem.free(u));
        }
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

// ---- attention ----------------------------------------------------------------------------------

const PASS_OF: Record<AttentionKernel, 'fwd' | 'dq' | 'dkdv'> = { fwd: 'fwd', dq: 'dq', dkdv: 'dkdv', fwdI8: 'fwd', dkdvI8: 'dkdv', dkdvDp8: 'dkdv' };

function attentionProblem(rt: Runtime, kernel: AttentionKernel, t: AttnTile, D: number): string | null {
  if (kernel === 'fwdI8') return attentionI8FwdTileProblem(rt, t, D);
  if (kernel === 'dkdvI8' || kernel === 'dkdvDp8') return attentionI8DkdvTileProblem(rt, t, D, kernel === 'dkdvDp8');
  return attentionTileProblem(rt, kernel, t, D);
}

/**
 * The attention tiles of a kernel within this adapter's limits (workgroup storage, invocations,
 * register blocks), the shipped table's tile and the default first; tiles longer than the sequence
 * (mostly padding) only where nothing shorter fits.
 */
export function attentionCandidates(rt: Runtime, kernel: AttentionKernel, D: number, T = Infinity, max = Infinity): { candidates: AttnTile[]; rejected: { candidate: string; why: string }[] } {
  const fits: AttnTile[] = [];
  const rejected: { candidate: string; why: string }[] = [];
  for (const e of ATTENTION_CANDIDATES[PASS_OF[kernel]]) {
    const t = attnTileOf(e);
    const p = attentionProblem(rt, kernel, t, D);
    if (p) rejected.push({ candidate: attnTileName(t), why: p });
    else fits.push(t);
  }
  const rows = Math.ceil(T / 8) * 8;
  const short = fits.filter((t) => t.BM <= rows && t.BN <= rows);
  const pool = short.length ? short : fits;
  const shipped = measuredAttentionTile(rt, kernel, D);
  const first = [shipped, pool[0]].filter((t): t is AttnTile => t !== undefined && fits.some((f) => attnTileName(f) === attnTileName(t)));
  const names = new Set<string>();
  const candidates = [...first, ...pool].filter((t) => !names.has(attnTileName(t)) && names.add(attnTileName(t)) !== undefined);
  return { candidates: candidates.slice(0, Math.max(1, max)), rejected };
}

interface AttnBuffers {
  q: GPUBuffer; k: GPUBuffer; v: GPUBuffer; o: GPUBuffer; lse: GPUBuffer; dO: GPUBuffer; dq: GPUBuffer; dk: GPUBuffer; dv: GPUBuffer;
  ws: GPUBuffer; codes?: { qc: GPUBuffer; kc: GPUBuffer; oc: GPUBuffer; vc: GPUBuffer; dsScratch: GPUBuffer };
  free(): void;
}

function attentionBuffers(rt: Runtime, s: AttentionJob['shape'], seed: number, i8: boolean, data?: { q: Float32Array; k: Float32Array; v: Float32Array; dO: Float32Array }): AttnBuffers {
  const n = s.B * s.T * s.nH * s.D;
  const nk = s.B * s.T * s.nKV * s.D;
  const rng = new Rng(seed);
  const all: GPUBuffer[] = [];
  const up = (x: Float32Array) => {
    const b = rt.upload('workspace', 'tune.attn', x);
    all.push(b);
    return b;
  };
  const buf = (bytes: number) => {
    const b = rt.createBuffer('workspace', 'tune.attn', Math.max(4, bytes));
    all.push(b);
    return b;
  };
  const d = data ?? { q: rng.normalArray(n), k: rng.normalArray(nk), v: rng.normalArray(nk), dO: rng.normalArray(n, 0.1) };
  const r: AttnBuffers = {
    q: up(d.q), k: up(d.k), v: up(d.v), dO: up(d.dO), o: buf(n * 4), lse: buf(s.B * s.nH * s.T * 4), dq: buf(n * 4), dk: buf(nk * 4), dv: buf(nk * 4),
    ws: buf(attentionBackwardWorkspaceBytes(s.B, s.T, s.nH)), free: () => all.forEach((b) => rt.mem.free(b)),
  };
  if (i8) {
    const hc = (rows: number) => buf(headCodesLayout(rows, s.D).bytes);
    r.codes = { qc: hc(n / s.D), kc: hc(nk / s.D), oc: hc(n / s.D), vc: hc(nk / s.D), dsScratch: buf(Math.max((s.nH / s.nKV) * s.T * s.T * 4, s.B * s.T * s.nH * s.D * 16)) };
    rt.run([...quantizeHeadsI8(rt, 'q', r.q, n / s.D, s.D, r.codes.qc), ...quantizeHeadsI8(rt, 'k', r.k, nk / s.D, s.D, r.codes.kc),
      ...quantizeHeadsI8(rt, 'dO', r.dO, n / s.D, s.D, r.codes.oc), ...quantizeHeadsI8(rt, 'v', r.v, nk / s.D, s.D, r.codes.vc)]);
  }
  return r;
}

/**
 * The tiles of the fp32 passes a backward pass's check and timing build beside it (the forward that
 * makes o and lse, the other backward pass, built but not run): each pass's first candidate, which
 * its own job compiles anyway, rather than the heuristic's tile, a pipeline nothing else compiles
 * (a second or so each on a CPU adapter).
 */
function sideTiles(rt: Runtime, s: AttentionJob['shape']): Record<'fwd' | 'dq' | 'dkdv', AttnTile> {
  const first = (k: 'fwd' | 'dq' | 'dkdv') => attentionCandidates(rt, k, s.D, s.T, 1).candidates[0];
  return { fwd: first('fwd'), dq: first('dq'), dkdv: first('dkdv') };
}

/** The dispatches of one attention kernel with a tile (the backward's pass alone; Di and o/lse are run first). */
function attentionDispatches(rt: Runtime, kernel: AttentionKernel, s: AttentionJob['shape'], b: AttnBuffers, tile: AttnTile, side: Partial<Record<'fwd' | 'dq' | 'dkdv', AttnTile>> = {}): Dispatch[] {
  const base = { label: 'tune', ...s, q: b.q, k: b.k, v: b.v, o: b.o, lse: b.lse };
  if (kernel === 'fwd') return attentionForward(rt, { ...base, tile });
  const c = b.codes;
  if (kernel === 'fwdI8') return attentionForwardI8(rt, { label: 'tune', ...s, qc: c!.qc, kc: c!.kc, v: b.v, o: b.o, lse: b.lse, tile });
  if (kernel === 'dkdvI8' || kernel === 'dkdvDp8') {
    rt.run(attentionForwardI8(rt, { label: 'tune', ...s, qc: c!.qc, kc: c!.kc, v: b.v, o: b.o, lse: b.lse }));
    const all = attentionBackwardI8(rt, {
      label: 'tune', ...s, qc: c!.qc, kc: c!.kc, dp: kernel === 'dkdvDp8' ? { oc: c!.oc, vc: c!.vc } : undefined,
      q: b.q, k: b.k, v: b.v, o: b.o, lse: b.lse, dO: b.dO, dq: b.dq, dk: b.dk, dv: b.dv, workspace: b.ws, dsScratch: c!.dsScratch, tile,
    });
    return all;
  }
  rt.run(attentionForward(rt, { ...base, tile: side.fwd }));
  const tiles = { dq: side.dq, dkdv: side.dkdv, [kernel]: tile };
  const all = attentionBackward(rt, { ...base, dO: b.dO, dq: b.dq, dk: b.dk, dv: b.dv, workspace: b.ws, dqPath: 'recompute', tiles });
  rt.run(all.slice(0, 1)); // Di, which the dQ and dK/dV passes read
  return [all[kernel === 'dq' ? 1 : 2]];
}

/** The largest absolute error relative to the reference's largest magnitude; NaN anywhere gives NaN. */
export function relErr(got: Float32Array, want: ArrayLike<number>): number {
  let d = 0;
  let m = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= d)) d = e; // NaN sticks
    m = Math.max(m, Math.abs(want[i]));
  }
  return d / (m || 1);
}

/**
 * Checks an attention tile on a small shape of the job's heads and head dim: the fp32 passes against
 * the float64 reference (attention.ref.ts); the INT8-score kernels, whose scores the reference would
 * have to quantize alike, against the default tile's outputs on the device (another tile only sums
 * in another order), as bench/attn-i8-tune.ts does.
 */
function checkAttention(rt: Runtime, kernel: AttentionKernel, s: AttentionJob['shape'], tile: AttnTile): Promise<string | null> {
  return memoCheck(rt, `attention:${kernel}:${attnTileName(tile)}:${s.nH}/${s.nKV}/${s.D}`, async () => {
    const small = { B: 1, T: Math.min(s.T, Math.max(2 * tile.BM, 2 * tile.BN) + 5), nH: s.nH, nKV: s.nKV, D: s.D };
    const n = small.T * small.nH * small.D;
    const nk = small.T * small.nKV * small.D;
    const rng = new Rng(17);
    const data = { q: rng.normalArray(n), k: rng.normalArray(nk), v: rng.normalArray(nk), dO: rng.normalArray(n, 0.1) };
    const i8 = kernel.includes('I8') || kernel === 'dkdvDp8';
    const b = attentionBuffers(rt, small, 17, i8, data);
    try {
      const outputs = async () => (PASS_OF[kernel] === 'fwd' ? [await rt.readF32(b.o, 0, n)]
        : kernel === 'dq' ? [await rt.readF32(b.dq, 0, n)] : [await rt.readF32(b.dk, 0, nk), await rt.readF32(b.dv, 0, nk)]);
      let want: ArrayLike<number>[];
      let tol = 2e-5;
      if (i8) {
        const def = kernel === 'fwdI8' ? chooseAttentionI8Tile(rt, small.D) : chooseAttentionI8DkdvTile(rt, small.D, kernel === 'dkdvDp8');
        rt.run(await rt.checked('default tile', () => attentionDispatches(rt, kernel, small, b, def)));
        want = await outputs();
        tol = 1e-5;
      } else {
        const f = attentionForwardRef(data.q, data.k, data.v, 1, small.T, small.nH, small.nKV, small.D);
        if (kernel === 'fwd') want = [f.o];
        else {
          const g = attentionBackwardRef(data.q, data.k, data.v, f.o, f.lse, data.dO, 1, small.T, small.nH, small.nKV, small.D);
          want = kernel === 'dq' ? [g.dq] : [g.dk, g.dv];
        }
      }
      const ds = await rt.checked(attnTileName(tile), () => attentionDispatches(rt, kernel, small, b, tile, i8 ? {} : sideTiles(rt, s)));
      rt.run(ds);
      const got = await outputs();
      const err = Math.max(...got.map((g, i) => relErr(g, want[i])));
      return err <= tol ? null : `wrong at ${small.T}x${small.nH}x${small.D}: relative error ${err.toExponential(2)} > ${tol}`;
    } finally {
      b.free();
    }
  });
}

function prepareAttention(rt: Runtime, job: AttentionJob, o: TuneOptions): PreparedJob {
  const { candidates, rejected } = attentionCandidates(rt, job.kernel, job.shape.D, job.shape.T, o.maxAttentionCandidates);
  const i8 = job.kernel.includes('I8') || job.kernel === 'dkdvDp8';
  let bufs: AttnBuffers | null = null;
  const byName = new Map(candidates.map((t) => [attnTileName(t), t]));
  return {
    job, rejected,
    candidates: candidates.map((tile) => ({
      name: attnTileName(tile),
      check: () => checkAttention(rt, job.kernel, job.shape, tile),
      time: async (leaderMs) => {
        bufs ??= attentionBuffers(rt, job.shape, 5, i8);
        const all = await rt.checked(attnTileName(tile), () => attentionDispatches(rt, job.kernel, job.shape, bufs!, tile, i8 ? {} : sideTiles(rt, job.shape)));
        // The INT8 backward's dK/dV kernel alone (its dispatches: Di, then per dS chunk dK/dV and dq).
        const ds = job.kernel === 'dkdvI8' || job.kernel === 'dkdvDp8' ? all.filter((d) => d.label.includes('DkDv')) : all;
        return timeCandidate(rt, ds.length ? ds : all, 1, o, leaderMs);
      },
    })),
    picks: (times) => [...times].sort((a, b) => a[1] - b[1]).map(([n]) => n).filter((n) => byName.has(n)).slice(0, 1),
    free: () => {
      bufs?.free();
      bufs = null;
    },
  };
}

/**
 * Times a candidate's dispatches (`inner` runs of the kernel each): warmed as the options say, then
 * `reps` samples, or one when that one is clearly behind the job's leader (earlyStopMargin). Median ms per run.
 */
async function timeCandidate(rt: Runtime, dispatches: Dispatch[], inner: number, o: TuneOptions, leaderMs: number | undefined): Promise<number> {
  let warm = true;
  const sample = async (reps: number) => {
    const r = await timeDispatches(rt, dispatches, warm ? { warmup: o.warmup ?? 2, reps, warmupMs: o.warmupMs ?? 30 } : { warmup: 0, reps });
    warm = false;
    return r.samplesMs.map((ms) => ms / inner);
  };
  const margin = o.earlyStopMargin;
  return (await timeAgainstLeader(sample, o.reps ?? 5, margin === undefined ? undefined : leaderMs, margin ?? Infinity)).ms;
}

// ---- the tuner ----------------------------------------------------------------------------------

/** The jobs the cache lacks for this adapter and the current code (all with `force`). */
export function missingJobs(jobs: readonly TuneJob[], cache: TuneCache, adapter: AdapterKey, force = false): TuneJob[] {
  return jobs.filter((j) => {
    if (force) return true;
    const e = cache.get(adapter, j.family, j.key);
    // A GEMM tuned with less workspace than this call has may miss a faster split.
    return !e || (j.family === 'matmul' && (e.workspaceBytes ?? 0) < j.workspaceBytes);
  });
}

/** A software adapter (SwiftShader, llvmpipe/lavapipe, WARP). */
export function isCpuAdapter(a: AdapterKey): boolean {
  return /swiftshader|llvmpipe|lavapipe|warp|software|cpu/i.test(`${a.vendor} ${a.architecture} ${a.device} ${a.description}`);
}

/**
 * The options a tune runs with on this device: on a CPU adapter (SwiftShader: seconds to compile
 * each GEMM pipeline, and times that say nothing about a GPU) the first two candidates of each
 * choice (the shipped or heuristic pick first), one warm-up run and no wait for a steady clock, two
 * repetitions of 4 GEMMs (a small GEMM takes ~1 ms there, far above the wall clock's resolution),
 * and one for a candidate whose first is over 1.5× the job's fastest so far.
 */
export function deviceTuneOptions(rt: Runtime, o: TuneOptions = {}): TuneOptions {
  if (!isCpuAdapter(adapterKeyOf(rt.gpu.adapterInfo))) return o;
  return { maxGemmCandidates: 2, maxAttentionCandidates: 2, warmup: 1, warmupMs: 0, reps: 2, gemmInner: 4, earlyStopMargin: 1.5, ...o };
}

/** First guess of one candidate's seconds (compile, check, warm-up, timing) before any is measured; a CPU adapter compiles a GEMM for seconds. */
function guessS(rt: Runtime): number {
  return isCpuAdapter(adapterKeyOf(rt.gpu.adapterInfo)) ? 2.5 : 0.25;
}

/**
 * Tunes the jobs the cache lacks on this device: writes each finished job into the cache and the
 * device's picks (so the kernels built after this use them), and applies the cache's other current
 * entries for this adapter too. Returns what it did; throws only on a lost device.
 */
export async function tuneJobs(rt: Runtime, jobs: readonly TuneJob[], cache: TuneCache, o: TuneOptions = {}): Promise<TuneOutcome> {
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  const budgetS = o.budgetS ?? 90;
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  o = deviceTuneOptions(rt, o);
  cache.applyTo(rt.device, adapter);
  const todo = missingJobs(jobs, cache, adapter, o.force);
  const outcome: TuneOutcome = {
    adapter, tuned: [], cached: jobs.filter((j) => !todo.includes(j)).map((j) => j.key), unfinished: [], rejected: [],
    elapsedS: 0, cancelled: false, outOfBudget: false,
  };
  const prepared = todo.map((j) => (j.family === 'matmul' ? prepareMatmul(rt, j, o) : prepareAttention(rt, j, o)));
  let done = 0;
  let spent = 0;
  const guess = guessS(rt);
  const perCandidate = () => (done > 0 ? spent / done : guess);
  // Two rounds. First every job's first candidate (the shipped or heuristic pick: what the run would
  // compile anyway), so a slow device (a CPU adapter compiling each pipeline for seconds) covers
  // every choice before any gets a second look; then each job's other candidates within an equal
  // share of what is left of the budget. Past the whole budget no candidate starts.
  const times = prepared.map(() => new Map<string, number>());
  const shareS = (jobsLeft: number) => Math.max(0, budgetS - elapsed()) / Math.max(1, jobsLeft);
  let total = prepared.reduce((n, p) => n + Math.min(1, p.candidates.length), 0);
  const progress = (phase: TuneProgress['phase'], jobIndex: number, candidate?: string) => {
    o.onProgress?.({
      phase, job: prepared[jobIndex]?.job.label ?? '', jobsDone: jobIndex, jobs: prepared.length, candidate, done, total,
      elapsedS: elapsed(), remainingS: Math.max(0, Math.min((total - done) * perCandidate(), budgetS - elapsed())),
    });
  };
  let stop: string | null = null;
  const attempt = async (i: number, c: Candidate) => {
    const p = prepared[i];
    const c0 = performance.now();
    progress('check', i, c.name);
    const problem = await c.check();
    if (problem) outcome.rejected.push({ job: p.job.key, candidate: c.name, why: problem });
    else {
      progress('time', i, c.name);
      try {
        times[i].set(c.name, await c.time(times[i].size ? Math.min(...times[i].values()) : undefined));
      } catch (e) {
        outcome.rejected.push({ job: p.job.key, candidate: c.name, why: `does not build: ${(e as Error).message}` });
      }
    }
    done++;
    spent += (performance.now() - c0) / 1000;
  };
  const stopped = () => {
    if (o.signal?.aborted) stop = 'cancelled';
    else if (elapsed() > budgetS) stop = `out of the ${budgetS} s budget`;
    return stop !== null;
  };
  try {
    for (const [i, p] of prepared.entries()) {
      for (const r of p.rejected) outcome.rejected.push({ job: p.job.key, ...r });
      // A first candidate that fails its check hands the first round to the next one.
      for (const c of p.candidates) {
        if (stopped()) break;
        await attempt(i, c);
        if (times[i].size > 0) break;
      }
      p.free(); // a job's operands live while it is timed only
    }
    total = done + prepared.reduce((n, p, i) => n + p.candidates.length - Math.min(p.candidates.length, times[i].size), 0);
    for (const [i, p] of prepared.entries()) {
      const deadline = elapsed() + shareS(prepared.length - i);
      for (const c of p.candidates) {
        if (times[i].has(c.name) || outcome.rejected.some((r) => r.job === p.job.key && r.candidate === c.name)) continue;
        if (stopped() || elapsed() + perCandidate() > deadline) break;
        await attempt(i, c);
      }
      p.free();
    }
  } finally {
    for (const p of prepared) p.free();
  }
  if (stop === 'cancelled') outcome.cancelled = true;
  else if (stop) outcome.outOfBudget = true;
  for (const [i, p] of prepared.entries()) {
    // A job keeps the best of what it timed (cancelled or out of budget alike); one that timed none is unfinished.
    if (times[i].size === 0) {
      outcome.unfinished.push({ key: p.job.key, why: stop ?? 'no candidate passed its check' });
      continue;
    }
    const picks = p.picks(times[i]);
    const entry: TuneEntry = {
      picks, ms: times[i].get(picks[0])!, candidates: times[i].size, at: new Date().toISOString(),
      ...(p.job.family === 'matmul' ? { workspaceBytes: p.job.workspaceBytes } : {}),
    };
    cache.put(adapter, p.job.family, p.job.key, entry);
    setTunedPicks(rt.device, p.job.family, p.job.key, picks);
    outcome.tuned.push({ key: p.job.key, label: p.job.label, pick: picks[0], ms: entry.ms, candidates: times[i].size });
  }
  outcome.elapsedS = elapsed();
  progress('done', prepared.length);
  return outcome;
}

/** Candidates and a first estimate of the seconds a tune of these jobs takes on this device (before any is timed). */
export function tuneEstimate(rt: Runtime, jobs: readonly TuneJob[], o: TuneOptions = {}): { candidates: number; seconds: number } {
  o = deviceTuneOptions(rt, o);
  let candidates = 0;
  for (const j of jobs) {
    candidates += j.family === 'matmul' ? matmulCandidates(rt, j, { max: o.maxGemmCandidates, streamK: o.streamK }).candidates.length
      : attentionCandidates(rt, j.kernel, j.shape.D, j.shape.T, o.maxAttentionCandidates).candidates.length;
  }
  return { candidates, seconds: Math.min(candidates * guessS(rt), o.budgetS ?? 90) };
}

