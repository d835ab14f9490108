/**
 * Megatron sharding of a LLaMA across t tensor-parallel ranks: which tensors are split and how, the
 * config of one rank's shard (a narrower LLaMA), and slicing / reassembling tensors, so a TP run
 * starts from exactly the full model's initialisation and exports the full model.
 *
 * Rank r of t holds query heads [r·nH/t, (r+1)·nH/t), KV heads [r·nKV/t, (r+1)·nKV/t) (the KV
 * heads its query heads read: nKV % t = 0 keeps every GQA group on one rank) and MLP units
 * [r·F/t, (r+1)·F/t):
 *  - 'rows' (column-parallel, HF [out, in]): q/k/v/gate/up — its block of output rows;
 *  - 'columns' (row-parallel): o/down — its block of input columns of every row;
 *  - 'replicated': embeddings, norms, lm_head — whole on every rank.
 */
import { headDim, type ModelConfig, paramSpecs, type ShardConfig } from '../config';

export type ShardKind = 'replicated' | 'rows' | 'columns';

const ROW_SHARDED = /^model\.layers\.\d+\.(self_attn\.[qkv]_proj|mlp\.(gate|up)_proj)\.weight$/;
const COLUMN_SHARDED = /^model\.layers\.\d+\.(self_attn\.o_proj|mlp\.down_proj)\.weight$/;

export function shardKind(name: string): ShardKind {
  return ROW_SHARDED.test(name) ? 'rows' : COLUMN_SHARDED.test(name) ? 'columns' : 'replicated';
}

/** Why `cfg` cannot be split t ways (null when it can). */
export function shardProblem(cfg: ModelConfig, t: number): string | null {
  if (!Number.isInteger(t) || t < 1) return `TP degree ${t} must be a positive integer`;
  const nH = cfg.num_attention_heads;
  const nKV = cfg.num_key_value_heads;
  const F = cfg.intermediate_size;
  if (nH % t || nKV % t || F % t) return `TP degree ${t} must divide the heads (${nH}), KV heads (${nKV}) and intermediate size (${F})`;
  return null;
}

/** The model rank r of t holds: 1/t of the heads and MLP units at the full model's head dim. */
export function shardConfig(cfg: ModelConfig, t: number): ShardConfig {
  const p = shardProblem(cfg, t);
  if (p) throw new Error(p);
  return {
    ...cfg,
    num_attention_heads: cfg.num_attention_heads / t,
    num_key_value_heads: cfg.num_key_value_heads / t,
    intermediate_size: cfg.intermediate_size / t,
    head_dim: headDim(cfg),
  };
}

function checkSplit(shape: number[], kind: ShardKind, t: number): [number, number] {
  if (shape.length !== 2) throw new Error(`a ${kind}-sharded tensor must be 2-D, got shape [${shape}]`);
  const [R, K] = shape;
  const split = kind === 'rows' ? R : K;
  if (split % t) throw new Error(`cannot split ${split} ${kind} of [${shape}] ${t} ways`);
  return [R, K];
}

/** Rank `rank`'s part of a full tensor of `shape` (a copy). */
export function shardTensor(full: Float32Array, shape: number[], kind: ShardKind, rank: number, t: number): Float32Array {
  if (kind === 'replicated') return full.slice();
  const [R, K] = checkSplit(shape, kind, t);
  if (full.length !== R * K) throw new Error(`tensor of ${full.length} values does not have shape [${shape}]`);
  if (kind === 'rows') return full.slice((rank * R * K) / t, ((rank + 1) * R * K) / t);
  const k = K / t;
  const out = new Float32Array(R * k);
  for (let i = 0; i < R; i++) out.set(full.subarray(i * K + rank * k, i * K + (rank + 1) * k), i * k);
  return out;
}

/** The full tensor of `shape` from every rank's part (parts[r] from rank r); replicated: rank 0's. */
export function unshardTensor(parts: Float32Array[], shape: number[], kind: ShardKind): Float32Array {
  const t = parts.length;
  const n = shape.reduce((a, b) => a * b, 1);
  if (kind === 'replicated') {
    if (parts[0]?.length !== n) throw new Error(`replicated tensor has ${parts[0]?.length} values, shape [${shape}] needs ${n}`);
    return parts[0].slice();
  }
  const [R, K] = checkSplit(shape, kind, t);
  for (const [r, p] of parts.entries()) {
    if (p.length !== n / t) throw new Error(`rank ${r}'s part has ${p.length} values, expected ${n / t} of [${shape}]`);
  }
  const out = new Float32Array(n);
  if (kind === 'rows') {
    parts.forEach((p, r) => out.set(p, (r * n) / t));
    return out;
  }
  const k = K / t;
  for (let i = 0; i < R; i++) parts.forEach((p, r) => out.set(p.subarray(i * k, (i + 1) * k), i * K + r * k));
  return out;
}

/** Rank r's tensors (names as the full model's, shard shapes) from the full model's. */
export function shardParams(full: Map<string, Float32Array>, cfg: ModelConfig, rank: number, t: number): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const s of paramSpecs(cfg)) {
    const v = full.get(s.name);
    if (!v) throw new Error(`missing parameter ${s.name}`);
    out.set(s.name, shardTensor(v, s.shape, shardKind(s.name), rank, t));
  }
  return out;
}

/** The full model's tensors from every rank's (perRank[r] from rank r). */
export function unshardParams(perRank: Map<string, Float32Array>[], cfg: ModelConfig): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const s of paramSpecs(cfg)) {
    const parts = perRank.map((m, r) => {
      const v = m.get(s.name);
      if (!v) throw new Error(`rank ${r} lacks parameter ${s.name}`);
      return v;
    });
    out.set(s.name, unshardTensor(parts, s.shape, shardKind(s.name)));
  }
  return out;
}
