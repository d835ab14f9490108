/**
 * Attention scores S = Q·Kᵀ in INT8, as SageAttention computes them: Q and K quantized per (token,
 * head) row after RoPE (quantizeHeadsI8), the products summed exactly in integers with dot4I8Packed
 * and scaled f32(acc)·(sq·c2)·sk; softmax, P·V and the backward's gradient products stay fp32 (the
 * blocked fp32 kernels' I8 blocks: attention-fwd-blocked.wgsl, attention-bwd-blocked-stream.wgsl).
 * The reference: attention.ref.ts on the dequantized Q and K. Tensor cores are not used here: a
 * subgroup-matrix variant (the integer tile through workgroup memory) ran slower on the H200 than
 * dot4 in these kernels (docs/benchmarks.md).
 */
import fwdBody from './fwd-blocked.wgsl?raw';
import fwdIo from './fwd-blocked-io.wgsl?raw';
import dkdvCodes from './bwd-i8-codes.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { headCodesSlices } from './head-codes';
import {
  attentionBackward, type AttentionBackwardArgs, attentionParams, type AttnTile, attnTileOf, ATTENTION_CANDIDATES,
  blockedForwardThreadsPerRowGroup, blockedSplitProblem, chooseAttentionTile, MEASURED_ATTENTION_TILES, measuredAttentionTile, type Shape, streamDkdvDsSource,
} from './attention';
import { attnTileNamed } from './tables';
import { adapterMatches } from '../../gpu/device';
import { noteChoice, tunedPicks } from '../../tune/store';
import { quantizeInto } from '../quantize/quantize';
import { unrollLoops, wgslIf, wgslSection } from '../wgsl';

/** The kernel attention's INT8 scores run on. */
export const ATTN_SCORE_PATH = 'int8-dot4';

export { headCodesLayout, headCodesSlices } from './head-codes';

/** INT8 codes and scales of every D-long (token, head) row of x [rows·D] into the head-codes buffer `buf`. */
export function quantizeHeadsI8(rt: Runtime, label: string, x: Binding, rows: number, D: number, buf: GPUBuffer): Dispatch[] {
  if (D % 4) throw new Error(`${label}: INT8 attention packs 4 values per word; head dim ${D} is not a multiple of 4`);
  const s = headCodesSlices(buf, rows, D);
  return quantizeInto(rt, { format: 'int8', granularity: { kind: 'row', rowLength: D }, n: rows * D }, x, s.codes, s.scales).dispatches;
}

// Word stride of the staged code rows: odd, so that neighbouring rows fall on different banks.
const codeStride = (D: number) => (D / 4) | 1;

/** Workgroup bytes of the INT8-score forward (mirrors attention-fwd-blocked.wgsl's I8 arrays). */
export function attentionI8FwdBytes(t: AttnTile, D: number): number {
  const dp = Math.ceil(D / 4);
  const pstr = (t.BM / 4) | 1;
  return (t.BM + t.BN) * codeStride(D) * 4 + (t.BN * dp + t.BN * pstr + blockedForwardThreadsPerRowGroup(t) * pstr) * 16;
}

/**
 * What both INT8-score kernels need of a tile: packed rows, the device's limits, the fp32 kernel's
 * thread split, at most 4 code words per thread for the tile staged each step (`staged` rows), `bytes`.
 */
function i8TileProblem(rt: Runtime, pass: 'fwd' | 'dkdv', t: AttnTile, D: number, staged: { rows: number; what: string }, bytes: number): string | null {
  if (D % 4) return `head dim ${D} is not a multiple of 4`;
  const lim = rt.device.limits;
  if (t.NT > lim.maxComputeInvocationsPerWorkgroup || t.NT > lim.maxComputeWorkgroupSizeX) return 'too many threads';
  const split = blockedSplitProblem(pass, t, D);
  if (split) return split;
  if (staged.rows * (D / 4) > 4 * t.NT) return `a ${staged.rows}-${staged.what} tile's codes are more than 4 words per thread`;
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

// Each INT8 kernel's key in MEASURED_ATTENTION_TILES.
const MEASURED_KEY = { fwd: 'fwdI8', dkdv: 'dkdvI8', dkdvDp8: 'dkdvDp8' } as const;

/** The measured tile of an INT8-score kernel, else the fp32 pass's where the kernel can run it, else the first candidate that fits. */
function chooseI8Tile(rt: Runtime, kernel: keyof typeof MEASURED_KEY, D: number, problem: (t: AttnTile) => string | null): AttnTile {
  const pass = kernel === 'fwd' ? 'fwd' : 'dkdv';
  // Tuned on this device first (engine/tune, keyed as the shipped tables are), and the source noted.
  const key = `${MEASURED_KEY[kernel]}/D${D}`;
  const tuned = (tunedPicks(rt.device, 'attention', key) ?? []).map((n) => attnTileNamed(pass, n)).find((c) => c && !problem(c));
  if (tuned) {
    noteChoice(rt.device, 'attention', key, 'tuned');
    return tuned;
  }
  const measured = measuredAttentionTile(rt, MEASURED_KEY[kernel], D);
  const tiles = [...(measured ? [measured] : []), chooseAttentionTile(rt, pass, D), ...ATTENTION_CANDIDATES[pass].map(attnTileOf)];
  const t = tiles.find((c) => !problem(c));
  if (!t) throw new Error(`attention with INT8 scores: no ${pass === 'fwd' ? 'forward' : 'dK/dV'} tile fits head dim ${D} on this device`);
  noteChoice(rt.device, 'attention', key, t === measured ? (adapterMatchesMeasured(rt, MEASURED_KEY[kernel], D) ? 'table' : 'seed') : 'heuristic');
  return t;
}

/** Whether a measured tile of this kernel comes from a table of this GPU model (not a seed of its architecture). */
function adapterMatchesMeasured(rt: Runtime, kernel: string, D: number): boolean {
  return MEASURED_ATTENTION_TILES.some((t) => adapterMatches(rt.gpu, t.match) && t.table[`${kernel}/D${D}`] !== undefined);
}

/** Why the INT8-score forward cannot run a tile (null when it can). */
export function attentionI8FwdTileProblem(rt: Runtime, t: AttnTile, D: number): string | null {
  if (!t.blocked || t.chunk) return 'the INT8-score forward is the register-blocked kernel';
  return i8TileProblem(rt, 'fwd', t, D, { rows: t.BN, what: 'key' }, attentionI8FwdBytes(t, D));
}

export function chooseAttentionI8Tile(rt: Runtime, D: number): AttnTile {
  return chooseI8Tile(rt, 'fwd', D, (t) => attentionI8FwdTileProblem(rt, t, D));
}

// The blocked kernels' INT8-score variant (attention.ts F32_SCORES is the fp32 one), and with INT8 dP.
const I8_SCORES = { F32: false, I8: true, DP8: false };
const I8_SCORES_DP = { F32: false, I8: true, DP8: true };
const codeCache = new Map<string, string>();

/** The INT8-score forward's WGSL for a tile, its loops written out as the fp32 forward's are. */
export function attentionForwardI8Code(D: number, t: AttnTile): string {
  const key = `fwd:${D}:${JSON.stringify(t)}`;
  let code = codeCache.get(key);
  if (!code) {
    code = unrollLoops(`${wgslSection(fwdIo, 'i8')}\n${wgslIf(fwdBody, I8_SCORES)}`, { DP: D / 4, DW: D / 4, TX: blockedForwardThreadsPerRowGroup(t), BK: t.BN });
    codeCache.set(key, code);
  }
  return code;
}

export interface AttentionForwardI8Args extends Shape {
  label: string;
  /** Q's and K's INT8 codes and scales per (token, head) row, head-codes buffers (quantizeHeadsI8). */
  qc: GPUBuffer; kc: GPUBuffer;
  v: Binding; o: Binding; lse: Binding;
  tile?: AttnTile;
}

/** o = softmax(S + causal mask)·v with S from the INT8 codes; lse saved for the backward. One dispatch. */
export function attentionForwardI8(rt: Runtime, a: AttentionForwardI8Args): Dispatch[] {
  const t = a.tile ?? chooseAttentionI8Tile(rt, a.D);
  const problem = attentionI8FwdTileProblem(rt, t, a.D);
  if (problem) throw new Error(`${a.label}: INT8-score attention tile ${JSON.stringify(t)}: ${problem}`);
  const u = attentionParams(rt, a.label, a);
  const dw = a.D / 4;
  const q = headCodesSlices(a.qc, a.B * a.T * a.nH, a.D);
  const k = headCodesSlices(a.kc, a.B * a.T * a.nKV, a.D);
  return [rt.kernel({
    label: `${a.label}.attnFwdI8`,
    code: attentionForwardI8Code(a.D, t),
    entryPoint: 'attn_fwd_blocked',
    constants: { D: a.D, BQ: t.BM, BK: t.BN, NT: t.NT, CSTR: codeStride(a.D), DW: dw },
    bindings: [q.codes, k.codes, a.v, a.o, a.lse, u, q.scales, k.scales],
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / t.BM), a.B * a.nH],
  })];
}

/**
 * Workgroup bytes of the INT8-score dK/dV kernel (mirrors its I8 stage, PT, KcO and QcT, and with
 * INT8 dP VcO and OcT): chunks of V and dO only, or the full rows of one other operand; the codes.
 */
export function attentionI8DkdvBytes(t: AttnTile, D: number, int8Dp = false): number {
  const dp = Math.ceil(D / 4);
  const stage = Math.max((t.BN + t.BM) * ((t.chunk ?? 1) | 1), t.BM * (dp | 1));
  const pt = t.BM * ((t.BN / 4) | 1);
  return (stage + pt) * 16 + (int8Dp ? 2 : 1) * (t.BN + t.BM) * codeStride(D) * 4;
}

/** Why the INT8-score dK/dV kernel (streamed, dS stored) cannot run a tile (null when it can). */
export function attentionI8DkdvTileProblem(rt: Runtime, t: AttnTile, D: number, int8Dp = false): string | null {
  if (!t.blocked || !t.chunk) return 'the INT8-score dK/dV pass is the streamed kernel';
  if (t.keep) return 'the INT8-score dK/dV pass stages no Q chunks to keep';
  return i8TileProblem(rt, 'dkdv', t, D, { rows: t.BM, what: 'query' }, attentionI8DkdvBytes(t, D, int8Dp));
}

export function chooseAttentionI8DkdvTile(rt: Runtime, D: number, int8Dp = false): AttnTile {
  return chooseI8Tile(rt, int8Dp ? 'dkdvDp8' : 'dkdv', D, (t) => attentionI8DkdvTileProblem(rt, t, D, int8Dp));
}

/** The INT8-score dK/dV kernel's WGSL (with INT8 dP or not), its code loops written out (attention.ts says why the fp32 backward's are not). */
export function attentionDkdvI8Code(D: number, int8Dp = false): string {
  const key = `dkdv:${D}:${int8Dp}`;
  let code = codeCache.get(key);
  if (!code) {
    code = unrollLoops(streamDkdvDsSource(int8Dp ? I8_SCORES_DP : I8_SCORES, dkdvCodes, int8Dp ? 'bf16' : 'f32'), { DW: D / 4 });
    codeCache.set(key, code);
  }
  return code;
}

export interface AttentionBackwardI8Args extends Omit<AttentionBackwardArgs, 'scores' | 'tiles'> {
  /** Q's and K's INT8 codes and scales per (token, head) row as the forward had them: head-codes buffers (quantizeHeadsI8). */
  qc: GPUBuffer; kc: GPUBuffer;
  /** INT8 dP = dO·Vᵀ too: V's and dO's head-codes buffers. */
  dp?: { vc: GPUBuffer; oc: GPUBuffer };
  tile?: AttnTile;
}

/** attentionBackward with the forward's INT8 scores: the stored-dS path, its dK/dV pass rebuilding S from the codes (and dP from theirs). */
export function attentionBackwardI8(rt: Runtime, a: AttentionBackwardI8Args): Dispatch[] {
  const int8Dp = !!a.dp;
  const t = a.tile ?? chooseAttentionI8DkdvTile(rt, a.D, int8Dp);
  const problem = attentionI8DkdvTileProblem(rt, t, a.D, int8Dp);
  if (problem) throw new Error(`${a.label}: INT8-score attention dK/dV tile ${JSON.stringify(t)}: ${problem}`);
  const constants = { CSTR: codeStride(a.D), DW: a.D / 4, ...(int8Dp ? { DP8_ON: 1 } : {}) };
  return attentionBackward(rt, {
    ...a, dqPath: 'stored',
    scores: { tile: t, code: attentionDkdvI8Code(a.D, int8Dp), constants, qc: a.qc, kc: a.kc, dp: a.dp },
  });
}
