/**
 * Flash attention's forward in f16 on subgroup matrices (./code.ts), and its verification on the
 * device: like enableF16TensorCores (kernels/matmul-f16), enableF16Attention runs each candidate
 * on small cases against the plain-TS reference (../attention.ref.ts on f16-rounded q, k, v) and
 * only a spec that passed serves attentionForwardF16. The backward stays the fp32 one: o and lse are
 * written in its layout.
 */
import type { Binding, Dispatch, Runtime } from '../../../gpu/runtime';
import { wgslErrors } from '../../../gpu/pipelines';
import { roundF16Array } from '../../../quant/f16';
import { Rng } from '../../../util/rng';
import { f16ConfigsOf } from '../../matmul-f16/plan';
import { subgroupMatrixConfigs, subgroupSize } from '../../qgemm/sgmat';
import { attentionParams, type Shape } from '../attention';
import { attentionForwardRef } from '../attention.ref';
import { f16AttnBlockQ, f16AttnForwardCode, f16AttnLabel, f16AttnSpecError, type F16AttnSpec } from './code';

export { f16AttnLabel, type F16AttnSpec } from './code';

/** Head dims the f16 attention is verified for (the presets' 64, and 32 of the small ones); others keep fp32 attention. */
export const F16_ATTENTION_HEAD_DIMS = [32, 64];

/** Block layouts tried per configuration, first that passes wins (bench/f16-attn-device.ts times them). */
export const F16_ATTN_LAYOUTS: Pick<F16AttnSpec, 'sgCount' | 'BKV' | 'PAD'>[] = [
  { sgCount: 4, BKV: 64, PAD: 8 },
  { sgCount: 4, BKV: 32, PAD: 8 },
  { sgCount: 2, BKV: 64, PAD: 8 },
  { sgCount: 8, BKV: 32, PAD: 8 },
];

export interface AttentionForwardF16Args extends Shape {
  label: string;
  /** fp32 q, k, v (cast to f16 as they are staged), o and lse fp32 in the fp32 attention's layouts. */
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  /** Force a spec (tests, benchmarks); default: the one enableF16Attention verified for D. */
  spec?: F16AttnSpec;
  /** The kernel with emulated subgroup matrices over f32 (runs without f16 and subgroup matrices: CI). */
  emulate?: boolean;
}

function checkShape(label: string, s: Shape, spec: F16AttnSpec): void {
  if (s.D !== spec.D) throw new Error(`${label}: f16 attention spec is for head dim ${spec.D}, not ${s.D}`);
  if (s.nH % s.nKV !== 0) throw new Error(`${label}: nH ${s.nH} not a multiple of nKV ${s.nKV}`);
}

/** o = softmax(q·kᵀ/√D + causal mask)·v per (b, h), lse saved: one dispatch, f16 operands, f32 accumulation and statistics. */
export function attentionForwardF16(rt: Runtime, a: AttentionForwardF16Args): Dispatch[] {
  const spec = a.spec ?? f16AttentionSpec(rt, a.D);
  if (!spec) throw new Error(`${a.label}: no verified f16 attention kernel for head dim ${a.D} on this device (enableF16Attention): use the fp32 attention`);
  checkShape(a.label, a, spec);
  const lim = rt.device.limits;
  const err = f16AttnSpecError(spec, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, a.emulate);
  if (err) throw new Error(`${a.label}: ${f16AttnLabel(spec)}: ${err}`);
  const u = attentionParams(rt, a.label, a);
  return [rt.kernel({
    label: `${a.label}.attnFwdF16`,
    code: f16AttnForwardCode(spec, { emulate: a.emulate }),
    bindings: [a.q, a.k, a.v, a.o, a.lse, u],
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / f16AttnBlockQ(spec)), a.B * a.nH],
  })];
}

// ---- checking on the device ------------------------------------------------------------------------

export interface F16AttnCase { B: number; T: number; nH: number; nKV: number }

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
export async function checkAttentionF16(rt: Runtime, spec: F16AttnSpec, c: F16AttnCase, o: { emulate?: boolean; seed?: number; heads?: number } = {}): Promise<F16AttnCheck> {
  const { B, T, nH, nKV } = c;
  const D = spec.D;
  const rng = new Rng(o.seed ?? T * 31 + nH * 7 + nKV);
  const q = rng.uniformArray(B * T * nH * D).map((x) => 3 * x);
  const k = rng.uniformArray(B * T * nKV * D);
  const v = rng.uniformArray(B * T * nKV * D);
  const bufs: GPUBuffer[] = [];
  const fail = (error: string): F16AttnCheck => ({ ok: false, maxErrO: NaN, maxErrLse: NaN, error });
  try {
    const code = f16AttnForwardCode(spec, { emulate: o.emulate });
    // A spec this device rejects is expected while probing: keep its error out of the console.
    const errors = await wgslErrors(rt.device, 'f16attn.check', code, true);
    if (errors.length) return fail(errors.join('; '));
    const up = (x: Float32Array) => {
      const b = rt.upload('workspace', 'f16attn.check.in', x);
      bufs.push(b);
      return b;
    };
    const qb = up(q);
    const kb = up(k);
    const vb = up(v);
    const ob = up(new Float32Array(B * T * nH * D).fill(NaN));
    const lb = up(new Float32Array(B * nH * T).fill(NaN));
    const ds = await rt.checked('f16attn.check', () => attentionForwardF16(rt, { label: 'f16attn.check', B, T, nH, nKV, D, q: qb, k: kb, v: vb, o: ob, lse: lb, spec, emulate: o.emulate }));
    rt.device.pushErrorScope('validation');
    rt.run(ds);
    const err = await rt.device.popErrorScope();
    if (err) return fail(err.message);
    const got = new Float32Array(await rt.read(ob, 0, B * T * nH * D * 4));
    const gotL = new Float32Array(await rt.read(lb, 0, B * nH * T * 4));
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

/** The reference on the first hs query heads (G per KV head as in the full problem), as attentionForwardRef lays it out for hs heads. */
function refSubset(q: Float32Array, k: Float32Array, v: Float32Array, B: number, T: number, hs: number, kvs: number, G: number, D: number) {
  // attentionForwardRef maps head h to KV head floor(h / (hs / kvs)); equal to floor(h / G) when hs is a multiple of G.
  if (hs % G !== 0) throw new Error(`f16 attention check: compared heads ${hs} must be a multiple of G=${G}`);
  return attentionForwardRef(q, k, v, B, T, hs, kvs, D);
}

/** The cases a spec must pass: GQA with a partial last query block and key block, and a whole block with one head per KV head. */
export function f16AttnCheckCases(s: F16AttnSpec): F16AttnCase[] {
  const BQ = f16AttnBlockQ(s);
  return [
    { B: 1, T: 2 * Math.max(BQ, s.BKV) + 5, nH: 4, nKV: 2 },
    { B: 2, T: BQ, nH: 2, nKV: 2 },
  ];
}

// ---- choosing the path on a device -------------------------------------------------------------------

const enabled = new WeakMap<Runtime, Map<number, F16AttnSpec>>();

/** The spec verified for head dim D on this runtime (enableF16Attention), if any. */
export function f16AttentionSpec(rt: Runtime, D: number): F16AttnSpec | undefined {
  return enabled.get(rt)?.get(D);
}

/** The head dims with a verified f16 attention kernel on this runtime. */
export function f16AttentionHeadDims(rt: Runtime): number[] {
  return [...(enabled.get(rt)?.keys() ?? [])].sort((x, y) => x - y);
}

/** Whether enableF16Attention has run on this runtime (whatever it found). */
export function f16AttentionProbed(rt: Runtime): boolean {
  return enabled.has(rt);
}

/** Turns the path off again (benchmarks time both on one runtime). */
export function disableF16Attention(rt: Runtime): void {
  enabled.delete(rt);
}

export interface F16AttnProbe {
  /** shader-f16, subgroup matrices and an f16 → f32 configuration. */
  present: boolean;
  /** Why nothing was tried (present false). */
  why?: string;
  chosen: Record<number, string>;
  tried: { label: string; ok: boolean; failed?: string }[];
}

/** Candidate specs for head dim D: each f16 → f32 configuration (largest tile first) with each layout that fits. */
export function f16AttnCandidates(cfgs: F16AttnSpec['cfg'][], D: number, sgSize: number, valid: (s: F16AttnSpec) => boolean, layouts = F16_ATTN_LAYOUTS): F16AttnSpec[] {
  return cfgs.flatMap((cfg) => layouts.map((l): F16AttnSpec => ({ cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, D, sgSize, ...l }))).filter(valid);
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
  return { label: f16AttnLabel(s), ok: true };
}

/**
 * Verify-before-use: per head dim of F16_ATTENTION_HEAD_DIMS (or `dims`), checks the candidates
 * against the reference and makes attentionForwardF16 use the first that passes every case. A
 * device without shader-f16, subgroup matrices or an f16 → f32 configuration changes nothing.
 */
export async function enableF16Attention(rt: Runtime, dims: number[] = F16_ATTENTION_HEAD_DIMS): Promise<F16AttnProbe> {
  const f = rt.gpu.features;
  const cfgs = f.shaderF16 ? f16ConfigsOf(subgroupMatrixConfigs(rt)) : [];
  const out: F16AttnProbe = { present: cfgs.length > 0, chosen: {}, tried: [] };
  const chosen = enabled.get(rt) ?? new Map<number, F16AttnSpec>();
  enabled.set(rt, chosen);
  if (!cfgs.length) {
    out.why = !f.shaderF16 ? 'this device has no shader-f16' : !f.subgroupMatrix ? 'this device has no subgroup matrices' : 'no f16 → f32 subgroup-matrix configuration';
    return out;
  }
  const lim = rt.device.limits;
  const valid = (s: F16AttnSpec) => !f16AttnSpecError(s, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup);
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
  return out;
}
