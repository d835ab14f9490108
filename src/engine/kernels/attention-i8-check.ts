/**
 * Turning tensor cores on for the INT8 attention scores (attention-i8.ts) on a device: the forward
 * and the dK/dV kernel on subgroup matrices must give the dot4 kernels' bits (the integers are
 * exact either way, and the rest of each kernel is the same text), checked on a problem with
 * partial tiles and grouped heads before any run uses them. A device that miscomputes, or a driver
 * that rejects the shaders, keeps dot4.
 */
import type { Runtime } from '../gpu/runtime';
import { wgslErrors } from '../gpu/pipelines';
import { Rng } from '../util/rng';
import { attentionBackwardWorkspaceBytes, attnTileName } from './attention';
import {
  attentionBackwardI8, attentionDkdvI8Code, attentionForwardI8, attentionForwardI8Code, type AttnScorePath, type AttnTc,
  chooseAttentionI8DkdvTile, chooseAttentionI8Tile, quantizeHeadsI8, setAttentionI8Tc,
} from './attention-i8';
import { dsPairBytes } from './attention-ds';
import { attentionForwardRef } from './attention.ref';
import { i8TensorCoreSpec } from './qgemm-tc';

export interface AttnI8TcCheck {
  D: number;
  ok: boolean;
  /** Elements of o, lse, dq, dk, dv whose bits differ between the two paths. */
  mismatches?: number;
  /** Per output, tensor cores against dot4. */
  parts?: Record<Part, PartDiff>;
  /** o and lse of each path against the CPU reference on the same codes (the integers are exact, so only fp32 rounding remains). */
  ref?: Record<AttnScorePath, Record<'o' | 'lse', PartDiff>>;
  /** Tensor cores kept on although the check failed (benchmarks: setAttentionI8TcForced). */
  forced?: boolean;
  error?: string;
  fwdTile?: string;
  dkdvTile?: string;
}

const PARTS = ['o', 'lse', 'dq', 'dk', 'dv'] as const;
type Part = (typeof PARTS)[number];

/** How far one part of the outputs is from another run's: differing elements, largest |difference| over largest |value|. */
export interface PartDiff { mismatches: number; relMax: number }

/** The INT8-score forward and backward on `path`, on seeded inputs: each output, and o / lse from the CPU reference on the codes. */
async function runPath(rt: Runtime, D: number, path: AttnScorePath, seed: number): Promise<{ out: Record<Part, Float32Array>; ref: Pick<Record<Part, Float64Array>, 'o' | 'lse'> }> {
  const s = { B: 1, T: 130, nH: 2, nKV: 1, D };
  const rng = new Rng(seed);
  const nq = s.B * s.T * s.nH * D;
  const nk = s.B * s.T * s.nKV * D;
  const owned: GPUBuffer[] = [];
  const host = { q: rng.normalArray(nq), k: rng.normalArray(nk), v: rng.normalArray(nk), dO: rng.normalArray(nq) };
  const up = (x: Float32Array) => {
    const b = rt.upload('workspace', 'attnI8.check', x);
    owned.push(b);
    return b;
  };
  const buf = (bytes: number) => {
    const b = rt.createBuffer('workspace', 'attnI8.check', bytes);
    owned.push(b);
    return b;
  };
  const [q, k, v, dO] = [up(host.q), up(host.k), up(host.v), up(host.dO)];
  const [qc, kc, qs, ks] = [buf(nq), buf(nk), buf((nq / D) * 4), buf((nk / D) * 4)];
  const [o, lse, dq, dk, dv] = [buf(nq * 4), buf(s.T * s.nH * 4), buf(nq * 4), buf(nk * 4), buf(nk * 4)];
  const ws = buf(attentionBackwardWorkspaceBytes(s.B, s.T, s.nH));
  const dsScratch = buf(dsPairBytes(s.T, s.nH / s.nKV));
  try {
    rt.run([
      ...quantizeHeadsI8(rt, 'chk.q', q, nq / D, D, qc, qs),
      ...quantizeHeadsI8(rt, 'chk.k', k, nk / D, D, kc, ks),
      ...attentionForwardI8(rt, { label: 'chk', qc, qs, kc, ks, v, o, lse, path, ...s }),
      ...attentionBackwardI8(rt, { label: 'chk', q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, dsScratch, qc, qs, kc, ks, path, ...s }),
    ]);
    const out = {
      o: await rt.readF32(o, 0, nq), lse: await rt.readF32(lse, 0, s.T * s.nH),
      dq: await rt.readF32(dq, 0, nq), dk: await rt.readF32(dk, 0, nk), dv: await rt.readF32(dv, 0, nk),
    };
    const deq = async (codes: GPUBuffer, scales: GPUBuffer, n: number) => {
      const c = new Int8Array((await rt.readU32(codes, 0, n / 4)).buffer);
      const sc = await rt.readF32(scales, 0, n / D);
      return Float64Array.from(c, (x, i) => x * sc[Math.floor(i / D)]);
    };
    const ref = attentionForwardRef(await deq(qc, qs, nq), await deq(kc, ks, nk), host.v, s.B, s.T, s.nH, s.nKV, D);
    return { out, ref };
  } finally {
    for (const b of owned) rt.mem.free(b);
  }
}

function diff(a: ArrayLike<number>, b: ArrayLike<number>): PartDiff {
  let mismatches = 0;
  let d = 0;
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    if (!Object.is(a[i], b[i])) mismatches++;
    d = Math.max(d, Math.abs(a[i] - b[i]));
    m = Math.max(m, Math.abs(b[i]));
  }
  return { mismatches, relMax: m ? d / m : d };
}

const checks = new WeakMap<Runtime, Map<number, AttnI8TcCheck>>();

/** What enableAttentionI8Tc found for head dim D on this runtime (undefined: not checked). */
export function attentionI8TcCheck(rt: Runtime, D: number): AttnI8TcCheck | undefined {
  return checks.get(rt)?.get(D);
}

/** Every head dim's check on this runtime. */
export function attentionI8TcChecks(rt: Runtime): AttnI8TcCheck[] {
  return [...(checks.get(rt)?.values() ?? [])];
}

/** enableAttentionI8Tc's result, kept for attentionI8TcCheck. */
export async function enableAttentionI8Tc(rt: Runtime, D: number): Promise<AttnI8TcCheck> {
  const r = await check(rt, D);
  checks.set(rt, (checks.get(rt) ?? new Map<number, AttnI8TcCheck>()).set(D, r));
  return r;
}

/**
 * Enables tensor cores for INT8 attention scores at head dim D where enableI8TensorCores enabled
 * them for the GEMMs and both kernels match dot4 bit for bit; reports what it found either way.
 */
async function check(rt: Runtime, D: number): Promise<AttnI8TcCheck> {
  const spec = i8TensorCoreSpec(rt);
  if (!spec) return { D, ok: false, error: 'INT8 tensor cores are not enabled for the GEMMs' };
  const tc: AttnTc = { cfg: spec.cfg, syntax: spec.syntax, unitDiv: spec.unitDiv, sgSize: spec.sgSize };
  setAttentionI8Tc(rt, D, undefined);
  let fwdTile;
  let dkdvTile;
  try {
    fwdTile = chooseAttentionI8Tile(rt, D, tc);
    dkdvTile = chooseAttentionI8DkdvTile(rt, D, tc);
  } catch (e) {
    return { D, ok: false, error: (e as Error).message };
  }
  const tiles = { fwdTile: attnTileName(fwdTile), dkdvTile: attnTileName(dkdvTile) };
  const errors = [
    ...await wgslErrors(rt.device, 'attnI8.check.fwd', attentionForwardI8Code(D, fwdTile, tc), true),
    ...await wgslErrors(rt.device, 'attnI8.check.dkdv', attentionDkdvI8Code(D, dkdvTile, tc), true),
  ];
  if (errors.length) return { D, ok: false, error: errors.join('; '), ...tiles };
  const want = await runPath(rt, D, 'int8-dot4', 17);
  setAttentionI8Tc(rt, D, tc);
  let got: Awaited<ReturnType<typeof runPath>>;
  rt.device.pushErrorScope('validation');
  try {
    got = await runPath(rt, D, 'int8-tensor-core', 17);
  } catch (e) {
    await rt.device.popErrorScope();
    setAttentionI8Tc(rt, D, undefined);
    return { D, ok: false, error: (e as Error).message, ...tiles };
  }
  const invalid = await rt.device.popErrorScope();
  const parts = Object.fromEntries(PARTS.map((p) => [p, diff(got.out[p], want.out[p])])) as Record<Part, PartDiff>;
  const refOf = (r: typeof want) => ({ o: diff(r.out.o, r.ref.o), lse: diff(r.out.lse, r.ref.lse) });
  const ref = { 'int8-dot4': refOf(want), 'int8-tensor-core': refOf(got) };
  const mismatches = PARTS.reduce((n, p) => n + parts[p].mismatches, 0);
  const ok = !invalid && mismatches === 0;
  const forced = !ok && forcedRuntimes.has(rt);
  if (!ok && !forced) setAttentionI8Tc(rt, D, undefined);
  return { D, ok, mismatches, parts, ref, ...(forced ? { forced } : {}), ...(invalid ? { error: invalid.message } : {}), ...tiles };
}

const forcedRuntimes = new WeakSet<Runtime>();

/** Benchmarks only: keep the attention scores' tensor cores on even where the check finds them off dot4 (to time them). */
export function setAttentionI8TcForced(rt: Runtime): void {
  forcedRuntimes.add(rt);
}
