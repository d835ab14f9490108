/**
 * A checkpoint dropped into the page as files (config.json, model.safetensors or shards with their
 * index, tokenizer.json): read as the CLI's --init reads a folder, by the engine's loadCheckpoint,
 * which refuses config keys the engine does not run with the key named.
 */
import { type Checkpoint, isCheckpointFile, loadCheckpoint } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';
import type { LoraSpec } from '../engine/lora/spec';
import { countParams } from '../engine/model/config';
import type { TrainerInit } from '../engine/train/trainer';
import { sameLoraSpec } from './protocol';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import type { ImportedModel } from './data-protocol';

export async function checkpointOfFiles(files: File[]): Promise<Checkpoint> {
  const bytes: Record<string, Uint8Array> = {};
  for (const f of files) if (isCheckpointFile(f.name)) bytes[f.name] = new Uint8Array(await f.arrayBuffer());
  return loadCheckpoint(bytes);
}

/** What the page needs of a checkpoint before training from it (its tokenizer must fit its embedding). */
export async function importModel(files: File[]): Promise<ImportedModel> {
  const ck = await checkpointOfFiles(files);
  const json = ck.extra?.tokenizer;
  const tok = json ? tokenizerFromJSON(json, ck.extra?.tokenizerConfig) : null;
  if (tok && tok.vocabSize > ck.config.vocab_size) throw new Error(`the tokenizer has ${tok.vocabSize} tokens, the model's embedding ${ck.config.vocab_size}`);
  return {
    config: ck.config,
    params: countParams(ck.config),
    tokenizer: json && tok ? { json, config: ck.extra?.tokenizerConfig, vocabSize: tok.vocabSize } : null,
    ...(ck.adapters ? { adapters: ck.adapters.spec } : {}),
  };
}

/**
 * What a run starting from an imported checkpoint trains from. A LoRA export (frozen base +
 * adapters) continues its adapters when the run asks for the same LoRA; otherwise the run trains on
 * the model it is, adapters merged into the base (with fresh adapters if it asks for other LoRA).
 */
export function initOfImport(ck: Checkpoint, lora: LoraSpec | undefined): Pick<TrainerInit, 'params' | 'adapters'> {
  if (!ck.adapters) return { params: ck.params };
  if (lora && sameLoraSpec(lora, ck.adapters.spec)) return { params: ck.params, adapters: ck.adapters.tensors };
  return { params: mergeLora(ck.config, ck.adapters.spec, ck.params, ck.adapters.tensors) };
}

/** What a run resuming from its own checkpoint continues: params (a LoRA run's: the frozen base), moments, and its adapters. */
export function initOfResume(ck: Checkpoint): Pick<TrainerInit, 'params' | 'optimizer' | 'adapters'> {
  return { params: ck.params, optimizer: ck.extra?.optimizer, ...(ck.adapters ? { adapters: ck.adapters.tensors } : {}) };
}
