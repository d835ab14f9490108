/**
 * What a run with LoRA adapters allocates and trains (resolved once into RunPlan.lora): the
 * adapters' flat layout (their weights, gradients and AdamW moments, each one flat buffer like the
 * model's), their scale, and the scratch the adapter GEMMs use. The base model is then frozen: no
 * gradient or optimizer buffer of its own, no dW GEMMs (run-plan.ts, backward.ts).
 */
import { type BufferSpec, type ModelDims } from '../model/dims';
import type { ModelConfig } from '../model/config';
import { layoutOf, type ParamLayout } from '../model/params';
import { type LoraAdapter, loraAdapters, loraParamSpecs, loraScale, type LoraSpec, LoraSpecSchema, type LoraTarget } from './spec';

export interface LoraPlan {
  spec: LoraSpec;
  /** alpha / rank. */
  scale: number;
  adapters: LoraAdapter[];
  /** The adapter on a base weight, by the base weight's name. */
  byBase: ReadonlyMap<string, LoraAdapter>;
  /** The adapters' tensors in one flat buffer (lora.weights; lora.grads, lora.m, lora.v alike). */
  layout: ParamLayout;
}

export function resolveLoraPlan(cfg: ModelConfig, spec: LoraSpec): LoraPlan {
  const s = LoraSpecSchema.parse(spec);
  const adapters = loraAdapters(cfg, s);
  return { spec: s, scale: loraScale(s), adapters, byBase: new Map(adapters.map((a) => [a.base, a])), layout: layoutOf(loraParamSpecs(cfg, s)) };
}

/** Scratch of the adapters' low-rank products: X·Aᵀ (lora.u) and, per target, dY·B kept from the dW place to the dX place. */
export const loraRankKey = (t: LoraTarget): string => `lora.t.${t}`;

export function loraBuffers(p: LoraPlan, d: ModelDims, training: boolean): BufferSpec[] {
  const P = p.layout.totalFloats * 4;
  const r = p.spec.rank;
  const out: BufferSpec[] = [{ key: 'lora.weights', category: 'weights', bytes: P }];
  out.push({ key: 'lora.u', category: 'workspace', bytes: d.N * r * 4 });
  // The dropped copy of an adapter's input (recomputed in backward from the same seed; backward also forms dX's masked term here).
  if (p.spec.dropout > 0) out.push({ key: 'lora.xd', category: 'workspace', bytes: d.N * Math.max(...p.adapters.map((a) => a.in)) * 4 });
  if (!training) return out;
  out.push({ key: 'lora.grads', category: 'grads', bytes: P });
  out.push({ key: 'lora.m', category: 'optimizer', bytes: P }, { key: 'lora.v', category: 'optimizer', bytes: P });
  for (const t of p.spec.targets) out.push({ key: loraRankKey(t), category: 'workspace', bytes: d.N * r * 4 });
  return out;
}
