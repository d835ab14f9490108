/**
 * Flash attention in f16 on subgroup matrices (./code.ts, ./code-bwd.ts), and its verification on the
 * device: like enableF16TensorCores (kernels/matmul-f16), enableF16Attention runs each candidate
 * on small cases against the plain-TS reference (../attention.ref.ts on f16-rounded q, k, v) and
 * only a spec that passed serves attentionForwardF16 / attentionBackwardF16. The checks run the
 * variant the model runs, which also writes the next f16 GEMM's operand (o's, dv's f16 copy): each
 * copy must be exactly the f16 rounding of the fp32 output. o and lse are in the fp32 backward's layout.
 * The kernels the model runs (and the checks) read f16 copies of q, k, v (and dO) padded past the
 * last row (F16AttnInputs); the fp32-staging kernels stay for bench/f16-attn-device.ts's comparison.
 */
import type { Binding, Dispatch, Runtime } from '../../../gpu/runtime';
import { wgslErrors } from '../../../gpu/pipelines';
import { f32ArrayToF16, roundF16, roundF16Array } from '../../../quant/f16';
import { Rng } from '../../../util/rng';
import { f16ConfigsOf } from '../../matmul-f16/plan';
import { subgroupMatrixConfigs, subgroupSize } from '../../qgemm/sgmat';
import { noteChoice, tunedEntries, tunedPicks } from '../../../tune/store';
import { attentionDi, attentionParams, dkdvBindings, forwardBindings, requireF16Out, type Shape } from '../attention';
import { type DsChunk, pairChunks } from '../ds';
import { type F16Out, f16OperandBytes } from '../../matmul-f16/cast';
import { asSlice, bindingBytes, requireBytes } from '../../launch';
import { attentionBackwardRef, attentionForwardRef } from '../attention.ref';
import { type F16AttnFwdOptions, f16AttnBlockQ, f16AttnForwardCode, f16AttnInputElems, f16AttnLabel, f16AttnSpecError, type F16AttnSpec } from './code';
import { f16AttnBwdPairError, f16AttnBwdSpecError, f16AttnDkdvCode, f16AttnDqCode, f16AttnDqDsCode, f16AttnDsPairBytes } from './code-bwd';

export { f16AttnInputElems, f16AttnLabel, type F16AttnSpec } from './code';

/**
 * f16 copies of q, k, v the forward reads instead of the fp32 tensors (RoPE writes q's and k's, a cast
 * v's): f16 packed two to a word, or f32 holding f16 values in the twin (elem 'f32', with `emulate`).
 * Each binding covers f16AttnInputElems of its tensor (the last blocks' loads read past T).
 */
export interface F16AttnInputs { q: Binding; k: Binding; v: Binding; elem: 'f16' | 'f32' }

/** The backward's f16 inputs: q's, k's, v's and dO's copies (dO laid out as q), each padded as F16AttnInputs'. */
export interface F16AttnBwdInputs extends F16AttnInputs { dO: Binding }

/** Checks f16 input copies against the kernel variant (packed f16 for the real kernel, f32 for the twin) and their padded sizes. */
function checkInputs(label: string, a: Shape & { emulate?: boolean }, h: F16AttnInputs, extra: [string, Binding, number][] = []): void {
  if ((h.elem === 'f32') !== !!a.emulate) throw new Error(`${label}: f16 q/k/v copies stored as ${h.elem} need ${h.elem === 'f32' ? 'the emulated twin (emulate)' : 'the real kernel (no emulate)'}`);
  const rows = a.B * a.T;
  for (const [name, b, heads] of [['q16', h.q, a.nH], ['k16', h.k, a.nKV], ['v16', h.v, a.nKV], ...extra] as const) {
    requireBytes(label, name, b, f16OperandBytes(f16AttnInputElems(rows, heads * a.D), h.elem === 'f32'));
  }
}

/** Head dims the f16 attention is verified for (the presets' 64, and 32 of the small ones); others keep fp32 attention. */
export const F16_ATTENTION_HEAD_DIMS = [32, 64];

/** Block layouts tried per configuration, first that passes wins (bench/f16-attn-device.ts times them). */
// Staged (vector loads into workgroup memory) first: matrix loads from storage ran the forward at 0.64x
// the staged fp32 kernel on an H100 (0.615 vs 0.402 ms a layer); 'direct' stays as a candidate to time.
export const F16_ATTN_LAYOUTS: Pick<F16AttnSpec, 'sgCount' | 'BKV' | 'PAD' | 'load'>[] = [
  { sgCount: 4, BKV: 64, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 64, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 64, PAD: 8, load: 'direct' }, // the fastest direct one measured (0.536 ms)
  { sgCount: 4, BKV: 64, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'direct' },
  { sgCount: 8, BKV: 32, PAD: 8, load: 'direct' }, // fits 48 KiB at D32 only (46 KB; its S and O scratches make 78 KB at D64)
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
  /** Where the kernel also writes o's f16 copy (o_proj's f16 GEMM's X): the bits castF32ToF16 makes of o. */
  o16?: F16Out;
  /** The f16 copies of q, k, v (the model's path): staged by vector loads, or read by the matrix loads (spec.load 'direct'); q, k, v are then not read. */
  qkv16?: F16AttnInputs;
  /** Bench only: the earlier kernel's row max, every lane scanning the row (F16AttnFwdOptions.rowMax). */
  rowMax?: F16AttnFwdOptions['rowMax'];
}

function checkShape(label: string, s: Shape, spec: F16AttnSpec): void {
  if (s.D !== spec.D) throw new Error(`${label}: f16 attention spec is for head dim ${spec.D}, not ${s.D}`);
  if (s.nH % s.nKV !== 0) throw new Error(`${label}: nH ${s.nH} not a multiple of nKV ${s.nKV}`);
}

/** o = softmax(q·kᵀ/√D + causal mask)·v per (b, h), lse saved: one dispatch, f16 operands, f32 accumulation and statistics. */
export function attentionForwardF16(rt: Runtime, a: AttentionForwardF16Args): Dispatch[] {
  const spec = a.spec ?? f16AttentionSpecFor(rt, a, a.emulate);
  if (!spec) throw new Error(`${a.label}: no verified f16 attention kernel for head dim ${a.D} on this device (enableF16Attention): use the fp32 attention`);
  checkShape(a.label, a, spec);
  const lim = rt.device.limits;
  const h = a.qkv16;
  const err = f16AttnSpecError(spec, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, a.emulate, !!h);
  if (err) throw new Error(`${a.label}: ${f16AttnLabel(spec)}: ${err}`);
  if (h) checkInputs(a.label, a, h);
  return [rt.kernel({
    label: `${a.label}.attnFwdF16${h ? 'D' : ''}${a.o16 ? 'H' : ''}`,
    code: f16AttnForwardCode(spec, { emulate: a.emulate, o16: a.o16?.elem, inputs: h ? 'f16' : 'f32', rowMax: a.rowMax }),
    bindings: forwardBindings(rt, h ? { ...a, q: h.q, k: h.k, v: h.v } : a),
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / f16AttnBlockQ(spec)), a.B * a.nH],
  })];
}

// ---- checking on the device ------------------------------------------------------------------------

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

/** A check's f16 copy of n values: packed f16 words, or f32 in the emulated twin (castF32ToF16's layouts). */
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

// ---- choosing the path on a device -------------------------------------------------------------------

const enabled = new WeakMap<Runtime, Map<number, F16AttnSpec>>();

/** The spec verified for head dim D on this runtime (enableF16Attention), if any. */
export function f16AttentionSpec(rt: Runtime, D: number): F16AttnSpec | undefined {
  return enabled.get(rt)?.get(D);
}

const bwdEnabled = new WeakMap<Runtime, Map<number, F16AttnBwdSpecs>>();
/** Per head dim whose verified backward stores dS: the first verified one that does not, for calls with no dS scratch (TP). */
const bwdRecompute = new WeakMap<Runtime, Map<number, F16AttnBwdSpecs>>();

/** The backward specs verified for head dim D on this runtime (enableF16Attention), if any. */
export function f16AttentionBackwardSpecs(rt: Runtime, D: number): F16AttnBwdSpecs | undefined {
  return bwdEnabled.get(rt)?.get(D);
}

/** The head dims with a verified f16 attention backward on this runtime. */
export function f16AttentionBackwardHeadDims(rt: Runtime): number[] {
  return [...(bwdEnabled.get(rt)?.keys() ?? [])].sort((x, y) => x - y);
}

/** The head dims with a verified f16 attention kernel on this runtime. */
export function f16AttentionHeadDims(rt: Runtime): number[] {
  return [...(enabled.get(rt)?.keys() ?? [])].sort((x, y) => x - y);
}

/** Whether enableF16Attention has run on this runtime (whatever it found). */
export function f16AttentionProbed(rt: Runtime): boolean {
  return enabled.has(rt);
}

/** Turns the path off again (benchmarks time both on one runtime); tuned picks wait for their checks again. */
export function disableF16Attention(rt: Runtime): void {
  enabled.delete(rt);
  bwdEnabled.delete(rt);
  bwdRecompute.delete(rt);
  verified.delete(rt);
}

// ---- tuned picks (tune/f16-attention.ts: family 'f16attn', per pass and shape) ------------------------

/** The tuning key of one f16 attention call: pass, head dim, context, query and KV heads, batch, causal (the kernel's only mask). */
export function f16AttnTuneKey(pass: 'fwd' | 'bwd', s: Shape): string {
  return `${pass}/D${s.D}/T${s.T}/H${s.nH}/KV${s.nKV}/B${s.B}/causal`;
}

/** Fields a pick leaves out: the head dim (in the tuning key), the subgroup size (the device's at use) and cfg (its first part). */
const PICK_OMITS = new Set(['D', 'sgSize', 'cfg']);

/**
 * The layout fields a pick may name: those of the layout lists (a new spec option joins by appearing
 * there); required: the sizes every layout sets (numbers: no default to fall back on).
 */
function pickFields(): { known: Set<string>; required: string[] } {
  const all: Record<string, unknown>[] = [...F16_ATTN_LAYOUTS, ...F16_ATTN_BWD_LAYOUTS.flatMap((l) => Object.values(f16AttnBwdLayoutPair(l)))];
  return { known: new Set(all.flatMap((l) => Object.keys(l))), required: Object.keys(all[0]).filter((k) => all.every((l) => typeof l[k] === 'number')) };
}

/**
 * A spec's name as a tuned pick (the tuning cache's picks are [A-Za-z0-9_/.]): its configuration, then
 * every other field but D and sgSize in name order, `name_value` (whole numbers, words) or `name` (true;
 * false and unset are left out), e.g. '16x16x16.BKV_64.PAD_8.load_direct.sgCount_4'. Generic over the spec's
 * fields, so a new option is named without a change here.
 */
export function f16AttnPick(s: F16AttnSpec): string {
  const parts = [`${s.cfg.M}x${s.cfg.N}x${s.cfg.K}`];
  for (const k of Object.keys(s).filter((x) => !PICK_OMITS.has(x)).sort()) {
    const v = (s as unknown as Record<string, unknown>)[k];
    if (v === undefined || v === false) continue;
    if (v === true) parts.push(k);
    else if ((typeof v === 'number' && Number.isInteger(v) && v >= 0) || (typeof v === 'string' && /^[A-Za-z][A-Za-z0-9]{0,15}$/.test(v))) parts.push(`${k}_${v}`);
    else throw new Error(`f16 attention spec field ${k} = ${JSON.stringify(v)} has no pick spelling (a whole number, a word, or true): extend f16AttnPick`);
  }
  return parts.join('.');
}

/** The spec a pick names (f16AttnPick's inverse) at head dim D and this device's subgroup size; null for a name this build cannot build. */
export function f16AttnSpecOfPick(pick: string, D: number, sgSize: number, pass: 'fwd' | 'dq' | 'dkdv' = 'fwd'): F16AttnSpec | null {
  const [head, ...rest] = pick.split('.');
  const m = /^(\d{1,3})x(\d{1,3})x(\d{1,3})$/.exec(head);
  if (!m) return null;
  const { known, required } = pickFields();
  const o: Record<string, unknown> = { cfg: { M: Number(m[1]), N: Number(m[2]), K: Number(m[3]) }, D, sgSize };
  for (const p of rest) {
    const f = /^([A-Za-z][A-Za-z0-9]{0,31})(?:_([A-Za-z0-9]{1,16}))?$/.exec(p);
    if (!f || !known.has(f[1]) || Object.hasOwn(o, f[1])) return null;
    o[f[1]] = f[2] === undefined ? true : /^\d+$/.test(f[2]) ? Number(f[2]) : f[2];
  }
  if (!required.every((k) => Object.hasOwn(o, k))) return null;
  const s = o as unknown as F16AttnSpec;
  const e = pass === 'fwd' ? f16AttnSpecError(s, Infinity, Infinity, false, true) : f16AttnBwdSpecError(pass, s, Infinity, Infinity, false, true);
  return e || f16AttnPick(s) !== pick ? null : s;
}

/** The backward's pick: one spec's when dq and dk/dv share it, else dq's '/' dk/dv's. */
export const f16AttnBwdPick = (s: F16AttnBwdSpecs) => (f16AttnPick(s.dq) === f16AttnPick(s.dkdv) ? f16AttnPick(s.dq) : `${f16AttnPick(s.dq)}/${f16AttnPick(s.dkdv)}`);

/** f16AttnBwdPick's inverse (null: a name this build cannot build). */
export function f16AttnBwdSpecsOfPick(pick: string, D: number, sgSize: number): F16AttnBwdSpecs | null {
  const parts = pick.split('/');
  if (parts.length > 2) return null;
  const dq = f16AttnSpecOfPick(parts[0], D, sgSize, 'dq');
  const dkdv = f16AttnSpecOfPick(parts[parts.length - 1], D, sgSize, 'dkdv');
  return dq && dkdv && !f16AttnBwdPairError({ dq, dkdv }) && f16AttnBwdPick({ dq, dkdv }) === pick ? { dq, dkdv } : null;
}

/** Picks (fwd: spec, bwd: spec pair) that passed their check on a runtime, the emulated twin's apart: only those serve a call. */
const verified = new WeakMap<Runtime, Set<string>>();
const verifiedKey = (pass: 'fwd' | 'bwd', D: number, sgSize: number, pick: string, emulate?: boolean) => `${emulate ? 'emu ' : ''}${pass} D${D} sg${sgSize} ${pick}`;
function markVerified(rt: Runtime, pass: 'fwd' | 'bwd', D: number, sgSize: number, pick: () => string, emulate?: boolean): void {
  let name: string;
  try {
    name = pick();
  } catch {
    return; // a spec with no pick spelling is never a tuned pick: nothing to remember
  }
  let ok = verified.get(rt);
  if (!ok) verified.set(rt, (ok = new Set()));
  ok.add(verifiedKey(pass, D, sgSize, name, emulate));
}

/** The first tuned pick of this call (store.ts, family 'f16attn') that passed its check on this runtime. */
function tunedAttn<S>(rt: Runtime, pass: 'fwd' | 'bwd', s: Shape, emulate: boolean, parse: (pick: string) => S | null): S | undefined {
  const ok = verified.get(rt);
  for (const pick of tunedPicks(rt.device, 'f16attn', f16AttnTuneKey(pass, s)) ?? []) {
    const spec = parse(pick);
    if (spec && ok?.has(verifiedKey(pass, s.D, subgroupSize(rt), pick, emulate))) return spec;
  }
  return undefined;
}

/**
 * The forward spec a call runs: the pick tuned for its shape on this device once verified on this
 * runtime, else the spec enableF16Attention verified for its head dim (the first passing). The source
 * is noted for the run's tuning status (tune/store.ts, family 'f16attn'; `note` false: the tuner asking,
 * no call made). `emulate`: the twin's checks.
 */
export function f16AttentionSpecFor(rt: Runtime, s: Shape, emulate = false, note = true): F16AttnSpec | undefined {
  const tuned = tunedAttn(rt, 'fwd', s, emulate, (p) => f16AttnSpecOfPick(p, s.D, subgroupSize(rt)));
  const spec = tuned ?? f16AttentionSpec(rt, s.D);
  if (spec && note) noteChoice(rt.device, 'f16attn', f16AttnTuneKey('fwd', s), tuned ? 'tuned' : 'heuristic');
  return spec;
}

/**
 * The backward's specs for a call: its tuned pair once verified on this runtime, else the head dim's first
 * passing pair (f16AttentionSpecFor). `canStore` false (no dS scratch that holds a pair: TP): stored-dS
 * picks are passed over, and a stored-dS first pair gives way to the first verified one that recomputes.
 */
export function f16AttentionBackwardSpecsFor(rt: Runtime, s: Shape, emulate = false, note = true, canStore = true): F16AttnBwdSpecs | undefined {
  const tuned = tunedAttn(rt, 'bwd', s, emulate, (p) => {
    const specs = f16AttnBwdSpecsOfPick(p, s.D, subgroupSize(rt));
    return specs && (canStore || !specs.dq.ds) ? specs : null;
  });
  const first = f16AttentionBackwardSpecs(rt, s.D);
  const specs = tuned ?? (first?.dq.ds && !canStore ? bwdRecompute.get(rt)?.get(s.D) : first);
  if (specs && note) noteChoice(rt.device, 'f16attn', f16AttnTuneKey('bwd', s), tuned ? 'tuned' : 'heuristic');
  return specs;
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
  const done = new Set(verified.get(rt) ?? []);
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
  markVerified(rt, 'fwd', s.D, s.sgSize, () => f16AttnPick(s), emulate);
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
  const out: F16AttnProbe = { present: cfgs.length > 0, chosen: {}, chosenBackward: {}, tried: [] };
  const chosen = enabled.get(rt) ?? new Map<number, F16AttnSpec>();
  enabled.set(rt, chosen);
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
  const bwd = bwdEnabled.get(rt) ?? new Map<number, F16AttnBwdSpecs>();
  bwdEnabled.set(rt, bwd);
  const recompute = bwdRecompute.get(rt) ?? new Map<number, F16AttnBwdSpecs>();
  bwdRecompute.set(rt, recompute);
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
 * The first backward candidate that passes `check` (in order, checking no more than needed), and the
 * first passing one that recomputes dq (no dS scratch: TP): the same one unless the first stores dS.
 */
export async function firstPassingBwd(candidates: F16AttnBwdSpecs[], check: (s: F16AttnBwdSpecs) => Promise<boolean>): Promise<{ first?: F16AttnBwdSpecs; recompute?: F16AttnBwdSpecs }> {
  let first: F16AttnBwdSpecs | undefined;
  for (const c of candidates) {
    if (first && c.dq.ds) continue;
    if (!(await check(c))) continue;
    first ??= c;
    if (!c.dq.ds) return { first, recompute: c };
  }
  return { first };
}

export const f16AttnBwdLabel = (s: F16AttnBwdSpecs) => `backward dq ${f16AttnLabel(s.dq)}; dkdv ${f16AttnLabel(s.dkdv)}`;

/** Backward candidates for head dim D: per configuration each layout (or pair of layouts) both kernels fit (`direct`: reading f16 copies, the model's variant), in the list's order. */
export function f16AttnBwdCandidates(cfgs: F16AttnSpec['cfg'][], D: number, sgSize: number, lim: { maxComputeWorkgroupStorageSize: number; maxComputeInvocationsPerWorkgroup: number },
  layouts = F16_ATTN_BWD_LAYOUTS, emulate = false, direct = true): F16AttnBwdSpecs[] {
  const fits = (p: F16AttnBwdSpecs) => !f16AttnBwdPairError(p)
    && (['dq', 'dkdv'] as const).every((k) => !f16AttnBwdSpecError(k, p[k], lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, emulate, direct));
  return cfgs.flatMap((cfg) => layouts.map((l) => {
    const { dq, dkdv } = f16AttnBwdLayoutPair(l);
    const spec = (x: F16AttnLayout): F16AttnSpec => ({ cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, D, sgSize, ...x });
    return { dq: spec(dq), dkdv: spec(dkdv) };
  })).filter(fits);
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

// ---- backward ----------------------------------------------------------------------------------------

/** The backward's two kernels' specs (./code-bwd.ts): dq (own rows queries, BKV keys a step) and dk/dv (own rows keys, BKV queries a step). */
export interface F16AttnBwdSpecs { dq: F16AttnSpec; dkdv: F16AttnSpec }

/** A spec's layout fields (a layout list's entry). */
export type F16AttnLayout = Pick<F16AttnSpec, 'sgCount' | 'BKV' | 'PAD' | 'load' | 'ds' | 'split' | 'prefetch' | 'wide' | 'contig'>;

/** A backward layout: one both kernels share, or the dq and dk/dv kernels' apart. */
export type F16AttnBwdLayout = F16AttnLayout | { dq: F16AttnLayout; dkdv: F16AttnLayout };

export const f16AttnBwdLayoutPair = (l: F16AttnBwdLayout): { dq: F16AttnLayout; dkdv: F16AttnLayout } => ('dq' in l ? l : { dq: l, dkdv: l });

/**
 * Backward layouts tried per configuration, first that passes wins (enableF16Attention; the tuner times them all).
 * First the fastest measured on the H100 (s28c4, base, a layer with Di): stored dS, dq BQ64/BKV64 and split dk/dv
 * BQ32/BKV32, 0.591 ms against 0.705 for the recomputing BQ32/BKV16 pair (a run without a dS scratch takes the next).
 * Then staged, the faster measured first (H100, dq + dk/dv a layer, staged: BQ32/BKV16 0.745 ms,
 * BQ64/BKV16 0.819, BQ32/BKV32 0.952, BQ64/BKV32 1.176); then the same reading the copies directly.
 * Then pairs of dq and dk/dv layouts (bench/f16-attn-device.ts 'backward candidates'; s28c4 timed those
 * without prefetch, contig or wide: 0.601-0.765 ms), likeliest fastest first:
 * - stored dS (spec.ds): dk/dv as the fastest recompute layout (BQ32/BKV16) plus 16-byte dS stores, and
 *   dq a GEMM over the stored dS, which can take bigger blocks than the recomputing dq (no S/dP scratch);
 * - split dk/dv (spec.split): paired subgroups share 2·M keys, one computing Sᵀ and dv, the other dPᵀ
 *   and dk, so each right tile loaded serves two products (matrix loads a block: 10 instead of 18 per
 *   subgroup at BKV16, D64);
 * - prefetched dk/dv (spec.prefetch): the next query block's Q and dO rows are loaded into registers
 *   while this block's products run (its global-load latency hidden inside the workgroup) and staged
 *   into the other half of a double buffer, so a block needs 3 barriers instead of 4;
 * - wide dq from dS (spec.wide): 2·M query rows a subgroup, each K tile loaded serving two products;
 * - contiguous softmax columns in dk/dv (spec.contig): a lane's 8 (BKV16) columns adjacent, so its Ss
 *   loads and Pᵀ/dSᵀ stores may merge into 16-byte ones (times whether the compiler does).
 */
export const F16_ATTN_BWD_LAYOUTS: F16AttnBwdLayout[] = [
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, ds: true } },
  { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 16, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'staged' },
  { sgCount: 2, BKV: 16, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 16, PAD: 8, load: 'direct' },
  { sgCount: 2, BKV: 32, PAD: 8, load: 'direct' },
  { sgCount: 4, BKV: 32, PAD: 8, load: 'direct' },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, contig: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', contig: true, ds: true } },
  { dq: { sgCount: 4, BKV: 32, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 2, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', split: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'direct', ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, ds: true }, dkdv: { sgCount: 4, BKV: 32, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 2, BKV: 64, PAD: 8, wide: true, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 4, BKV: 64, PAD: 8, wide: true, ds: true }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true, ds: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true, prefetch: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged', split: true } },
  { dq: { sgCount: 2, BKV: 16, PAD: 8, load: 'staged' }, dkdv: { sgCount: 2, BKV: 32, PAD: 8, load: 'staged', split: true } },
];

export interface AttentionBackwardF16Args extends Shape {
  label: string;
  /** fp32 q, k, v, o, lse, dO as the fp32 backward takes them; dq, dk, dv fp32, overwritten. */
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  dO: Binding;
  dq: Binding;
  dk: Binding;
  dv: Binding;
  /** Di ([B, nH, T] fp32, attentionBackwardWorkspaceBytes): written by the dq kernel, read by dk/dv. */
  workspace: Binding;
  specs?: F16AttnBwdSpecs;
  emulate?: boolean;
  /** Where the dk/dv kernel also writes dv's f16 copy (v_proj's f16 dX and dW GEMMs read it). */
  dv16?: F16Out;
  /** f16 copies of q, k, v, dO (staged, or read by the matrix loads per spec.load); the fp32 q, k, v, dO are then not read (Di = rowsum(dO∘o) takes dO's copy; with stored dS the fp32 dO). */
  qkv16?: F16AttnBwdInputs;
  /**
   * Scratch dead during this backward, of any size (the model's dF1, as the fp32 stored-dS path's):
   * stored-dS specs (spec.ds) keep dS there, a chunk of (b, KV head) pairs at a time (f16AttnDsChunks).
   */
  dsScratch?: Binding;
}

/** The stored-dS backward's chunks of (b, KV head) pairs for a scratch of `bytes` ([] when one pair's dS does not fit). */
export function f16AttnDsChunks(s: Shape, bytes: number, emulate = false): DsChunk[] {
  return pairChunks(s.B * s.nKV, Math.floor(bytes / f16AttnDsPairBytes(s.T, s.nH / s.nKV, emulate)));
}

/**
 * dq, dk, dv from q, k, v, o, lse, dO with f16 operands on subgroup matrices: the dq kernel (writes Di),
 * then the dk/dv kernel; or with stored-dS specs (spec.ds) the Di pass, then per chunk of (b, KV head)
 * pairs the dk/dv kernel storing dS into dsScratch and dq from it.
 */
export function attentionBackwardF16(rt: Runtime, a: AttentionBackwardF16Args): Dispatch[] {
  const specs = a.specs ?? f16AttentionBackwardSpecsFor(rt, a, a.emulate, true, !!a.dsScratch && f16AttnDsChunks(a, bindingBytes(a.dsScratch), a.emulate).length > 0);
  if (!specs) throw new Error(`${a.label}: no verified f16 attention backward for head dim ${a.D} on this device (enableF16Attention): use the fp32 backward`);
  const lim = rt.device.limits;
  const h = a.qkv16;
  if (h) checkInputs(a.label, a, h, [['dO16', h.dO, a.nH]]);
  const inputs = h ? 'f16' : 'f32';
  for (const kind of ['dq', 'dkdv'] as const) {
    checkShape(a.label, a, specs[kind]);
    const err = f16AttnBwdSpecError(kind, specs[kind], lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, a.emulate, !!h);
    if (err) throw new Error(`${a.label}: f16 attention ${kind} ${f16AttnLabel(specs[kind])}: ${err}`);
  }
  const pairErr = f16AttnBwdPairError(specs);
  if (pairErr) throw new Error(`${a.label}: ${f16AttnBwdLabel(specs)}: ${pairErr}`);
  const u = attentionParams(rt, a.label, a);
  const empty = a.T === 0 || a.B === 0;
  if (a.dv16) requireF16Out(a.label, 'dv16', a.dv16, a.B * a.T * a.nKV * a.D);
  if (specs.dq.ds) {
    // Stored dS (f16AttnDqDsCode): Di first, then per chunk of pairs dk/dv storing dS and dq from it.
    const G = a.nH / a.nKV;
    const pairBytes = f16AttnDsPairBytes(a.T, G, !!a.emulate);
    const chunks = a.dsScratch ? f16AttnDsChunks(a, bindingBytes(a.dsScratch), a.emulate) : [];
    if (!chunks.length) {
      throw new Error(`${a.label}: ${f16AttnBwdLabel(specs)} stores dS and needs a dsScratch of at least one (b, KV head) pair's ${pairBytes} bytes (${a.dsScratch ? `${bindingBytes(a.dsScratch)} given` : 'none given'}): use a recomputing spec`);
    }
    const scratch = asSlice(a.dsScratch!);
    return [attentionDi(rt, a, a.workspace, u), ...chunks.flatMap((c, i) => {
      const lab = chunks.length > 1 ? `${a.label}.c${i}` : a.label;
      const uc = attentionParams(rt, lab, a, c.pair0);
      const dS: Binding = { buffer: scratch.buffer, offset: scratch.offset ?? 0, size: c.pairs * pairBytes };
      return [
        rt.kernel({
          label: `${lab}.attnBwdDkDvDsF16${h ? 'D' : ''}${a.dv16 ? 'H' : ''}`,
          code: f16AttnDkdvCode(specs.dkdv, { emulate: a.emulate, dv16: a.dv16?.elem, inputs }),
          bindings: [...dkdvBindings(h ? { ...a, q: h.q, k: h.k, v: h.v, dO: h.dO } : a, a.workspace, uc), dS],
          workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dkdv)), c.pairs],
        }),
        rt.kernel({
          label: `${lab}.attnBwdDqDsF16`,
          code: f16AttnDqDsCode(specs.dq, { emulate: a.emulate }),
          bindings: [dS, h!.k, uc, a.dq],
          workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dq)), c.pairs * G],
        }),
      ];
    })];
  }
  return [
    rt.kernel({
      label: `${a.label}.attnBwdDqF16${h ? 'D' : ''}`,
      code: f16AttnDqCode(specs.dq, { emulate: a.emulate, inputs }),
      bindings: h ? [h.q, h.k, h.v, a.o, h.dO, a.lse, a.workspace, a.dq, u] : [a.q, a.k, a.v, a.o, a.dO, a.lse, a.workspace, a.dq, u],
      workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dq)), a.B * a.nH],
    }),
    rt.kernel({
      label: `${a.label}.attnBwdDkDvF16${h ? 'D' : ''}${a.dv16 ? 'H' : ''}`,
      code: f16AttnDkdvCode(specs.dkdv, { emulate: a.emulate, dv16: a.dv16?.elem, inputs }),
      bindings: dkdvBindings(h ? { ...a, q: h.q, k: h.k, v: h.v, dO: h.dO } : a, a.workspace, u),
      workgroups: [empty ? 0 : Math.ceil(a.T / f16AttnBlockQ(specs.dkdv)), a.B * a.nKV],
    }),
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
