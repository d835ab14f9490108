/**
 * Dispatches of one LoRA training step (forward, backward, AdamW) of a SmolLM2-135M-shaped model's
 * layers, counted from the built dispatch lists (nothing runs: a count, valid on SwiftShader), split
 * into the adapters' (labels with `lora_`) and the rest, with each adapter GEMM's choice (split-K or
 * one pass) for the shapes of --batch × --seq. Issue 39: the adapters' thin GEMMs were the step's cost.
 *   node scripts/run-node.mjs bench/lora-dispatches.ts [--layers 2] [--batch 8 --seq 512] [--rank 16] [--scheme fp32|f16]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { defaultLoraSpec } from '../src/engine/lora/spec';
import { validateModelConfig } from '../src/engine/model/config';
import { LlamaGpu } from '../src/engine/model/llama';
import { resolvePlan } from '../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';

const a = parseArgs({ options: { layers: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, rank: { type: 'string' }, scheme: { type: 'string' } } }).values;
const L = Number(a.layers ?? 2);
const [B, T, r] = [Number(a.batch ?? 8), Number(a.seq ?? 512), Number(a.rank ?? 16)];
const scheme = a.scheme ?? 'fp32';
if (!(scheme in SCHEME_PRESETS)) throw new Error(`--scheme: unknown ${scheme} (have ${Object.keys(SCHEME_PRESETS).join(', ')})`);
const cfg = validateModelConfig({
  vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: L, num_attention_heads: 9, num_key_value_heads: 3,
  max_position_embeddings: 2048, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, initializer_range: 0.041666666666666664,
});
const rt = new Runtime(await acquireNodeGpu());
const f16 = scheme === 'fp32' ? {} : { f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true };
const model = new LlamaGpu(rt, resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS[scheme], lora: defaultLoraSpec(r), ...f16 }));
const steps = [...model.forward, ...model.backward, ...model.optimizer];
const lora = steps.filter((d) => d.label.includes('lora_'));
console.log(`${scheme} LoRA r${r}, ${L} layers, B${B}xT${T}: ${steps.length} dispatches a step, ${lora.length} of them the adapters' (${(lora.length / L).toFixed(1)} a layer)`);
const kinds = new Map<string, number>();
for (const d of lora) {
  const k = d.label.replace(/^L\d+\./, '');
  kinds.set(k, (kinds.get(k) ?? 0) + 1);
}
for (const [k, n] of kinds) if (/^(q_proj|q\.dw|q\.dx|gate_proj|gate\.dw|gate\.dx|o_proj|o\.dw|o\.dx|down)/.test(k)) console.log(`  ${k} ×${n}`);
model.destroy();
