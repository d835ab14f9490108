/**
 * Causal grouped-query attention (HF LlamaForCausalLM semantics), flash-attention style: the forward
 * saves o and lse only; the backward rebuilds P tile by tile. See attention.ref.ts for the maths.
 *
 * Shapes: B batch, T sequence length, nH query heads, nKV KV heads (nH % nKV == 0), G = nH/nKV,
 * D head dim (even, 8..128 tested). q, o, dO, dq: [B, T, nH, D] (= [B·T, nH·D], the q_proj / o_proj
 * layout); k, v, dk, dv: [B, T, nKV, D]; lse and the backward workspace (Di): [B, nH, T], fp32.
 *
 * Tiles: BM query rows × BN key rows per step, NT threads. They are WGSL override constants chosen
 * per head dim from the device's workgroup-storage limit (32 KiB on SwiftShader, 48 KiB on an
 * H200); callers may force them (tests cover several, benchmarks tune them).
 */
import fwdBody from '../../../shaders/attention.wgsl?raw';
import bwdBody from '../../../shaders/attention_bwd.wgsl?raw';
import loadSrc from '../../../shaders/attention_load.wgsl?raw';
import { adapterMatches } from '../gpu/device';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../gpu/runtime';
import type { MeasuredTable } from './matmul_tables';

const fwdSrc = `${loadSrc}\n${fwdBody}`;
const bwdSrc = `${loadSrc}\n${bwdBody}`;

export { attentionBackwardRef, attentionForwardRef } from './attention.ref';

export interface AttnTile {
  /** Query rows per tile. */
  BM: number;
  /** Key rows per tile. */
  BN: number;
  /** Threads per workgroup. */
  NT: number;
}
type Pass = 'fwd' | 'dq' | 'dkdv';

// Register arrays in the shaders (MAXC, MAXO).
const MAXC = 16;
const MAXO = 8;

export type AttentionPass = Pass;

/** Tiles tried largest first by chooseAttentionTile (bench/attn_tune.ts times them all). */
export const ATTENTION_CANDIDATES: Record<Pass, [number, number, number][]> = {
  fwd: [[64, 64, 256], [64, 32, 256], [32, 64, 256], [32, 32, 256], [32, 32, 128], [32, 16, 128],
    [16, 16, 128], [16, 16, 64], [16, 8, 64], [8, 8, 64], [8, 8, 32]],
  dq: [[64, 32, 256], [32, 32, 256], [32, 32, 128], [32, 16, 128], [16, 16, 128], [16, 16, 64],
    [8, 8, 64], [8, 8, 32]],
  dkdv: [[32, 64, 256], [32, 32, 256], [32, 32, 128], [16, 32, 128], [16, 16, 128], [16, 16, 64],
    [8, 8, 64], [8, 8, 32]],
};

/** Workgroup storage bytes of a pass (mirrors the var<workgroup> declarations). */
export function attentionTileBytes(pass: Pass, t: AttnTile, D: number): number {
  const dp = Math.ceil(D / 4);
  const row = (dp | 1) * 16;
  if (pass === 'fwd') return (t.BM + t.BN) * row + t.BM * (t.BN + 1) * 4 + t.NT * 4;
  if (pass === 'dq') return 2 * (t.BM + t.BN) * row + t.BM * (t.BN + 1) * 4;
  return 2 * (t.BM + t.BN) * row + 2 * t.BN * (t.BM + 1) * 4 + 2 * t.BM * 4;
}

/** Why a tile cannot run a pass (null when it can). */
export function attentionTileProblem(rt: Runtime, pass: Pass, t: AttnTile, D: number): string | null {
  const lim = rt.device.limits;
  if (t.NT > lim.maxComputeInvocationsPerWorkgroup || t.NT > lim.maxComputeWorkgroupSizeX) return 'too many threads';
  // fwd/dq: threads own query rows and split keys/D; dkdv: threads own key rows and split queries/D.
  const own = pass === 'dkdv' ? t.BN : t.BM;
  const other = pass === 'dkdv' ? t.BM : t.BN;
  if (t.NT % own !== 0) return `NT ${t.NT} not a multiple of ${own}`;
  const per = t.NT / own;
  if (other % per !== 0 || other / per > MAXC) return `${other} not split evenly in <= ${MAXC} per thread`;
  if (Math.ceil(Math.ceil(D / 4) / per) > MAXO) return `D ${D} needs more than ${MAXO} vec4 per thread`;
  const bytes = attentionTileBytes(pass, t, D);
  if (bytes > lim.maxComputeWorkgroupStorageSize) return `${bytes} B workgroup storage`;
  return null;
}

/**
 * Tiles measured fastest per GPU model (bench/attn_tune.ts), keyed `${pass}/D${D}`; an entry applies
 * where adapterMatches(match), as in matmul_tables.ts.
 */
export const MEASURED_ATTENTION_TILES: {
  match: MeasuredTable['match']; source: string; table: Record<string, [number, number, number]>;
}[] = [
  {
    match: { vendor: 'nvidia', device: 'h200' },
    source: 'bench/attn_tune.ts on an NVIDIA H200 (driver 580.159.04, Dawn/Vulkan), 2026-11-29: base and small shapes agree; '
      + 'fwd 0.872 → 0.682 ms per layer at 16×512×12×64, dq/dkdv within 3 % of the first fit (docs/results/bench-2026-11-29-s3/attn_tune.json)',
    table: { 'fwd/D64': [32, 32, 256], 'dq/D64': [16, 16, 128], 'dkdv/D64': [16, 16, 128] },
  },
];

function measuredAttentionTile(rt: Runtime, pass: Pass, D: number): AttnTile | undefined {
  for (const t of MEASURED_ATTENTION_TILES) {
    if (!adapterMatches(rt.gpu, t.match)) continue;
    const e = t.table[`${pass}/D${D}`];
    if (e) return { BM: e[0], BN: e[1], NT: e[2] };
  }
  return undefined;
}

/** The measured tile for this GPU model if one fits, else the first candidate that fits, for a pass at head dim D. */
export function chooseAttentionTile(rt: Runtime, pass: Pass, D: number): AttnTile {
  const measured = measuredAttentionTile(rt, pass, D);
  if (measured && !attentionTileProblem(rt, pass, measured, D)) return measured;
  for (const [BM, BN, NT] of ATTENTION_CANDIDATES[pass]) {
    const t = { BM, BN, NT };
    if (!attentionTileProblem(rt, pass, t, D)) return t;
  }
  throw new Error(`attention ${pass}: no tile fits head dim ${D} on this device`);
}

function tileFor(rt: Runtime, label: string, pass: Pass, D: number, forced?: AttnTile): AttnTile {
  const t = forced ?? chooseAttentionTile(rt, pass, D);
  const problem = attentionTileProblem(rt, pass, t, D);
  if (problem) throw new Error(`${label}: attention ${pass} tile ${JSON.stringify(t)}: ${problem}`);
  return t;
}

interface Shape { B: number; T: number; nH: number; nKV: number; D: number }

function params(rt: Runtime, label: string, s: Shape): GPUBuffer {
  if (s.D % 2 !== 0 || s.D < 2) throw new Error(`${label}: attention head dim ${s.D} must be even`);
  if (s.nH % s.nKV !== 0) throw new Error(`${label}: nH ${s.nH} not a multiple of nKV ${s.nKV}`);
  const scale = Math.fround(1 / Math.sqrt(s.D));
  return rt.uniform(`${label}.attn`, new Uniforms()
    .u32(s.T).u32(s.nH).u32(s.nKV).u32(s.nH / s.nKV).f32(scale).f32(scale * Math.LOG2E)
    .u32(s.B * s.nH * s.T).u32(0));
}

export interface AttentionForwardArgs extends Shape {
  label: string;
  q: Binding;
  k: Binding;
  v: Binding;
  o: Binding;
  lse: Binding;
  tile?: AttnTile;
}

/** o = softmax(q·kᵀ/√D + causal mask)·v per (b, h); lse saved for the backward. One dispatch. */
export function attentionForward(rt: Runtime, a: AttentionForwardArgs): Dispatch[] {
  const t = tileFor(rt, a.label, 'fwd', a.D, a.tile);
  const u = params(rt, a.label, a);
  return [rt.kernel({
    label: `${a.label}.attnFwd`,
    code: fwdSrc,
    entryPoint: 'attn_fwd',
    constants: { D: a.D, BQ: t.BM, BK: t.BN, NT: t.NT },
    bindings: [a.q, a.k, a.v, a.o, a.lse, u],
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
  tiles?: { dq?: AttnTile; dkdv?: AttnTile };
}

/**
 * dq, dk, dv (overwritten, not accumulated) from q, k, v, o, lse and dO: Di pass, dq pass, dk/dv pass.
 * dk/dv sum the G query heads of each KV head inside one workgroup, in a fixed order.
 */
export function attentionBackward(rt: Runtime, a: AttentionBackwardArgs): Dispatch[] {
  const tq = tileFor(rt, a.label, 'dq', a.D, a.tiles?.dq);
  const tkv = tileFor(rt, a.label, 'dkdv', a.D, a.tiles?.dkdv);
  const u = params(rt, a.label, a);
  const ws = a.workspace ?? rt.createBuffer('workspace', `${a.label}.attnDi`,
    attentionBackwardWorkspaceBytes(a.B, a.T, a.nH));
  const rows = a.B * a.nH * a.T;
  const groups = Math.ceil(rows / 64);
  const gx = Math.max(1, Math.min(groups, 32768));
  const empty = a.T === 0 || a.B === 0;
  return [
    rt.kernel({
      label: `${a.label}.attnBwdDi`,
      code: bwdSrc,
      entryPoint: 'attn_bwd_di',
      constants: { D: a.D },
      bindings: [a.o, a.dO, ws, u],
      workgroups: [empty ? 0 : gx, Math.ceil(groups / gx)],
    }),
    rt.kernel({
      label: `${a.label}.attnBwdDq`,
      code: bwdSrc,
      entryPoint: 'attn_bwd_dq',
      constants: { D: a.D, BM: tq.BM, BN: tq.BN, NT: tq.NT },
      bindings: [a.q, a.k, a.v, a.dO, a.lse, ws, u, a.dq],
      workgroups: [empty ? 0 : Math.ceil(a.T / tq.BM), a.B * a.nH],
    }),
    rt.kernel({
      label: `${a.label}.attnBwdDkDv`,
      code: bwdSrc,
      entryPoint: 'attn_bwd_dkdv',
      constants: { D: a.D, BM: tkv.BM, BN: tkv.BN, NT: tkv.NT },
      bindings: [a.q, a.k, a.v, a.dO, a.lse, ws, u, a.dk, a.dv],
      workgroups: [empty ? 0 : Math.ceil(a.T / tkv.BN), a.B * a.nKV],
    }),
  ];
}
