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
import { i8TensorCoreSpec } from './qgemm-tc';

export interface AttnI8TcCheck {
  D: number;
  ok: boolean;
  /** Elements of o, lse, dq, dk, dv whose bits differ between the two paths. */
  mismatches?: number;
  error?: string;
  fwdTile?: string;
  dkdvTile?: string;
}

/** Runs the INT8-score forward and backward on `path`; returns o, lse, dq, dk, dv concatenated. */
async function runPath(rt: Runtime, D: number, path: AttnScorePath, seed: number): Promise<Float32Array> {
  const s = { B: 1, T: 130, nH: 2, nKV: 1, D };
  const rng = new Rng(seed);
  const nq = s.B * s.T * s.nH * D;
  const nk = s.B * s.T * s.nKV * D;
  const owned: GPUBuffer[] = [];
  const up = (n: number) => {
    const b = rt.upload('workspace', 'attnI8.check', rng.normalArray(n));
    owned.push(b);
    return b;
  };
  const buf = (bytes: number) => {
    const b = rt.createBuffer('workspace', 'attnI8.check', bytes);
    owned.push(b);
    return b;
  };
  const [q, k, v, dO] = [up(nq), up(nk), up(nk), up(nq)];
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
    const parts = [await rt.readF32(o, 0, nq), await rt.readF32(lse, 0, s.T * s.nH), await rt.readF32(dq, 0, nq), await rt.readF32(dk, 0, nk), await rt.readF32(dv, 0, nk)];
    const out = new Float32Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  } finally {
    for (const b of owned) rt.mem.free(b);
  }
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
  let got: Float32Array;
  rt.device.pushErrorScope('validation');
  try {
    got = await runPath(rt, D, 'int8-tensor-core', 17);
  } catch (e) {
    await rt.device.popErrorScope();
    setAttentionI8Tc(rt, D, undefined);
    return { D, ok: false, error: (e as Error).message, ...tiles };
  }
  const invalid = await rt.device.popErrorScope();
  const a = new Uint32Array(want.buffer);
  const b = new Uint32Array(got.buffer);
  let mismatches = 0;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) mismatches++;
  const ok = !invalid && mismatches === 0;
  if (!ok) setAttentionI8Tc(rt, D, undefined);
  return { D, ok, mismatches, ...(invalid ? { error: invalid.message } : {}), ...tiles };
}
