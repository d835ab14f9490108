/**
 * LoRA adapters as a run asks for them (PEFT's conventions, so an adapter made here loads in PEFT and
 * one made by PEFT continues here): which linear layers get one, rank r, alpha, dropout; the
 * adapters' tensors and their names; their initialisation (A Kaiming-uniform, B zero) and scale
 * alpha / r. The frozen base keeps its HF names; an adapter of `model.layers.3.self_attn.q_proj`
 * is `model.layers.3.self_attn.q_proj.lora_A.weight` [r, in] and `….lora_B.weight` [out, r]
 * (PEFT's file prefixes these with `base_model.model.`: ./peft.ts).
 */
import { z } from 'zod';
import { type ModelConfig, type ParamSpec, paramSpecs } from '../model/config';
import { deriveSeed, Rng } from '../util/rng';

/** The linear layers an adapter can sit on, by PEFT's short module names. */
export const LORA_TARGETS = ['q', 'k', 'v', 'o', 'gate', 'up', 'down'] as const;
export type LoraTarget = (typeof LORA_TARGETS)[number];

/** A target's module inside a layer (HF names). */
export const LORA_MODULE: Record<LoraTarget, string> = {
  q: 'self_attn.q_proj', k: 'self_attn.k_proj', v: 'self_attn.v_proj', o: 'self_attn.o_proj',
  gate: 'mlp.gate_proj', up: 'mlp.up_proj', down: 'mlp.down_proj',
};

/** PEFT's target_modules entry of a target (the module's last name). */
export const peftModuleName = (t: LoraTarget): string => LORA_MODULE[t].split('.')[1];

export const LoraSpecSchema = z
  .object({
    rank: z.number().int().min(1).max(4096),
    /** Scale = alpha / rank (PEFT's lora_alpha; rsLoRA is not offered). */
    alpha: z.number().positive().max(1e6),
    /** Dropout on the adapter's input (PEFT's lora_dropout), training only. */
    dropout: z.number().min(0).lt(1),
    targets: z.array(z.enum(LORA_TARGETS)).min(1).max(LORA_TARGETS.length)
      .refine((t) => new Set(t).size === t.length, 'targets repeat a module'),
  })
  .strict();
export type LoraSpec = z.infer<typeof LoraSpecSchema>;

/** PEFT's LoraConfig defaults where the user names only a rank: alpha = 2r is the common recipe; all linear layers. */
export function defaultLoraSpec(rank: number, o: Partial<LoraSpec> = {}): LoraSpec {
  return LoraSpecSchema.parse({ rank, alpha: o.alpha ?? 2 * rank, dropout: o.dropout ?? 0, targets: o.targets ?? [...LORA_TARGETS] });
}

/** Parses a comma list such as "q,v" or PEFT's "q_proj,v_proj" into targets (unknown names throw, naming the valid ones). */
export function parseLoraTargets(s: string): LoraTarget[] {
  const out: LoraTarget[] = [];
  for (const raw of s.split(',').map((x) => x.trim()).filter(Boolean)) {
    const t = raw.replace(/_proj$/, '') as LoraTarget;
    if (!LORA_TARGETS.includes(t)) throw new Error(`unknown LoRA target "${raw}" (valid: ${LORA_TARGETS.join(', ')} or their *_proj names)`);
    if (!out.includes(t)) out.push(t);
  }
  if (!out.length) throw new Error('no LoRA targets given');
  return out;
}

export const loraScale = (s: LoraSpec): number => s.alpha / s.rank;

/** One adapter: the base weight it sits on and its two factors. */
export interface LoraAdapter {
  layer: number;
  target: LoraTarget;
  /** The base weight's name ([out, in]). */
  base: string;
  a: string;
  b: string;
  in: number;
  out: number;
}

/** Every adapter of a model under `spec`, layer by layer, targets in LORA_TARGETS order. */
export function loraAdapters(c: ModelConfig, spec: LoraSpec): LoraAdapter[] {
  const shapes = new Map(paramSpecs(c).map((p) => [p.name, p.shape]));
  const out: LoraAdapter[] = [];
  for (let l = 0; l < c.num_hidden_layers; l++) {
    for (const t of LORA_TARGETS) {
      if (!spec.targets.includes(t)) continue;
      const m = `model.layers.${l}.${LORA_MODULE[t]}`;
      const [o, i] = shapes.get(`${m}.weight`)!;
      if (spec.rank > Math.min(o, i)) throw new Error(`LoRA rank ${spec.rank} exceeds ${m}'s smaller side ${Math.min(o, i)}`);
      out.push({ layer: l, target: t, base: `${m}.weight`, a: `${m}.lora_A.weight`, b: `${m}.lora_B.weight`, in: i, out: o });
    }
  }
  return out;
}

/** The adapters' tensors as parameters (all decayed: they are matrices, as AdamW in HF's Trainer treats them). */
export function loraParamSpecs(c: ModelConfig, spec: LoraSpec): ParamSpec[] {
  return loraAdapters(c, spec).flatMap((a) => [
    { name: a.a, shape: [spec.rank, a.in], decay: true },
    { name: a.b, shape: [a.out, spec.rank], decay: true },
  ]);
}

/**
 * PEFT's init_lora_weights=True: A ~ kaiming_uniform_(a=√5) = U(−1/√in, 1/√in), B = 0, so the
 * adapted model starts equal to the base. Each A draws from its own stream (seed, name).
 */
export function initLoraTensors(c: ModelConfig, spec: LoraSpec, seed: number): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  for (const a of loraAdapters(c, spec)) {
    const bound = 1 / Math.sqrt(a.in);
    out.set(a.a, new Rng(deriveSeed(seed, a.a)).uniformArray(spec.rank * a.in, -bound, bound));
    out.set(a.b, new Float32Array(a.out * spec.rank));
  }
  return out;
}
