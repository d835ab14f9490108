/**
 * LLaMA model configuration, with Hugging Face `LlamaConfig` key names so that `config.json` is the
 * same object `transformers.LlamaForCausalLM.from_pretrained` reads.
 */
import { z } from 'zod';

export const ModelConfigSchema = z
  .object({
    vocab_size: z.number().int().min(2).max(1 << 20),
    hidden_size: z.number().int().min(4),
    intermediate_size: z.number().int().min(1),
    num_hidden_layers: z.number().int().min(1).max(256),
    num_attention_heads: z.number().int().min(1),
    num_key_value_heads: z.number().int().min(1),
    max_position_embeddings: z.number().int().min(1),
    rms_norm_eps: z.number().positive().max(1),
    rope_theta: z.number().positive(),
    tie_word_embeddings: z.boolean(),
    initializer_range: z.number().positive(),
  })
  .strict()
  .superRefine((c, ctx) => {
    if (c.hidden_size % c.num_attention_heads !== 0) {
      ctx.addIssue({ code: 'custom', message: `hidden_size ${c.hidden_size} is not divisible by num_attention_heads ${c.num_attention_heads}` });
    }
    if (c.num_attention_heads % c.num_key_value_heads !== 0) {
      ctx.addIssue({ code: 'custom', message: `num_attention_heads ${c.num_attention_heads} is not a multiple of num_key_value_heads ${c.num_key_value_heads}` });
    }
    const headDim = c.hidden_size / c.num_attention_heads;
    if (headDim % 2 !== 0) ctx.addIssue({ code: 'custom', message: `head dimension ${headDim} must be even (RoPE rotates pairs)` });
    if (headDim > 256) ctx.addIssue({ code: 'custom', message: `head dimension ${headDim} is above the supported 256` });
  });

export type ModelConfig = z.infer<typeof ModelConfigSchema>;

export const PRESET_NAMES = ['micro', 'tiny', 'small', 'base'] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

const common = { rms_norm_eps: 1e-5, rope_theta: 10000, initializer_range: 0.02 };

/** Presets for a character vocabulary (TinyShakespeare has 65 symbols); vocab_size is set from the data. */
export const PRESETS: Record<PresetName, ModelConfig> = {
  // Tests: tiny enough for SwiftShader, but with GQA (4 query heads share 2 KV heads) and tied embeddings.
  micro: { ...common, vocab_size: 65, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 32, tie_word_embeddings: true },
  // ~1.2M parameters.
  tiny: { ...common, vocab_size: 65, hidden_size: 128, intermediate_size: 384, num_hidden_layers: 6, num_attention_heads: 4, num_key_value_heads: 2, max_position_embeddings: 128, tie_word_embeddings: false },
  // ~10.6M: nanoGPT shakespeare-char's shape (6 layers, 6 heads, 384 wide, context 256).
  small: { ...common, vocab_size: 65, hidden_size: 384, intermediate_size: 1024, num_hidden_layers: 6, num_attention_heads: 6, num_key_value_heads: 6, max_position_embeddings: 256, tie_word_embeddings: false },
  // ~99M: GPT-2-small width and depth.
  base: { ...common, vocab_size: 65, hidden_size: 768, intermediate_size: 2560, num_hidden_layers: 12, num_attention_heads: 12, num_key_value_heads: 12, max_position_embeddings: 1024, tie_word_embeddings: false },
};

/**
 * The config of one tensor-parallel shard (tp-shard.ts): a narrower LLaMA with nH/t query heads,
 * nKV/t KV heads and F/t MLP units whose heads keep the full model's head dim, so q_proj is
 * [nH·head_dim, C] with nH·head_dim < C. Internal only: configs from users never carry head_dim
 * (checkpoint.ts rejects one other than hidden_size / num_attention_heads).
 */
export type ShardConfig = ModelConfig & { head_dim?: number };

export function headDim(c: ShardConfig): number {
  return c.head_dim ?? c.hidden_size / c.num_attention_heads;
}

export function validateModelConfig(raw: unknown): ModelConfig {
  const r = ModelConfigSchema.safeParse(raw);
  if (!r.success) {
    const msg = r.error.issues.map((i) => `  ${i.path.join('.') || '(config)'}: ${i.message}`).join('\n');
    throw new Error(`invalid model config:\n${msg}`);
  }
  return r.data;
}

/** Parameter tensors in Hugging Face state-dict names and shapes ([out, in] for linear weights). */
export interface ParamSpec {
  name: string;
  shape: number[];
  /** AdamW decays only parameters with ndim >= 2 (torch recipe used by nanoGPT). */
  decay: boolean;
}

export function paramSpecs(c: ModelConfig): ParamSpec[] {
  const C = c.hidden_size;
  const F = c.intermediate_size;
  const D = headDim(c);
  const q = c.num_attention_heads * D;
  const kv = c.num_key_value_heads * D;
  const out: ParamSpec[] = [{ name: 'model.embed_tokens.weight', shape: [c.vocab_size, C], decay: true }];
  for (let i = 0; i < c.num_hidden_layers; i++) {
    const p = `model.layers.${i}`;
    out.push(
      { name: `${p}.input_layernorm.weight`, shape: [C], decay: false },
      { name: `${p}.self_attn.q_proj.weight`, shape: [q, C], decay: true },
      { name: `${p}.self_attn.k_proj.weight`, shape: [kv, C], decay: true },
      { name: `${p}.self_attn.v_proj.weight`, shape: [kv, C], decay: true },
      { name: `${p}.self_attn.o_proj.weight`, shape: [C, q], decay: true },
      { name: `${p}.post_attention_layernorm.weight`, shape: [C], decay: false },
      { name: `${p}.mlp.gate_proj.weight`, shape: [F, C], decay: true },
      { name: `${p}.mlp.up_proj.weight`, shape: [F, C], decay: true },
      { name: `${p}.mlp.down_proj.weight`, shape: [C, F], decay: true },
    );
  }
  out.push({ name: 'model.norm.weight', shape: [C], decay: false });
  if (!c.tie_word_embeddings) out.push({ name: 'lm_head.weight', shape: [c.vocab_size, C], decay: true });
  return out;
}

export function countParams(c: ModelConfig): number {
  return paramSpecs(c).reduce((s, p) => s + p.shape.reduce((a, b) => a * b, 1), 0);
}

/** The `config.json` written beside model.safetensors; loads with LlamaForCausalLM.from_pretrained. */
export function hfConfigJson(c: ModelConfig): Record<string, unknown> {
  return {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    ...c,
    head_dim: headDim(c),
    hidden_act: 'silu',
    attention_bias: false,
    attention_dropout: 0.0,
    mlp_bias: false,
    pretraining_tp: 1,
    rope_scaling: null,
    use_cache: true,
    bos_token_id: null,
    eos_token_id: null,
    torch_dtype: 'float32',
  };
}
