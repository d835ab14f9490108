/**
 * A model's dimensions at a batch shape, and the record of one buffer in a plan: the vocabulary
 * that the plan (run-plan.ts) and the pieces it plans for (tp/) share, kept apart so they need not
 * import each other.
 */
import type { MemCategory } from '../gpu/memory';
import { headDim, type ModelConfig } from './config';

export interface BufferSpec {
  key: string;
  category: MemCategory;
  bytes: number;
  usage?: GPUBufferUsageFlags;
}

/** QC = nH·D, the width of q and of the attention output: C, except in a tensor-parallel shard (C/t). */
export interface ModelDims {
  B: number; T: number; N: number; C: number; F: number; nH: number; nKV: number; D: number; QC: number; KVC: number; V: number; L: number;
}

export function modelDims(cfg: ModelConfig, B: number, T: number): ModelDims {
  const D = headDim(cfg);
  return {
    B, T, N: B * T, C: cfg.hidden_size, F: cfg.intermediate_size, nH: cfg.num_attention_heads,
    nKV: cfg.num_key_value_heads, D, QC: cfg.num_attention_heads * D, KVC: cfg.num_key_value_heads * D, V: cfg.vocab_size, L: cfg.num_hidden_layers,
  };
}
