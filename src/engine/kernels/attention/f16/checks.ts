/**
 * The f16 attention's verification on the device: like enableF16TensorCores (kernels/matmul-f16),
 * enableF16Attention runs each candidate (./layouts.ts) on small cases against the plain-TS reference
 * (../attention.ref.ts on f16-rounded q, k, v) and only a spec that passed serves attentionForwardF16 /
 * attentionBackwardF16 (./picks.ts keeps what passed). The checks run the variant the model runs, which
 * also writes the next f16 GEMM's operand (o's, dv's f16 copy): each copy must be exactly the f16
 * rounding of the fp32 output.
 */
import type { Binding, Runtime } from '../../../gpu/runtime';
import { wgslErrors } from '../../../gpu/pipelines';
import { f32ArrayToF16, roundF16, roundF16Array } from '../../../quant/f16';
import { Rng } from '../../../util/rng';
import { f16ConfigsOf } from '../../matmul-f16/plan';
import { subgroupMatrixConfigs, subgroupSize } from '../../qgemm/sgmat';
import { tunedEntries } from '../../../tune/store';
import { type F16Out, f16OperandBytes } from '../../matmul-f16/cast';
import { attentionBackwardRef, attentionForwardRef } from '../attention.ref';
import { type F16AttnFwdOptions, f16AttnBlockQ, f16AttnForwardCode, f16AttnInputElems, f16AttnLabel, f16AttnSpecError, type F16AttnSpec } from './code';
import { f16AttnBwdSpecError, f16AttnDkdvCode, f16AttnDqCode, f16AttnDqDsCode, f16AttnDsPairBytes } from './code-bwd';
import { type AttentionBackwardF16Args, attentionBackwardF16, attentionForwardF16, type F16AttnBwdInputs, type F16AttnInputs } from './attention-f16';
import { f16AttnBwdCandidates, f16AttnBwdLabel, type F16AttnBwdSpecs, f16AttnCandidates, firstPassingBwd } from './layouts';
import {
  enabledBwdSpecs, enabledRecomputeSpecs, enabledSpecs, f16AttnBwdPick, f16AttnBwdSpecsOfPick, f16AttnPick, f16AttnSpecOfPick, markVerified, verifiedKey, verifiedKeys,
} from './picks';

/** Head dims the f16 attention is verified for (the presets' 64, and 32 of the small ones); others keep fp32 attention. */
export const F16_ATTENTION_HEAD_DIMS = [32, 64];

export interface F16AttnCase {
  B: number; T: number; nH: number; nKV: number;
  /** k's row t scaled by 1 + kGrowth·t/T: later keys score ever higher, so row maxima jump between key blocks (the online rescale). */
  kGrowth?: number;
}

export interface F16AttnCheck {
  ok: boolean;
  maxErrO: number;
  maxErrLse: number;
  error?: string;
}

/**
 * Tolerances against the float64 reference on f16-rounded q, k, v (|v| ≤ 1): P is rounded to f16
 * before P·V (relative 2^-11 per weight, at most ~1e-3 on o) and scores sum D f16 products in f32.
 */
export const F16_ATTN_TOL = { o: 2e-3, lse: 2e-4 };

/**
 * Runs the forward on seeded data (q scaled ×3 so the softmax is peaked and the online rescale
 * matters) and compares o and lse with attentionForwardRef on the f16-rounded inputs. `rows`:
 * compare only these query rows (b·T + t) (big shapes; the reference is O(T²)). Compile and
 * validation errors come back as `error`.
 */
export async function checkAttentionF16(rt: Runtime, spec: F16AttnSpec, c: F16AttnCase,
  o: { emulate?: boolean; seed?: number; heads?: number; inputs?: 'f16' | 'f32'; rowMax?: F16AttnFwdOptions['rowMax'] } = {}): Promise<F16AttnCheck> {
  const { B, T, nH, nKV } = c;
  const D = spec.D;
  const rng = new Rng(o.seed ?? T * 31 + nH * 7 + nKV);
  const q = rng.uniformArray(B * T * nH * D).map((x) => 3 * x);
  const k = rng.uniformArray(B * T * nKV * D);
  if (c.kGrowth) for (let i = 0; i < k.length; i++) k[i] *= 1 + (c.kGrowth * (Math.floor(i / (nKV * D)) % T)) / T;
  const v = rng.uniformArray(B * T * nKV * D);
  const bufs: GPUBuffer[] = [];
  const fail = (error: string): F16AttnCheck => ({ ok: false, maxErrO: NaN, maxErrLse: NaN, error });
  try {
    const direct = (o.inputs ?? 'f16') === 'f16';
    const code = f16AttnForwardCode(spec, { emulate: o.emulate, o16: o.emulate ? 'f32' : 'f16', inputs: o.inputs ?? 'f16', rowMax: o.rowMax });
    // A spec this device rejects is expected while probing: keep its error out of the console.
    const errors = await wgslErrors(rt.device, 'f16attn.check', code, true);
    if (errors.length) return fail(errors.join('; '));
    const up = (x: Float32Array | Uint16Array) => {
      const b = rt.upload('workspace', 'f16attn.check.in', x);
      bufs.push(b);
      return b;
    };
    // The f16 copies (the model's inputs), their pad rows filled with other finite values: what the
    // last blocks' loads read past T must not reach a visible row.
    const copy16 = (x: Float32Array, width: number) => {
      const padded = rng.uniformArray(f16AttnInputElems(B * T, width));
      padded.set(x);
      return up(o.emulate ? roundF16Array(padded) : f32ArrayToF16(padded));
    };
    const qkv16: F16AttnInputs | undefined = direct ? { q: copy16(q, nH * D), k: copy16(k, nKV * D), v: copy16(v, nKV * D), elem: o.emulate ? 'f32' : 'f16' } : undefined;
    const qb = up(q);
    const kb = up(k);
    const vb = up(v);
    const ob = up(new Float32Array(B * T * nH * D).fill(NaN));
    const lb = up(new Float32Array(B * nH * T).fill(NaN));
    // The variant the model runs: o's f16 copy too (packed; the twin's f32 when emulated), checked below.
    const o16 = f16CheckOut(up, B * T * nH * D, o.emulate);
    const ds = await rt.checked('f16attn.check', () => attentionForwardF16(rt, { label: 'f16attn.check', B, T, nH, nKV, D, q: qb, k: kb, v: vb, o: ob, lse: lb, spec, emulate: o.emulate, o16, qkv16, rowMax: o.rowMax }));
    rt.device.pushErrorScope('validation');
    rt.run(ds);
    const err = await rt.device.popErrorScope();
    if (err) return fail(err.message);
    const got = new Float32Array(await rt.read(ob, 0, B * T * nH * D * 4));
    const gotL = new Float32Array(await rt.read(lb, 0, B * nH * T * 4));
    const bad16 = await f16CopyMismatch(rt, o16, got);
    if (bad16) return fail(`o's f16 copy: ${bad16}`);
    // Heads compared: all, or the first `heads` of each batch row (the reference is O(B·nH·T²·D)).
    const hs = Math.min(nH, o.heads ?? nH);
    const sub = (x: Float32Array, heads: number) => {
      const out = new Float32Array(B * T * hs * D);
      for (let r = 0; r < B * T; r++) out.set(x.subarray(r * heads * D, r * heads * D + hs * D), r * hs * D);
      return out;
    };
    // The compared query heads read KV heads floor(h / G) < ceil(hs / G): keep those.
    const G = nH / nKV;
    const kvs = Math.ceil(hs / G);
    const keepKv = (x: Float32Array) => {
      const out = new Float32Array(B * T * kvs * D);
      for (let r = 0; r < B * T; r++) out.set(x.subarray(r * nKV * D, r * nKV * D + kvs * D), r * kvs * D);
      return out;
    };
    const ref = hs === nH
      ? attentionForwardRef(roundF16Array(q), roundF16Array(k), roundF16Array(v), B, T, nH, nKV, D)
      : refSubset(roundF16Array(sub(q, nH)), roundF16Array(keepKv(k)), roundF16Array(keepKv(v)), B, T, hs, kvs, G, D);
    const gotO = hs === nH ? got : sub(got, nH);
    let maxErrO = 0;
    for (let i = 0; i < ref.o.length; i++) maxErrO = Math.max(maxErrO, Math.abs(gotO[i] - ref.o[i]) || (Number.isNaN(gotO[i]) ? Infinity : 0));
    let maxErrLse = 0;
    for (let b = 0; b < B; b++) {
      for (let h = 0; h < hs; h++) {
        for (let t = 0; t < T; t++) {
          const g = gotL[(b * nH + h) * T + t];
          const w = ref.lse[(b * hs + h) * T + t];
          maxErrLse = Math.max(maxErrLse, Number.isNaN(g) ? Infinity : Math.abs(g - w) / Math.max(1, Math.abs(w)));
        }
      }
    }
    return { ok: maxErrO <= F16_ATTN_TOL.o && maxErrLse <= F16_ATTN_TOL.lse, maxErrO, maxErrLse };
  } catch (e) {
    return fail((e as Error).message);
  } finally {
    bufs.forEach((x) => rt.mem.free(x));
  }
}

/** A check's f16 copy of n values: packed f16 words, or f32 in the emulated twin (castF16Operand's layouts). */
function f16CheckOut(up: (x: Float32Array) => GPUBuffer, n: number, emulate?: boolean): F16Out {
  const elem = emulate ? 'f32' : 'f16';
  return { out: up(new Float32Array(f16OperandBytes(n, emulate === true) / 4).fill(NaN)), elem };
}

/** Where a kernel's f16 copy differs from the f16 rounding of its fp32 output y (null: nowhere). */
async function f16CopyMismatch(rt: Runtime, h: F16Out, y: Float32Array): Promise<string | null> {
  const words = await rt.read(h.out as GPUBuffer, 0, f16OperandBytes(y.length, h.elem === 'f32'));
  const same = (a: number, b: number) => a === b || (Number.isNaN(a) && Number.isNaN(b));
  if (h.elem === 'f32') {
    const got = new Float32Array(words);
    const i = got.findIndex((v, j) => !same(v, roundF16(y[j])));
    return i < 0 ? null : `element ${i}: ${got[i]} for ${y[i]}`;
  }
  const got = new Uint16Array(words);
  const want = f32ArrayToF16(y);
  const i = want.findIndex((v, j) => v !== got[j]);
  return i < 0 ? null : `element ${i}: bits ${got[i]} for ${y[i]}`;
}

/** The reference on the first hs query heads (G per KV head as in the full problem), as attentionForwardRef lays it out for hs heads. */
function refSubset(q: Float32Array, k: Float32Array, v: Float32Array, B: number, T: number, hs: number, kvs: number, G: number, D: number) {
  // attentionForwardRef maps head h to KV head floor(h / (hs / kvs)); equal to floor(h / G) when hs is a multiple of G.
  if (hs % G !== 0) throw new Error(`f16 attention check: compared heads ${hs} must be a multiple of G=${G}`);
  return attentionForwardRef(q, k, v, B, T, hs, kvs, D);
}

/** The cases a spec must pass: GQA with a partial last query block and key block, a whole block with one head per KV head, and row maxima that jump between key blocks. */
export function f16AttnCheckCases(s: F16AttnSpec): F16AttnCase[] {
  const BQ = f16AttnBlockQ(s);
  return [
    { B: 1, T: 2 * Math.max(BQ, s.BKV) + 5, nH: 4, nKV: 2 },
    { B: 2, T: BQ, nH: 2, nKV: 2 },
    { B: 1, T: 2 * Math.max(BQ, s.BKV) + 3, nH: 2, nKV: 1, kGrowth: 8 },
  ];
}

export interface F16AttnBwdCheck {
  ok: boolean;
  /** Max error of dq, dk, dv over the max magnitude of the reference's (the tolerance's unit). */
  relErr: { dq: number; dk: number; dv: number };
  error?: string;
}

/**
 * Tolerance of the backward, relative to each gradient's largest reference magnitude: P and dS are
 * rounded to f16 before their products (2^-11 relative each), the rest as the forward.
 */
export const F16_ATTN_BWD_TOL = 4e-3;

/**
 * Runs the backward on seeded data (q ×3 as in checkAttentionF16) with o and lse from the float64
 * forward of the f16-rounded inputs, against attentionBackwardRef on f16-rounded q, k, v, dO.
 */
export async function checkAttentionBackwardF16(rt: Runtime, specs: F16AttnBwdSpecs, c: F16AttnCase, o: { emulate?: boolean; seed?: number; inputs?: 'f16' | 'f32' } = {}): Promise<F16AttnBwdCheck> {
  const { B, T, nH, nKV } = c;
  const D = specs.dq.D;
  const rng = new Rng(o.seed ?? T * 17 + nH * 5 + nKV);
  const q = roundF16Array(rng.uniformArray(B * T * nH * D).map((x) => 3 * x));
  const k = roundF16Array(rng.uniformArray(B * T * nKV * D));
  const v = roundF16Array(rng.uniformArray(B * T * nKV * D));
  const dO = roundF16Array(rng.uniformArray(B * T * nH * D));
  const fwd = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
  const of32 = Float32Array.from(fwd.o);
  const lf32 = Float32Array.from(fwd.lse);
  const bufs: GPUBuffer[] = [];
  const fail = (error: string): F16AttnBwdCheck => ({ ok: false, relErr: { dq: NaN, dk: NaN, dv: NaN }, error });
  try {
    const inputs = o.inputs ?? 'f16';
    const dqCode = specs.dq.ds ? f16AttnDqDsCode(specs.dq, { emulate: o.emulate }) : f16AttnDqCode(specs.dq, { emulate: o.emulate, inputs });
    for (const [kind, code] of [['dq', dqCode], ['dkdv', f16AttnDkdvCode(specs.dkdv, { emulate: o.emulate, inputs, dv16: o.emulate ? 'f32' : 'f16' })]] as const) {
      const errors = await wgslErrors(rt.device, `f16attn.check.${kind}`, code, true);
      if (errors.length) return fail(`${kind}: ${errors.join('; ')}`);
    }
    const up = (x: Float32Array | Uint16Array) => {
      const b = rt.upload('workspace', 'f16attn.bwd.in', x);
      bufs.push(b);
      return b;
    };
    const nq = B * T * nH * D;
    const nk = B * T * nKV * D;
    // The f16 copies (the model's inputs), pad rows filled with other finite values (checkAttentionF16).
    const copy16 = (x: Float32Array, width: number) => {
      const padded = rng.uniformArray(f16AttnInputElems(B * T, width));
      padded.set(x);
      return up(o.emulate ? roundF16Array(padded) : f32ArrayToF16(padded));
    };
    const qkv16: F16AttnBwdInputs | undefined = inputs === 'f16'
      ? { q: copy16(q, nH * D), k: copy16(k, nKV * D), v: copy16(v, nKV * D), dO: copy16(dO, nH * D), elem: o.emulate ? 'f32' : 'f16' }
      : undefined;
    const args: AttentionBackwardF16Args = {
      label: 'f16attn.bwd', B, T, nH, nKV, D, q: up(q), k: up(k), v: up(v), o: up(of32), lse: up(lf32), dO: up(dO),
      dq: up(new Float32Array(nq).fill(NaN)), dk: up(new Float32Array(nk).fill(NaN)), dv: up(new Float32Array(nk).fill(NaN)),
      workspace: up(new Float32Array(B * nH * T)), specs, emulate: o.emulate, qkv16,
      // Stored dS: room for half the pairs (two chunks where there are two or more), NaN where nothing is
      // stored (packed f16 NaNs on the device): a read of an unstored entry shows in dq.
      dsScratch: specs.dq.ds ? up(new Float32Array(Math.ceil(B * nKV / 2) * f16AttnDsPairBytes(T, nH / nKV, o.emulate) / 4).fill(NaN)) : undefined,
      // The variant the model runs: dv's f16 copy too, checked below.
      dv16: f16CheckOut(up, nk, o.emulate),
    };
    const ds = await rt.checked('f16attn.bwd', () => attentionBackwardF16(rt, args));
    rt.device.pushErrorScope('validation');
    rt.run(ds);
    const err = await rt.device.popErrorScope();
    if (err) return fail(err.message);
    const ref = attentionBackwardRef(q, k, v, of32, lf32, dO, B, T, nH, nKV, D);
    const rel = async (b: Binding, want: Float64Array) => {
      const got = new Float32Array(await rt.read(b as GPUBuffer, 0, want.length * 4));
      let mag = 0;
      let e = 0;
      for (let i = 0; i < want.length; i++) {
        mag = Math.max(mag, Math.abs(want[i]));
        e = Math.max(e, Number.isNaN(got[i]) ? Infinity : Math.abs(got[i] - want[i]));
      }
      return e / Math.max(mag, 1e-30);
    };
    const relErr = { dq: await rel(args.dq, ref.dq), dk: await rel(args.dk, ref.dk), dv: await rel(args.dv, ref.dv) };
    const bad16 = await f16CopyMismatch(rt, args.dv16!, new Float32Array(await rt.read(args.dv as GPUBuffer, 0, nk * 4)));
    if (bad16) return fail(`dv's f16 copy: ${bad16}`);
    return { ok: Object.values(relErr).every((x) => x <= F16_ATTN_BWD_TOL), relErr };
  } catch (e) {
    return fail((e as Error).message);
  } finally {
    bufs.forEach((x) => rt.mem.free(x));
  }
}

/** Runs every case of f16AttnCheckCases on a spec; the first failure stops it. */
export async function checkF16AttnSpec(rt: Runtime, s: F16AttnSpec, emulate?: boolean): Promise<{ label: string; ok: boolean; failed?: string }> {
  for (const c of f16AttnCheckCases(s)) {
    const r = await checkAttentionF16(rt, s, c, { emulate });
    if (!r.ok) {
      const what = r.error ?? `max error o ${r.maxErrO.toExponential(2)} (tol ${F16_ATTN_TOL.o}), lse ${r.maxErrLse.toExponential(2)} (tol ${F16_ATTN_TOL.lse})`;
      return { label: f16AttnLabel(s), ok: false, failed: `B${c.B} T${c.T} nH${c.nH} nKV${c.nKV}: ${what}` };
    }
  }
  markVerified(rt, 'fwd', s.D, s.sgSize, () => f16AttnPick(s), emulate);
  return { label: f16AttnLabel(s), ok: true };
}

/** The backward's check cases (the forward's: GQA with partial blocks, one head per KV head); the first failure stops it. */
export async function checkF16AttnBwdSpecs(rt: Runtime, s: F16AttnBwdSpecs, emulate?: boolean, inputs?: 'f16' | 'f32'): Promise<{ label: string; ok: boolean; failed?: string }> {
  const bq = Math.max(f16AttnBlockQ(s.dq), f16AttnBlockQ(s.dkdv), s.dq.BKV, s.dkdv.BKV);
  for (const c of [{ B: 1, T: 2 * bq + 5, nH: 4, nKV: 2 }, { B: 2, T: bq, nH: 2, nKV: 2 }]) {
    const r = await checkAttentionBackwardF16(rt, s, c, { emulate, inputs });
    if (!r.ok) {
      const what = r.error ?? `relative error dq ${r.relErr.dq.toExponential(2)}, dk ${r.relErr.dk.toExponential(2)}, dv ${r.relErr.dv.toExponential(2)} (tol ${F16_ATTN_BWD_TOL})`;
      return { label: f16AttnBwdLabel(s), ok: false, failed: `B${c.B} T${c.T} nH${c.nH} nKV${c.nKV}: ${what}` };
    }
  }
  // Verified for the variant the model runs (f16 inputs) only: a check of the staging kernels serves no model call.
  if ((inputs ?? 'f16') === 'f16') markVerified(rt, 'bwd', s.dq.D, s.dq.sgSize, () => f16AttnBwdPick(s), emulate);
  return { label: f16AttnBwdLabel(s), ok: true };
}

export interface F16AttnProbe {
  /** shader-f16, subgroup matrices and an f16 → f32 configuration. */
  present: boolean;
  /** Why nothing was tried (present false). */
  why?: string;
  chosen: Record<number, string>;
  /** Per head dim, the backward's dq and dk/dv specs that passed (absent: the fp32 backward). */
  chosenBackward: Record<number, string>;
  tried: { label: string; ok: boolean; failed?: string }[];
}

/**
 * Verify-before-use: per head dim of F16_ATTENTION_HEAD_DIMS (or `dims`), checks the candidates
 * against the reference and makes attentionForwardF16 use the first that passes every case. A
 * device without shader-f16, subgroup matrices or an f16 → f32 configuration changes nothing.
 */
export async function enableF16Attention(rt: Runtime, dims: number[] = F16_ATTENTION_HEAD_DIMS): Promise<F16AttnProbe> {
  const f = rt.gpu.features;
  const cfgs = f.shaderF16 ? f16ConfigsOf(subgroupMatrixConfigs(rt)) : [];
  const out: F16AttnProbe = { present: cfgs.length > 0, chosen: {}, chosenBackward: {}, tried: [] };
  const chosen = enabledSpecs(rt);
  if (!cfgs.length) {
    out.why = !f.shaderF16 ? 'this device has no shader-f16' : !f.subgroupMatrix ? 'this device has no subgroup matrices' : 'no f16 → f32 subgroup-matrix configuration';
    return out;
  }
  const lim = rt.device.limits;
  // The model's variant: the kernels read f16 q/k/v copies (checkAttentionF16's default), staged or direct per spec.load.
  const valid = (s: F16AttnSpec) => !f16AttnSpecError(s, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, false, true);
  for (const D of dims) {
    if (chosen.has(D)) continue;
    for (const s of f16AttnCandidates(cfgs, D, subgroupSize(rt), valid)) {
      const r = await checkF16AttnSpec(rt, s);
      out.tried.push(r);
      if (r.ok) {
        chosen.set(D, s);
        break;
      }
    }
  }
  for (const [D, s] of chosen) out.chosen[D] = f16AttnLabel(s);
  // The backward, per head dim with a forward: both kernels of a layout checked together.
  const bwd = enabledBwdSpecs(rt);
  const recompute = enabledRecomputeSpecs(rt);
  for (const D of dims) {
    if (bwd.has(D) || !chosen.has(D)) continue;
    const found = await firstPassingBwd(f16AttnBwdCandidates(cfgs, D, subgroupSize(rt), lim), async (specs) => {
      const r = await checkF16AttnBwdSpecs(rt, specs);
      out.tried.push(r);
      return r.ok;
    });
    if (found.first) bwd.set(D, found.first);
    if (found.recompute) recompute.set(D, found.recompute);
  }
  for (const [D, s] of bwd) out.chosenBackward[D] = f16AttnBwdLabel(s);
  out.tried.push(...await verifyTunedF16Attention(rt));
  return out;
}

/**
 * Checks the tuned f16 attention picks this device holds (a cache applied before enableF16Attention,
 * picks from an earlier session) that this runtime has not checked yet, so those that pass serve their
 * calls (`emulate`: the twin's kernels). Returns what was checked and whether it passed.
 */
export async function verifyTunedF16Attention(rt: Runtime, emulate = false): Promise<{ label: string; ok: boolean; failed?: string }[]> {
  const out: { label: string; ok: boolean; failed?: string }[] = [];
  const f = rt.gpu.features;
  if (!emulate && (!f.shaderF16 || !f.subgroupMatrix)) return out;
  const lim = rt.device.limits;
  const done = new Set(verifiedKeys(rt));
  for (const [key, picks] of Object.entries(tunedEntries(rt.device, 'f16attn'))) {
    const m = /^(fwd|bwd)\/D(\d+)\//.exec(key);
    if (!m) continue;
    const pass = m[1] as 'fwd' | 'bwd';
    const D = Number(m[2]);
    for (const pick of picks) {
      const vk = verifiedKey(pass, D, subgroupSize(rt), pick, emulate);
      if (done.has(vk)) continue;
      done.add(vk);
      const bad = { label: `${pass} D${D} ${pick}`, ok: false, failed: 'not a spec this build and device can run' };
      if (pass === 'fwd') {
        const s = f16AttnSpecOfPick(pick, D, subgroupSize(rt));
        if (!s || f16AttnSpecError(s, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, emulate, true)) out.push(bad);
        else out.push(await checkF16AttnSpec(rt, s, emulate));
      } else {
        const s = f16AttnBwdSpecsOfPick(pick, D, subgroupSize(rt));
        const fits = s && (['dq', 'dkdv'] as const).every((k) => !f16AttnBwdSpecError(k, s[k], lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, emulate, true));
        if (!s || !fits) out.push(bad);
        else out.push(await checkF16AttnBwdSpecs(rt, s, emulate));
      }
    }
  }
  return out;
}
