/**
 * A checkpoint dropped into the page as files (config.json, model.safetensors or shards with their
 * index, tokenizer.json): read as the CLI's --init reads a folder, by the engine's loadCheckpoint,
 * which refuses config keys the engine does not run with the key named.
 */
import { type Checkpoint, isCheckpointFile, loadCheckpoint } from '../engine/io/checkpoint';
import { countParams } from '../engine/model/config';
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
  };
}
