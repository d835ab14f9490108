/**
 * Causal grouped-query attention (HF LlamaForCausalLM semantics), flash-attention style: the forward
 * saves o and lse only; the backward rebuilds P tile by tile. See attention.ref.ts for the maths.
 * Given dead scratch, the backward's dK/dV pass also stores dS and dq comes from it (attention-ds.ts).
 *
 * Shapes: B batch, T sequence length, nH query heads, nKV KV heads (nH % nKV == 0), G = nH/nKV,
 * D head dim (even, 8..128 tested). q, o, dO, dq: [B, T, nH, D] (= [B·T, nH·D], the q_proj / o_proj
 * layout); k, v, dk, dv: [B, T, nKV, D]; lse and the backward workspace (Di): [B, nH, T], fp32.
 *
 * Tiles: BM query rows × BN key rows per step, NT threads. They are WGSL override constants chosen
 * per head dim from the device's workgroup-storage limit (32 KiB on SwiftShader, 48 KiB on an
 * H200); callers may force them (tests cover several, benchmarks tune them).
 */
import fwdBody from './attention.wgsl?raw';
import fwdBlockedBody from './fwd-blocked.wgsl?raw';
import fwdBlockedIo from './fwd-blocked-io.wgsl?raw';
import bwdBody from './bwd.wgsl?raw';
import bwdBlockedShared from './bwd-blocked.wgsl?raw';
import bwdBlockedResident from './bwd-blocked-resident.wgsl?raw';
import bwdBlockedStream from './bwd-blocked-stream.wgsl?raw';
import loadSrc from './load.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { chooseDqDsTile, dqFromDs, type DqDsTile, type DqPath, dsChunks, type DsChunk, type DsFormat, dsPairBytes, dsWriterSrc } from './ds';
import { ATTENTION_CANDIDATES, type AttentionPass, HEURISTIC_ATTENTION_FIRST, type AttnTile, attnTileNamed, attnTileOf, measuredWithSource } from './tables';
import { type ChoiceSource, noteChoice, tunedPicks } from '../../tune/store';
import { asSlice, bindingBytes, requireBytes } from '../launch';
import { type F16Out, f16OperandBytes, f16OutModule } from '../matmul-f16/cast';
import { unrollLoops, wgslIf, wgslSection } from '../wgsl';

const loadQkv = wgslSection(loadSrc, 'qkv');
const loadBwd = `${loadQkv}\n${wgslSection(loadSrc, 'do')}`;
// O16: the forward also writes o's f16 copy (binding 6, f16OutModule), o_proj's f16 GEMM's X.
const O16_BINDING = 6;
const fwdSrc = (o16?: F16Out) => `${loadQkv}\n${wgslIf(fwdBody, { O16: !!o16 })}${o16 ? `\n${f16OutModule('o16', O16_BINDING, 2, o16.elem)}` : ''}`;
// The blocked kernels' fp32 scores; their INT8-score variant (the I8 blocks) is attention-i8.ts's.
export const F32_SCORES = { F32: true, I8: false, DP8: false };
// The blocked forward's global access: 16-byte vec4s when D % 4 == 0, 8-byte halves otherwise.
const fwdBlockedSrc = (D: number, o16?: F16Out) => `${wgslIf(wgslSection(fwdBlockedIo, D % 4 === 0 ? 'vec4' : 'vec2'), { O16: !!o16 })}\n${wgslIf(fwdBlockedBody, F32_SCORES)}`
  + (o16 ? `\n${f16OutModule('o16', O16_BINDING, D % 4 === 0 ? 4 : 2, o16.elem)}` : '');
// The register-blocked backward: shared part, resident and streamed kernels, one shader text.
const bwdBlockedBody = `${bwdBlockedShared}\n${bwdBlockedResident}\n${bwdBlockedStream}`;

/** The streamed dK/dV kernel's shader with dS stored (as `format`), these score flags (F32, I8, DP8) and `extra` text after it: attention-i8.ts's variants. */
export function streamDkdvDsSource(scores: Record<string, boolean>, extra = '', format: DsFormat = 'f32'): string {
  return `${wgslIf(`${loadBwd}\n${bwdBlockedShared}\n${bwdBlockedStream}\n${extra}`, { DS: true, DV16: false, ...scores })}\n${dsWriterSrc(true, format)}`;
}
// The backward shaders as written (DS false) and in their stored-dS variant (DS: the dK/dV kernels
// also write dS, attention-ds.ts), whose `// #if DS` blocks add nothing to the other's pipelines;
// each also with dv's f16 copy (DV16: the dK/dV kernels write it at the binding after their last).
const bwdSrc = wgslIf(`${loadBwd}\n${bwdBody}`, { DS: false, DV16: false });
const bwdCodes = new Map<string, string>();
function bwdCode(blocked: boolean, ds: boolean, dv16?: 'f16' | 'f32'): string {
  if (!blocked && !ds && !dv16) return bwdSrc;
  const key = `${blocked}:${ds}:${dv16 ?? ''}`;
  let code = bwdCodes.get(key);
  if (!code) {
    const body = wgslIf(`${loadBwd}\n${blocked ? bwdBlockedBody : bwdBody}`, { DS: ds, DV16: !!dv16, ...(blocked ? F32_SCORES : {}) });
    // dk/dv bindings: q k v dO lse Di params dk dv (0..8), dS (9) when stored.
    code = `${body}${ds ? `\n${dsWriterSrc(blocked)}` : ''}${dv16 ? `\n${f16OutModule('dv16', ds ? 10 : 9, 2, dv16)}` : ''}`;
    bwdCodes.set(key, code);
  }
  return code;
}

// The blocked forward's inner loops (marked `// unroll`) written out for one pipeline's bounds:
// they are override constants, which the NVIDIA driver keeps as loops (wgsl.ts). Only the forward:
// written out, the backward's loops made its tuned tiles slower.
const unrolledCache = new Map<string, string>();
function unrolledForward(D: number, bounds: Record<string, number>, o16?: F16Out): string {
  const key = `${D % 4 === 0 ? 'vec4' : 'vec2'}:${o16?.elem ?? ''}:${JSON.stringify(bounds)}`;
  let code = unrolledCache.get(key);
  if (!code) unrolledCache.set(key, (code = unrollLoops(fwdBlockedSrc(D, o16), bounds)));
  return code;
}

export { attentionBackwardRef, attentionForwardRef } from './attention.ref';

// Register arrays in the shaders (MAXC, MAXO).
const MAXC = 16;
const MAXO = 8;

export { ATTENTION_CANDIDATES, type AttentionPass, type AttnTile, attnTileName, attnTileOf, type AttnTileTuple, MEASURED_ATTENTION_TILES } from './tables';
type Pass = AttentionPass;

/** Workgroup storage bytes of a pass (mirrors the var<workgroup> declarations). */
export function attentionTileBytes(pass: Pass, t: AttnTile, D: number): number {
  const dp = Math.ceil(D / 4);
  const row = (dp | 1) * 16;
  // Blocked fwd (attention-fwd-blocked.wgsl): Qs unpadded, Ks padded, Vs, Ps (BN keys × BM/4 row-group
  // vec4s, padded) and red (TX partial maxima per row group, padded).
  if (pass === 'fwd' && t.blocked) {
    const pstr = (t.BM / 4) | 1;
    return (t.BM * dp + t.BN * (dp | 1) + t.BN * dp + t.BN * pstr + blockedForwardThreadsPerRowGroup(t) * pstr) * 16;
  }
  // Blocked dq/dkdv (attention-bwd-blocked*.wgsl): own and other row pairs, one P/dS tile PT.
  if (t.blocked) {
    const g = blockedBackwardSplit(pass, t, D);
    const pt = g.other * g.pstr * 16;
    // Streamed: one stage array holding either a chunk of all four operands or the full rows of a
    // full step; with keep, the kept full rows come first and the chunks leave their operand out.
    if (t.chunk) {
      const kept = t.keep ? g.other * row : 0;
      const chunks = (2 * g.own + (t.keep ? 1 : 2) * g.other) * (t.chunk | 1) * 16;
      return kept + Math.max(chunks, streamedFullStep(pass, t) ? g.other * row : 0) + pt;
    }
    return 2 * (t.BM + t.BN) * row + pt;
  }
  if (pass === 'fwd') return (t.BM + t.BN) * row + t.BM * (t.BN + 1) * 4 + t.NT * 4;
  if (pass === 'dq') return 2 * (t.BM + t.BN) * row + t.BM * (t.BN + 1) * 4;
  return 2 * (t.BM + t.BN) * row + 2 * t.BN * (t.BM + 1) * 4 + 2 * t.BM * 4;
}

/** Why a tile cannot run a pass (null when it can). */
export function attentionTileProblem(rt: Runtime, pass: Pass, t: AttnTile, D: number): string | null {
  const lim = rt.device.limits;
  if (t.NT > lim.maxComputeInvocationsPerWorkgroup || t.NT > lim.maxComputeWorkgroupSizeX) return 'too many threads';
  if (t.chunk !== undefined && (pass === 'fwd' || !t.blocked)) return 'chunk: only the blocked dq/dkdv kernels stream D';
  const split = t.blocked ? blockedSplitProblem(pass, t, D) : rowSplitProblem(pass, t, D);
  if (split) return split;
  const bytes = attentionTileBytes(pass, t, D);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

/** Why the row-per-thread kernels cannot split a tile over its threads (null when they can). */
function rowSplitProblem(pass: Pass, t: AttnTile, D: number): string | null {
  // fwd/dq: threads own query rows and split keys/D; dkdv: threads own key rows and split queries/D.
  const own = pass === 'dkdv' ? t.BN : t.BM;
  const other = pass === 'dkdv' ? t.BM : t.BN;
  if (t.NT % own !== 0) return `NT ${t.NT} not a multiple of ${own}`;
  const per = t.NT / own;
  if (other % per !== 0 || other / per > MAXC) return `${other} not split evenly in <= ${MAXC} per thread`;
  if (Math.ceil(Math.ceil(D / 4) / per) > MAXO) return `D ${D} needs more than ${MAXO} vec4 per thread`;
  return null;
}

// Register blocks of the blocked forward (named vec4s in attention-fwd-blocked.wgsl): key slots per
// thread (s0..s7) and output vec4 columns per thread (o0*, o1*).
const BLOCKED_FWD_MAX_KEYS = 8;
const BLOCKED_FWD_MAX_COLS = 2;

/** TX of the blocked forward: the threads sharing one row group (4 query rows), NT / (BM/4). */
export function blockedForwardThreadsPerRowGroup(t: AttnTile): number {
  return Math.floor(t.NT / Math.floor(t.BM / 4));
}

/**
 * How the register-blocked backward (attention-bwd-blocked.wgsl) splits a tile: the pass's own rows
 * (dq: BM queries, dkdv: BN keys) go 4 to a thread, in TO = own/4 groups; the TS = NT/TO threads of a
 * group split the other rows (RS each, strided by TS) and the gradient's vec4 columns (CS each).
 * PSTR: vec4 row stride of the P/dS tile. Mirrors the shader's overrides.
 */
function blockedBackwardSplit(pass: Pass, t: AttnTile, D: number) {
  const own = pass === 'dkdv' ? t.BN : t.BM;
  const other = pass === 'dkdv' ? t.BM : t.BN;
  const to = Math.floor(own / 4);
  const ts = Math.floor(t.NT / to);
  return { own, other, to, ts, rs: other / ts, cs: Math.ceil(Math.ceil(D / 4) / ts), pstr: to | 1 };
}

// Register blocks of the blocked backward (named variables): other rows per thread s0..s3, gradient
// columns per thread a*0..a*3.
const BLOCKED_BWD_ROWS = [1, 2, 4];
const BLOCKED_BWD_MAX_COLS = 4;
const BLOCKED_BWD_MAX_STAGED = 8;

/** Whether the streamed kernel stages full other rows after the chunks (all but dq with keep). */
function streamedFullStep(pass: Pass, t: AttnTile): boolean {
  return !(pass === 'dq' && t.keep);
}

function blockedBackwardProblem(pass: Pass, t: AttnTile, D: number): string | null {
  const g = blockedBackwardSplit(pass, t, D);
  if (g.own < 4 || g.own % 4 !== 0) return `${g.own} ${pass === 'dkdv' ? 'keys' : 'queries'} not a multiple of 4`;
  if (t.NT % g.to !== 0) return `NT ${t.NT} not a multiple of ${g.to} row groups`;
  if (!BLOCKED_BWD_ROWS.includes(g.rs)) return `${g.other} rows not split ${BLOCKED_BWD_ROWS.join(', ')} per thread over ${g.ts} threads`;
  if (g.cs > BLOCKED_BWD_MAX_COLS) return `D ${D} needs more than ${BLOCKED_BWD_MAX_COLS} vec4 per thread`;
  if (t.chunk !== undefined) {
    if (!Number.isInteger(t.chunk) || t.chunk < 1) return `chunk ${t.chunk} not a positive integer`;
    if (D % 4 !== 0) return `streamed kernel (chunk) needs D % 4 == 0, not D ${D}`;
    // Staged vec4s per thread and step (PFN in the shader: named registers x0..x7).
    const staged = Math.ceil(Math.max(2 * (t.BM + t.BN) * t.chunk, g.other * (D / 4)) / t.NT);
    if (staged > BLOCKED_BWD_MAX_STAGED) return `chunk ${t.chunk} stages ${staged} > ${BLOCKED_BWD_MAX_STAGED} vec4 per thread`;
    if (t.keep && (D / 4) % t.chunk !== 0) return `keep needs D/4 a multiple of chunk ${t.chunk}, not D ${D}`;
  }
  if (t.prefetch && !t.chunk) return 'prefetch needs chunk (the streamed kernel)';
  if (t.keep && !t.chunk) return 'keep needs chunk (the streamed kernel)';
  return null;
}

/** Why the register-blocked kernel of a pass cannot split a tile over its threads (null when it can). */
export function blockedSplitProblem(pass: Pass, t: AttnTile, D: number): string | null {
  if (pass !== 'fwd') return blockedBackwardProblem(pass, t, D);
  // Threads form BM/4 row groups (4 query rows each) × TX threads splitting the keys and D.
  if (t.BM < 4 || t.BM % 4 !== 0) return `BM ${t.BM} not a multiple of 4`;
  const groups = t.BM / 4;
  if (t.NT % groups !== 0) return `NT ${t.NT} not a multiple of ${groups} row groups`;
  const tx = t.NT / groups;
  if (t.BN % tx !== 0 || t.BN / tx > BLOCKED_FWD_MAX_KEYS) return `${t.BN} keys not split evenly in <= ${BLOCKED_FWD_MAX_KEYS} per thread`;
  if (Math.ceil(Math.ceil(D / 4) / tx) > BLOCKED_FWD_MAX_COLS) return `D ${D} needs more than ${BLOCKED_FWD_MAX_COLS} vec4 per thread`;
  // Lanes take tx in runs of min(TX, 8) (warp layout, see the shader): the runs must tile TX.
  if (tx % Math.min(tx, 8) !== 0) return `${tx} threads per row group not a multiple of 8`;
  return null;
}

/** The measured tile of a kernel (a pass, or attention-i8.ts's fwdI8 / dkdvI8) at head dim D for this GPU model (or seeded by its architecture). */
export function measuredAttentionTile(rt: Runtime, kernel: Pass | 'fwdI8' | 'dkdvI8' | 'dkdvDp8', D: number): AttnTile | undefined {
  return measuredAttentionTileWithSource(rt, kernel, D)?.tile;
}

function measuredAttentionTileWithSource(rt: Runtime, kernel: Pass | 'fwdI8' | 'dkdvI8' | 'dkdvDp8', D: number): { tile: AttnTile; source: 'table' | 'seed' } | undefined {
  const e = measuredWithSource(rt.gpu, (t) => t.table[`${kernel}/D${D}`]);
  return e && { tile: attnTileOf(e.value), source: e.source };
}

/** The tuning key of a pass's tile choice (engine/tune): per pass and head dim, as the shipped tables key them. */
export function attentionTuneKey(pass: Pass, D: number): string {
  return `${pass}/D${D}`;
}

/**
 * The tile for a pass at head dim D: tuned on this device (engine/tune), else the shipped table's
 * for this GPU model or its architecture, if it fits, else the first candidate that fits. Notes its
 * source (engine/tune/store.ts).
 */
export function chooseAttentionTile(rt: Runtime, pass: Pass, D: number): AttnTile {
  const key = attentionTuneKey(pass, D);
  const made = (t: AttnTile, source: ChoiceSource) => {
    noteChoice(rt.device, 'attention', key, source);
    return t;
  };
  for (const name of tunedPicks(rt.device, 'attention', key) ?? []) {
    const t = attnTileNamed(pass, name);
    if (t && !attentionTileProblem(rt, pass, t, D)) return made(t, 'tuned');
  }
  const measured = measuredAttentionTileWithSource(rt, pass, D);
  if (measured && !attentionTileProblem(rt, pass, measured.tile, D)) return made(measured.tile, measured.source);
  for (const e of [...HEURISTIC_ATTENTION_FIRST[pass], ...ATTENTION_CANDIDATES[pass]]) {
    const t = attnTileOf(e);
    if (!attentionTileProblem(rt, pass, t, D)) return made(t, 'heuristic');
  }
  throw new Error(`attention ${pass}: no tile fits head dim ${D} on this device`);
}

function tileFor(rt: Runtime, label: string, pass: Pass, D: number, forced?: AttnTile): AttnTile {
  if (forced) noteChoice(rt.device, 'attention', attentionTuneKey(pass, D), 'forced');
  const t = forced ?? chooseAttentionTile(rt, pass, D);
  const problem = attentionTileProblem(rt, pass, t, D);
  if (problem) throw new Error(`${label}: attention ${pass} tile ${JSON.stringify(t)}: ${problem}`);
  return t;
}

export interface Shape { B: number; T: number; nH: number; nKV: number; D: number }

/** The kernels' Params uniform; pair0: the first (b, KV head) pair of a stored-dS chunk. */
export function attentionParams(rt: Runtime, label: string, s: Shape, pair0 = 0): GPUBuffer {
  if (s.D % 2 !== 0 || s.D < 2) throw new Error(`${label}: attention head dim ${s.D} must be even`);
  if (s.nH % s.nKV !== 0) throw new Error(`${label}: nH ${s.nH} not a multiple of nKV ${s.nKV}`);
  const scale = Math.fround(1 / Math.sqrt(s.D));
  return rt.uniform(`${label}.attn`, new Uniforms()
    .u32(s.T).u32(s.nH).u32(s.nKV).u32(s.nH / s.nKV).f32(scale).f32(scale * Math.LOG2E)
    .u32(s.B * s.nH * s.T).u32(pair0));
}

export interface AttentionForwardArgs extends Shape {
  label: string;
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  tile?: AttnTile;
  /** Where the kernel also writes o's f16 copy (the input of o_proj's f16 GEMM): the same bits as castF16Operand of o. */
  o16?: F16Out;
}

/** Checks an f16 copy's binding: n values as f16 (packed, or f32 in the twin). */
export function requireF16Out(label: string, name: string, h: F16Out, n: number): void {
  requireBytes(label, name, h.out, f16OperandBytes(n, h.elem === 'f32'));
}

/** The forward kernels' bindings, fp32 and f16 alike: q, k, v, o, lse, params, and o's f16 copy (6) where given. */
export function forwardBindings(rt: Runtime, a: Omit<AttentionForwardArgs, 'tile'>): Binding[] {
  if (a.o16) requireF16Out(a.label, 'o16', a.o16, a.B * a.T * a.nH * a.D);
  return [a.q, a.k, a.v, a.o, a.lse, attentionParams(rt, a.label, a), ...(a.o16 ? [a.o16.out] : [])];
}

/** The dk/dv kernels' bindings (recomputing dq; the f16 one): q, k, v, dO, lse, Di, params, dk, dv, and dv's f16 copy (9) where given. */
export function dkdvBindings(a: Pick<AttentionBackwardArgs, 'q' | 'k' | 'v' | 'dO' | 'lse' | 'dk' | 'dv' | 'dv16'>, di: Binding, params: Binding): Binding[] {
  return [a.q, a.k, a.v, a.dO, a.lse, di, params, a.dk, a.dv, ...(a.dv16 ? [a.dv16.out] : [])];
}

/** o = softmax(q·kᵀ/√D + causal mask)·v per (b, h); lse saved for the backward (and o's f16 copy: o16). One dispatch. */
export function attentionForward(rt: Runtime, a: AttentionForwardArgs): Dispatch[] {
  const t = tileFor(rt, a.label, 'fwd', a.D, a.tile);
  return [rt.kernel({
    label: `${a.label}.attnFwd${a.o16 ? 'H' : ''}`,
    code: t.blocked
      ? unrolledForward(a.D, { DP: Math.ceil(a.D / 4), TX: blockedForwardThreadsPerRowGroup(t), BK: t.BN }, a.o16)
      : fwdSrc(a.o16),
    entryPoint: t.blocked ? 'attn_fwd_blocked' : 'attn_fwd',
    constants: { D: a.D, BQ: t.BM, BK: t.BN, NT: t.NT },
    bindings: forwardBindings(rt, a),
    workgroups: [a.T === 0 ? 0 : Math.ceil(a.T / t.BM), a.B * a.nH],
  })];
}

/** Bytes of the Di workspace ([B, nH, T] fp32) the backward needs. */
export function attentionBackwardWorkspaceBytes(B: number, T: number, nH: number): number {
  return B * nH * T * 4;
}

export interface AttentionBackwardArgs extends Shape {
  label: string;
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  dO: Binding;
  dq: Binding;
  dk: Binding;
  dv: Binding;
  /** attentionBackwardWorkspaceBytes(B, T, nH) bytes; allocated (charged to workspace) when absent. */
  workspace?: Binding;
  /**
   * Scratch that is dead during this backward, of any size: the stored-dS path keeps dS there, a
   * chunk of (b, KV head) pairs at a time (attention-ds.ts). Absent: the dq pass recomputes.
   */
  dsScratch?: Binding;
  /** 'recompute' forces today's dq pass; 'stored' the stored-dS path (an error where it cannot run); absent: stored where it can. */
  dqPath?: DqPath;
  /**
   * INT8 scores (attention-i8.ts): the streamed dK/dV kernel's variant for `tile` (its code and
   * extra constants) and Q's and K's head-codes buffers (codes, then scales; bindings 10 and 1).
   * Stored-dS path only.
   */
  scores?: {
    tile: AttnTile; code: string; constants: Record<string, number>; qc: Binding; kc: Binding;
    /** INT8 dP too (the kernel's DP8 variant): V's and dO's head-codes buffers (bindings 2 and 11); its dS is stored as bf16. */
    dp?: { vc: Binding; oc: Binding };
  };
  tiles?: { dq?: AttnTile; dkdv?: AttnTile; dqDs?: DqDsTile };
  /** Where the dk/dv pass also writes dv's f16 copy (v_proj's f16 dX and dW GEMMs read it): fp32 scores only. */
  dv16?: F16Out;
}

/** How a backward computes dq: the path, the stored-dS chunks (none when recomputing) and their format, and why it recomputes. */
export interface AttentionDqPlan { path: DqPath; chunks: DsChunk[]; format: DsFormat; why?: string }

/** The stored dS's format: bf16 under INT8 dP (attention-ds.ts DsFormat), else fp32. */
export const dsFormatOf = (scores: AttentionBackwardArgs['scores']): DsFormat => (scores?.dp ? 'bf16' : 'f32');

/** Which dq path attentionBackward takes for these arguments. */
const forcedDqPaths = new WeakMap<Runtime, DqPath>();

/** The dq path every attention backward of this runtime takes unless its call names one (benchmarks time both); undefined: the plan's choice. */
export function setAttentionDqPath(rt: Runtime, path: DqPath | undefined): void {
  if (path === undefined) forcedDqPaths.delete(rt);
  else forcedDqPaths.set(rt, path);
}

export function attentionDqPlan(rt: Runtime, a: Shape & Pick<AttentionBackwardArgs, 'dsScratch' | 'dqPath' | 'tiles' | 'scores'>): AttentionDqPlan {
  const forced = a.dqPath ?? forcedDqPaths.get(rt);
  const format = dsFormatOf(a.scores);
  const recompute = (why: string): AttentionDqPlan => {
    if (forced === 'stored') throw new Error(`attention backward: the stored-dS path cannot run: ${why}`);
    return { path: 'recompute', chunks: [], format, why };
  };
  if (forced === 'recompute') return { path: 'recompute', chunks: [], format, why: 'forced' };
  if (!a.dsScratch) return recompute('no dS scratch');
  const G = a.nH / a.nKV;
  const chunks = dsChunks(a.B, a.nKV, G, a.T, bindingBytes(a.dsScratch), format);
  if (!chunks.length) return recompute(`one (b, KV head) pair's dS (${dsPairBytes(a.T, G, format)} B) exceeds the scratch (${bindingBytes(a.dsScratch)} B)`);
  if (!a.tiles?.dqDs) {
    try {
      chooseDqDsTile(rt, a.D);
    } catch (e) {
      return recompute((e as Error).message);
    }
  }
  return { path: 'stored', chunks, format };
}

/** Shader, entry point and constants of the dq or dk/dv pass for a tile (blocked or row-per-thread); `dv16`: the dk/dv pass also writes dv's f16 copy. */
export function backwardKernel(pass: 'dq' | 'dkdv', t: AttnTile, D: number, ds = false, dv16?: 'f16' | 'f32'): { code: string; entryPoint: string; constants: Record<string, number> } {
  if (dv16 && pass !== 'dkdv') throw new Error('internal: only the dk/dv pass writes dv\'s f16 copy');
  if (!t.blocked) return { code: bwdCode(false, ds, dv16), entryPoint: `attn_bwd_${pass}`, constants: { D, BM: t.BM, BN: t.BN, NT: t.NT } };
  // The blocked kernels name tile sides by role: own rows (dq queries, dkdv keys) and other rows.
  const own = pass === 'dq' ? t.BM : t.BN;
  const other = pass === 'dq' ? t.BN : t.BM;
  const constants = { D, OWNR: own, OTHR: other, NT: t.NT };
  if (t.chunk) {
    const flags = { PREFETCH: t.prefetch ? 1 : 0, KEEP: t.keep ? 1 : 0, STAGE_FULL: streamedFullStep(pass, t) ? 1 : 0 };
    return { code: bwdCode(true, ds, dv16), entryPoint: `attn_bwd_${pass}_stream`, constants: { ...constants, CH: t.chunk, ...flags } };
  }
  return { code: bwdCode(true, ds, dv16), entryPoint: `attn_bwd_${pass}_blocked`, constants };
}

/** Di = rowsum(dO∘o) in fp32 into `ws` ([B, nH, T]): the backward's first pass (also the f16 stored-dS backward's). */
export function attentionDi(rt: Runtime, a: Shape & { label: string; o: Binding; dO: Binding }, ws: Binding, u: GPUBuffer): Dispatch {
  const groups = Math.ceil((a.B * a.nH * a.T) / 16); // attn_bwd_di: 16 rows per workgroup
  const gx = Math.max(1, Math.min(groups, 32768));
  return rt.kernel({
    label: `${a.label}.attnBwdDi`,
    code: bwdSrc,
    entryPoint: 'attn_bwd_di',
    constants: { D: a.D },
    bindings: [a.o, a.dO, ws, u],
    workgroups: [a.T === 0 || a.B === 0 ? 0 : gx, Math.ceil(groups / gx)],
  });
}

/**
 * dq, dk, dv (overwritten, not accumulated) from q, k, v, o, lse and dO: Di pass, then dq pass and
 * dk/dv pass, or on the stored-dS path (attentionDqPlan) per chunk of (b, KV head) pairs a dk/dv pass
 * that also stores dS and dq from it. dk/dv sum the G query heads of each KV head inside one
 * workgroup, in a fixed order, the same on both paths.
 */
export function attentionBackward(rt: Runtime, a: AttentionBackwardArgs): Dispatch[] {
  const plan = attentionDqPlan(rt, a);
  const sc = a.scores;
  if (sc && plan.path !== 'stored') throw new Error(`${a.label}: INT8 attention scores need the stored-dS backward, which cannot run: ${plan.why}`);
  if (sc && a.dv16) throw new Error(`${a.label}: the INT8-score backward writes no f16 copy of dv (cast it instead)`);
  if (a.dv16) requireF16Out(a.label, 'dv16', a.dv16, a.B * a.T * a.nKV * a.D);
  const H = a.dv16 ? 'H' : '';
  const tkv = sc?.tile ?? tileFor(rt, a.label, 'dkdv', a.D, a.tiles?.dkdv);
  const u = attentionParams(rt, a.label, a);
  const ws = a.workspace ?? rt.createBuffer('workspace', `${a.label}.attnDi`,
    attentionBackwardWorkspaceBytes(a.B, a.T, a.nH));
  const empty = a.T === 0 || a.B === 0;
  const di = attentionDi(rt, a, ws, u);
  if (plan.path === 'stored') {
    const tds = a.tiles?.dqDs ?? chooseDqDsTile(rt, a.D);
    const G = a.nH / a.nKV;
    const scratch = asSlice(a.dsScratch!);
    // The dK/dV pass that stores dS, or its INT8-score variant, which reads K's codes (binding 1) and Q's codes and scales.
    const fp32Dkdv = backwardKernel('dkdv', tkv, a.D, true, a.dv16?.elem);
    const dkdv = sc ? { entryPoint: fp32Dkdv.entryPoint, code: sc.code, constants: { ...fp32Dkdv.constants, ...sc.constants } } : fp32Dkdv;
    return [di, ...plan.chunks.flatMap((c, i) => {
      const lab = plan.chunks.length > 1 ? `${a.label}.c${i}` : a.label;
      const uc = attentionParams(rt, lab, a, c.pair0);
      const dS: Binding = { buffer: scratch.buffer, offset: scratch.offset ?? 0, size: c.pairs * dsPairBytes(a.T, G, plan.format) };
      return [
        rt.kernel({
          label: `${lab}.attnBwdDkDvDs${sc ? 'I8' : H}`,
          ...dkdv,
          bindings: [a.q, sc ? sc.kc : a.k, sc?.dp ? sc.dp.vc : a.v, a.dO, a.lse, ws, uc, a.dk, a.dv, dS,
            ...(sc ? [sc.qc] : []), ...(sc?.dp ? [sc.dp.oc] : []), ...(a.dv16 ? [a.dv16.out] : [])],
          workgroups: [empty ? 0 : Math.ceil(a.T / tkv.BN), c.pairs],
        }),
        dqFromDs(rt, { label: lab, dS, k: a.k, dq: a.dq, params: uc, T: a.T, G, D: a.D, pairs: c.pairs, tile: tds, format: plan.format }),
      ];
    })];
  }
  const tq = tileFor(rt, a.label, 'dq', a.D, a.tiles?.dq);
  return [
    di,
    rt.kernel({
      label: `${a.label}.attnBwdDq`,
      ...backwardKernel('dq', tq, a.D),
      bindings: [a.q, a.k, a.v, a.dO, a.lse, ws, u, a.dq],
      workgroups: [empty ? 0 : Math.ceil(a.T / tq.BM), a.B * a.nH],
    }),
    rt.kernel({
      label: `${a.label}.attnBwdDkDv${H}`,
      ...backwardKernel('dkdv', tkv, a.D, false, a.dv16?.elem),
      bindings: dkdvBindings(a, ws, u),
      workgroups: [empty ? 0 : Math.ceil(a.T / tkv.BN), a.B * a.nKV],
    }),
  ];
}
