/**
 * Attention scores S = Q·Kᵀ in INT8, as SageAttention computes them: Q and K quantized per (token,
 * head) row after RoPE (quantizeHeadsI8), the products summed exactly in integers and scaled
 * f32(acc)·(sq·c2)·sk; softmax, P·V and the backward's gradient products stay fp32 (the blocked
 * fp32 kernels' I8 blocks: attention-fwd-blocked.wgsl, attention-bwd-blocked-stream.wgsl).
 *
 * Two paths, the same integers and so the same bits: tensor cores (subgroup matrices, where
 * enableI8TensorCores found the GEMM exact and enableAttentionI8Tc finds these kernels exact against
 * dot4 on this device) and dot4I8Packed everywhere else. The reference: attention.ref.ts on the
 * dequantized Q and K (attentionI8Ref).
 */
import fwdBody from '../../../shaders/attention-fwd-blocked.wgsl?raw';
import fwdIo from '../../../shaders/attention-fwd-blocked-io.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import {
  attentionBackward, type AttentionBackwardArgs, attentionParams, type AttnTile, attnTileOf, ATTENTION_CANDIDATES,
  blockedForwardThreadsPerRowGroup, blockedSplitProblem, chooseAttentionTile, type Shape, streamDkdvDsSource,
} from './attention';
import { i8TensorCoreSpec, type I8TcSpec } from './qgemm-tc';
import { buildQuantize } from './quantize';
import { sgmatLoad, sgmatStore } from './sgmat';
import { unrollLoops, wgslIf, wgslSection } from './wgsl';

/** The kernel attention's INT8 scores ran on. */
export type AttnScorePath = 'int8-dot4' | 'int8-tensor-core';

/** The subgroup-matrix part of an INT8 tensor-core spec that the attention kernels use. */
export type AttnTc = Pick<I8TcSpec, 'cfg' | 'syntax' | 'unitDiv' | 'sgSize'>;

/** INT8 codes of every D-long (token, head) row of x [rows·D] into codes (rows·D/4 words) and scales (rows floats). */
export function quantizeHeadsI8(rt: Runtime, label: string, x: Binding, rows: number, D: number, codes: GPUBuffer, scales: GPUBuffer): Dispatch[] {
  if (D % 4) throw new Error(`${label}: INT8 attention scores pack 4 values per word; head dim ${D} is not a multiple of 4`);
  return buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: D }, n: rows * D }, x, { words: codes, scales }).dispatches;
}

// Word strides of the staged code rows: odd for dot4 (neighbouring rows on different banks), rows of
// whole 16 bytes for the tensor-core loads. Sacc's row stride keeps its rows 16-byte aligned too.
const codeStride = (D: number, tc: boolean) => (tc ? D / 4 + 4 : (D / 4) | 1);
const scoreStride = (BK: number) => BK + 4;

/** Workgroup bytes of the INT8-score forward (mirrors attention-fwd-blocked.wgsl's I8 and TC arrays). */
export function attentionI8FwdBytes(t: AttnTile, D: number, tc: boolean): number {
  const dp = Math.ceil(D / 4);
  const pstr = (t.BM / 4) | 1;
  const codes = (t.BM + t.BN) * codeStride(D, tc) * 4;
  const sacc = tc ? t.BM * scoreStride(t.BN) * 4 : 0;
  return codes + sacc + (t.BN * dp + t.BN * pstr + blockedForwardThreadsPerRowGroup(t) * pstr) * 16;
}

/** Why the INT8-score forward cannot run a tile (null when it can). */
export function attentionI8FwdTileProblem(rt: Runtime, t: AttnTile, D: number, tc?: AttnTc): string | null {
  if (!t.blocked || t.chunk) return 'the INT8-score forward is the register-blocked kernel';
  if (D % 4) return `head dim ${D} is not a multiple of 4`;
  const lim = rt.device.limits;
  if (t.NT > lim.maxComputeInvocationsPerWorkgroup || t.NT > lim.maxComputeWorkgroupSizeX) return 'too many threads';
  const split = blockedSplitProblem('fwd', t, D);
  if (split) return split;
  if (t.BN * (D / 4) > 4 * t.NT) return `a ${t.BN}-key tile's codes are more than 4 words per thread`;
  if (tc) {
    const { M, N, K } = tc.cfg;
    if (D % K) return `head dim ${D} is not a multiple of the tensor-core K ${K}`;
    if (t.BM % M || t.BN % N) return `${t.BM}x${t.BN} is not made of ${M}x${N} tiles`;
    if (t.NT % tc.sgSize) return `NT ${t.NT} is not whole subgroups of ${tc.sgSize}`;
    if (((t.BM / M) * (t.BN / N)) % (t.NT / tc.sgSize)) return `${(t.BM / M) * (t.BN / N)} score tiles do not split evenly over ${t.NT / tc.sgSize} subgroups`;
  }
  const bytes = attentionI8FwdBytes(t, D, !!tc);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

/** The fp32 forward's tile where the INT8 kernel can run it, else the first blocked candidate that fits. */
export function chooseAttentionI8Tile(rt: Runtime, D: number, tc?: AttnTc): AttnTile {
  const tiles = [chooseAttentionTile(rt, 'fwd', D), ...ATTENTION_CANDIDATES.fwd.map(attnTileOf)];
  const t = tiles.find((c) => !attentionI8FwdTileProblem(rt, c, D, tc));
  if (!t) throw new Error(`attention with INT8 scores: no forward tile fits head dim ${D} on this device`);
  return t;
}

/**
 * tcScores(lid): each subgroup's share of the tile's integer scores, Qc·Kcᵀ on tensor cores, into
 * Sacc. K rows stored k-contiguous are the right matrix read column-major (Kᵀ for free).
 */
export function tcScoresFn(tc: AttnTc, BM: number, BN: number, NT: number, D: number, names = { a: 'Qc', b: 'Kc', out: 'Sacc' }): string {
  const { M, N, K } = tc.cfg;
  const cstr = codeStride(D, true) * 4; // bytes (= i8 elements) of a staged code row
  const sstr = scoreStride(BN);
  const perRow = BN / N;
  const tps = ((BM / M) * perRow) / (NT / tc.sgSize);
  const u = (e: string) => (tc.unitDiv === 1 ? e : `(${e}) / 4u`);
  const L = [`fn tcScores(lid: u32) {`, `  let sg = lid / ${tc.sgSize}u;`];
  for (let i = 0; i < tps; i++) {
    L.push('  {', `    let t = sg * ${tps}u + ${i}u;`, `    let r0 = (t / ${perRow}u) * ${M}u;`, `    let c0 = (t % ${perRow}u) * ${N}u;`, '    var c = CT();');
    for (let kk = 0; kk < D; kk += K) {
      L.push(`    c = subgroupMatrixMultiplyAccumulate(${sgmatLoad(tc, 'LT', `&${names.a}`, u(`r0 * ${cstr}u + ${kk}u`), false, u(`${cstr}u`))}, `
        + `${sgmatLoad(tc, 'RT', `&${names.b}`, u(`c0 * ${cstr}u + ${kk}u`), true, u(`${cstr}u`))}, c);`);
    }
    L.push(`    ${sgmatStore(tc, `&${names.out}`, `r0 * ${sstr}u + c0`, 'c', `${sstr}u`)}`, '  }');
  }
  L.push('}');
  return L.join('\n');
}

/** The enable line, the uniformity diagnostic and the matrix aliases a tensor-core attention shader starts with. */
export function tcHeader(tc: AttnTc): string {
  const { M, N, K } = tc.cfg;
  // Each subgroup's offsets are uniform within it (lid / subgroup size), which WGSL's analysis cannot see.
  return `enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
alias LT = subgroup_matrix_left<i8, ${K}, ${M}>;
alias RT = subgroup_matrix_right<i8, ${N}, ${K}>;
alias CT = subgroup_matrix_result<i32, ${N}, ${M}>;
`;
}

const codeCache = new Map<string, string>();

/** The INT8-score forward's WGSL for a tile: dot4, or tensor cores with `tc`. */
export function attentionForwardI8Code(D: number, t: AttnTile, tc?: AttnTc): string {
  const key = `${D}:${JSON.stringify(t)}:${JSON.stringify(tc ?? null)}`;
  let code = codeCache.get(key);
  if (code) return code;
  const flags = { F32: false, I8: true, TC: !!tc, DOT4: !tc };
  const body = unrollLoops(`${wgslSection(fwdIo, 'i8')}\n${wgslIf(fwdBody, flags)}`, {
    DP: D / 4, DW: D / 4, TX: blockedForwardThreadsPerRowGroup(t), BK: t.BN,
  });
  code = tc ? `${tcHeader(tc)}${body}\n${tcScoresFn(tc, t.BM, t.BN, t.NT, D)}\n` : body;
  codeCache.set(key, code);
  return code;
}

export interface AttentionForwardI8Args extends Shape {
  label: string;
  /** Q's and K's INT8 codes and scales per (token, head) row (quantizeHeadsI8). */
  qc: Binding; qs: Binding; kc: Binding; ks: Binding;
  v: Binding; o: Binding; lse: Binding;
  /** Forces the dot4 kernel where tensor cores are on (the check compares the two). */
  path?: AttnScorePath;
  tile?: AttnTile;
}

/** o = softmax(S + causal mask)·v with S from the INT8 codes; lse saved for the backward. One dispatch. */
export function attentionForwardI8(rt: Runtime, a: AttentionForwardI8Args): Dispatch[] {
  const tc = (a.path ?? attentionI8Path(rt, a.D)) === 'int8-tensor-core' ? tcOf(rt, a.D) : undefined;
  const t = a.tile ?? chooseAttentionI8Tile(rt, a.D, tc);
  const problem = attentionI8FwdTileProblem(rt, t, a.D, tc);
  if (problem) throw new Error(`${a.label}: INT8-score attention tile ${JSON.stringify(t)}: ${problem}`);
  const u = attentionParams(rt, a.label, a);
  const dw = a.D / 4;
  return [rt.kernel({
    label: `${a.label}.attnFwdI8`,
    code: attentionForwardI8Code(a.D, t, tc),
    entryPoint: 'attn_fwd_blocked',
    constants: { D: a.D, BQ: t.BM, BK: t.BN, NT: t.NT, CSTR: codeStride(a.D, !!tc), SSTR: scoreStride(t.BN), DW: dw },
    bindings: [a.qc, a.kc, a.v, a.o, a.lse, u, a.qs, a.ks],
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / t.BM), a.B * a.nH],
  })];
}

// Tensor cores for the attention scores, per head dim, where enableAttentionI8Tc found them exact.
const enabled = new WeakMap<Runtime, Map<number, AttnTc>>();

export function setAttentionI8Tc(rt: Runtime, D: number, tc: AttnTc | undefined): void {
  const m = enabled.get(rt) ?? new Map<number, AttnTc>();
  if (tc) m.set(D, tc);
  else m.delete(D);
  enabled.set(rt, m);
}

function tcOf(rt: Runtime, D: number): AttnTc {
  const tc = enabled.get(rt)?.get(D);
  if (!tc) throw new Error(`INT8-score attention: tensor cores are not enabled for head dim ${D}`);
  return tc;
}

/** The kernel INT8 attention scores run on for head dim D on this runtime. */
export function attentionI8Path(rt: Runtime, D: number): AttnScorePath {
  return enabled.get(rt)?.has(D) && i8TensorCoreSpec(rt) ? 'int8-tensor-core' : 'int8-dot4';
}

/**
 * Workgroup bytes of the INT8-score dK/dV kernel (mirrors its I8 stage, PT, KcO, QcT and Sacc):
 * chunks of V and dO only, or the full rows of one other operand; the key and query codes; Sacc.
 */
export function attentionI8DkdvBytes(t: AttnTile, D: number, tc: boolean): number {
  const dp = Math.ceil(D / 4);
  const stage = Math.max((t.BN + t.BM) * ((t.chunk ?? 1) | 1), t.BM * (dp | 1));
  const pt = t.BM * ((t.BN / 4) | 1);
  return (stage + pt) * 16 + (t.BN + t.BM) * codeStride(D, tc) * 4 + (tc ? t.BM * scoreStride(t.BN) * 4 : 0);
}

/** Why the INT8-score dK/dV kernel (streamed, dS stored) cannot run a tile (null when it can). */
export function attentionI8DkdvTileProblem(rt: Runtime, t: AttnTile, D: number, tc?: AttnTc): string | null {
  if (!t.blocked || !t.chunk) return 'the INT8-score dK/dV pass is the streamed kernel';
  if (t.keep) return 'the INT8-score dK/dV pass stages no Q chunks to keep';
  if (D % 4) return `head dim ${D} is not a multiple of 4`;
  const lim = rt.device.limits;
  if (t.NT > lim.maxComputeInvocationsPerWorkgroup || t.NT > lim.maxComputeWorkgroupSizeX) return 'too many threads';
  const split = blockedSplitProblem('dkdv', t, D);
  if (split) return split;
  if (t.BM * (D / 4) > 4 * t.NT) return `a ${t.BM}-query tile's codes are more than 4 words per thread`;
  if (tc) {
    const { M, N, K } = tc.cfg;
    if (D % K) return `head dim ${D} is not a multiple of the tensor-core K ${K}`;
    if (t.BM % M || t.BN % N) return `${t.BM}x${t.BN} is not made of ${M}x${N} tiles`;
    if (t.NT % tc.sgSize) return `NT ${t.NT} is not whole subgroups of ${tc.sgSize}`;
    if (((t.BM / M) * (t.BN / N)) % (t.NT / tc.sgSize)) return `${(t.BM / M) * (t.BN / N)} score tiles do not split evenly over ${t.NT / tc.sgSize} subgroups`;
  }
  const bytes = attentionI8DkdvBytes(t, D, !!tc);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

/** The fp32 dK/dV tile where the INT8 kernel can run it, else the first streamed candidate that fits. */
export function chooseAttentionI8DkdvTile(rt: Runtime, D: number, tc?: AttnTc): AttnTile {
  const tiles = [chooseAttentionTile(rt, 'dkdv', D), ...ATTENTION_CANDIDATES.dkdv.map(attnTileOf)];
  const t = tiles.find((c) => !attentionI8DkdvTileProblem(rt, c, D, tc));
  if (!t) throw new Error(`attention with INT8 scores: no dK/dV tile fits head dim ${D} on this device`);
  return t;
}

/** The INT8-score dK/dV kernel's WGSL for a tile: dot4, or tensor cores with `tc`. */
export function attentionDkdvI8Code(D: number, t: AttnTile, tc?: AttnTc): string {
  const key = `dkdv:${D}:${JSON.stringify(t)}:${JSON.stringify(tc ?? null)}`;
  let code = codeCache.get(key);
  if (code) return code;
  // dot4's score loop written out (attention.ts says why the fp32 backward's are not).
  const body = unrollLoops(streamDkdvDsSource({ F32: false, I8: true, TC: !!tc, DOT4: !tc }), { DW: D / 4 });
  code = tc ? `${tcHeader(tc)}${body}\n${tcScoresFn(tc, t.BM, t.BN, t.NT, D, { a: 'QcT', b: 'KcO', out: 'Sacc' })}\n` : body;
  codeCache.set(key, code);
  return code;
}

export interface AttentionBackwardI8Args extends Omit<AttentionBackwardArgs, 'scores' | 'tiles'> {
  /** Q's and K's INT8 codes and scales per (token, head) row, as the forward had them (quantizeHeadsI8). */
  qc: Binding; qs: Binding; kc: Binding; ks: Binding;
  path?: AttnScorePath;
  tile?: AttnTile;
}

/** attentionBackward with the forward's INT8 scores: the stored-dS path, its dK/dV pass rebuilding S from the codes. */
export function attentionBackwardI8(rt: Runtime, a: AttentionBackwardI8Args): Dispatch[] {
  const tc = (a.path ?? attentionI8Path(rt, a.D)) === 'int8-tensor-core' ? tcOf(rt, a.D) : undefined;
  const t = a.tile ?? chooseAttentionI8DkdvTile(rt, a.D, tc);
  const problem = attentionI8DkdvTileProblem(rt, t, a.D, tc);
  if (problem) throw new Error(`${a.label}: INT8-score attention dK/dV tile ${JSON.stringify(t)}: ${problem}`);
  const constants = { CSTR: codeStride(a.D, !!tc), SSTR: scoreStride(t.BN), DW: a.D / 4 };
  return attentionBackward(rt, {
    ...a, dqPath: 'stored',
    scores: { tile: t, code: attentionDkdvI8Code(a.D, t, tc), constants, qc: a.qc, kc: a.kc, qs: a.qs, ks: a.ks },
  });
}
