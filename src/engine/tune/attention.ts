/**
 * Attention jobs of the tuner: the tiles of a kernel within the adapter's limits (the shipped and
 * default tile first), the check of a tile (fp32 passes against the float64 reference, INT8-score
 * ones against the default tile on the device) and its timing on the run's shape.
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward, attentionTileProblem, measuredAttentionTile } from '../kernels/attention/attention';
import { attentionBackwardRef, attentionForwardRef } from '../kernels/attention/attention.ref';
import {
  attentionBackwardI8, attentionForwardI8, attentionI8DkdvTileProblem, attentionI8FwdTileProblem, chooseAttentionI8DkdvTile,
  chooseAttentionI8Tile, quantizeHeadsI8,
} from '../kernels/attention/i8';
import { headCodesLayout } from '../kernels/attention/head-codes';
import { ATTENTION_CANDIDATES, type AttnTile, attnTileName, attnTileOf } from '../kernels/attention/tables';
import { Rng } from '../util/rng';
import { type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import type { AttentionJob, AttentionKernel } from './jobs';

const PASS_OF: Record<AttentionKernel, 'fwd' | 'dq' | 'dkdv'> = { fwd: 'fwd', dq: 'dq', dkdv: 'dkdv', fwdI8: 'fwd', dkdvI8: 'dkdv', dkdvDp8: 'dkdv' };

/** Why a tile cannot run a kernel at head dim D on this adapter (its limits), or null. */
export function attentionProblem(rt: Runtime, kernel: AttentionKernel, t: AttnTile, D: number): string | null {
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
 * in another order), as bench/attn-i8-tune.ts does. Memoized per device.
 */
export function checkAttention(rt: Runtime, kernel: AttentionKernel, s: AttentionJob['shape'], tile: AttnTile): Promise<string | null> {
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

export function prepareAttention(rt: Runtime, job: AttentionJob, o: CandidateOptions): PreparedJob {
  const { candidates, rejected } = attentionCandidates(rt, job.kernel, job.shape.D, job.shape.T, o.maxAttentionCandidates);
  const i8 = job.kernel.includes('I8') || job.kernel === 'dkdvDp8';
  let bufs: AttnBuffers | null = null;
  const byName = new Map(candidates.map((t) => [attnTileName(t), t]));
  return {
    job, rejected,
    candidates: candidates.map((tile) => ({
      name: attnTileName(tile),
      check: () => checkAttention(rt, job.kernel, job.shape, tile),
      build: async () => {
        bufs ??= attentionBuffers(rt, job.shape, 5, i8);
        const all = await rt.checked(attnTileName(tile), () => attentionDispatches(rt, job.kernel, job.shape, bufs!, tile, i8 ? {} : sideTiles(rt, job.shape)));
        // The INT8 backward's dK/dV kernel alone (its dispatches: Di, then per dS chunk dK/dV and dq).
        const ds = job.kernel === 'dkdvI8' || job.kernel === 'dkdvDp8' ? all.filter((d) => d.label.includes('DkDv')) : all;
        return { dispatches: ds.length ? ds : all, inner: 1, free: () => {} };
      },
    })),
    picks: (times) => [...times].sort((a, b) => a[1] - b[1]).map(([n]) => n).filter((n) => byName.has(n)).slice(0, 1),
    free: () => {
      bufs?.free();
      bufs = null;
    },
  };
}
