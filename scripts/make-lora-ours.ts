// Writes tests/fixtures/lora-peft/ours/: a LoRA adapter made by the lab's exportPeftAdapter for the
// PEFT fixture's model (tools/make-lora-fixture.py's MODEL), which that script's --check-ours loads
// with PEFT ("export → PEFT loads it", issue 39). A subset of targets, rank 2 and alpha 5 (scale 2.5,
// not an integer) and a nonzero B, so a wrong name, orientation or scale would show in the logits.
// expected.json says what the adapter means, independently of adapter_config.json.
// Run: node scripts/run-node.mjs scripts/make-lora-ours.ts [OUTDIR]
import { mkdirSync, writeFileSync } from 'node:fs';
import { exportPeftAdapter } from '../src/engine/lora/peft';
import { initLoraTensors, loraAdapters, peftModuleName, type LoraSpec } from '../src/engine/lora/spec';
import { validateModelConfig } from '../src/engine/model/config';
import { Rng } from '../src/engine/util/rng';

const out = process.argv[2] ?? 'tests/fixtures/lora-peft/ours';
const model = validateModelConfig({
  vocab_size: 96, hidden_size: 64, intermediate_size: 176, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2,
  max_position_embeddings: 64, rms_norm_eps: 1e-5, rope_theta: 10000, tie_word_embeddings: false, initializer_range: 0.02,
});
const spec: LoraSpec = { rank: 2, alpha: 5, dropout: 0.05, targets: ['q', 'v', 'o', 'gate', 'down'] };
const tensors = initLoraTensors(model, spec, 7);
const rng = new Rng(8);
for (const a of loraAdapters(model, spec)) tensors.set(a.b, rng.normalArray(a.out * spec.rank, 0.1));
const files = exportPeftAdapter(model, spec, tensors, { baseModel: 'base' });
mkdirSync(out, { recursive: true });
writeFileSync(`${out}/adapter_config.json`, files['adapter_config.json']);
writeFileSync(`${out}/adapter_model.safetensors`, files['adapter_model.safetensors']);
writeFileSync(`${out}/expected.json`, JSON.stringify({
  made_by: 'scripts/make-lora-ours.ts', model, rank: spec.rank, alpha: spec.alpha, dropout: spec.dropout, targets: spec.targets,
  target_modules: spec.targets.map(peftModuleName),
}, null, 2) + '\n');
console.log(`wrote ${out}: ${tensors.size} tensors`);
