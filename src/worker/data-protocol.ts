/**
 * Messages between the page and the data worker, which prepares training data (prepare.ts) and reads
 * Hugging Face checkpoints off the main thread. One job at a time; cancelling one terminates the
 * worker (BPE training is one synchronous loop), so there is no cancel message.
 *
 *   page → worker: inspect (files dropped: their kinds and record fields) | prepare | import
 *   worker → page: inspected | progress* → prepared | imported, or failed
 */
import type { LoraSpec } from '../engine/lora/spec';
import type { ModelConfig } from '../engine/model/config';
import type { FileInfo, PreparedData, TokenizerChoice } from './prepare';

export type ToDataWorker =
  | { type: 'inspect'; id: number; files: File[] }
  | { type: 'prepare'; id: number; files: File[]; field?: string; tokenizer: TokenizerChoice }
  | { type: 'import'; id: number; files: File[] };

/** An HF (or lab) checkpoint as the page needs it before training from it. */
export interface ImportedModel {
  config: ModelConfig;
  params: number;
  /** Its tokenizer.json and tokenizer_config.json, when the checkpoint has them. */
  tokenizer: { json: object; config?: Record<string, unknown>; vocabSize: number } | null;
  /** A LoRA run's export: its adapters' settings (the run form offers to continue them, or to train the merged model). */
  adapters?: LoraSpec;
}

export type FromDataWorker =
  | { type: 'inspected'; id: number; files: FileInfo[] }
  | { type: 'progress'; id: number; phase: string; done: number; total: number }
  | { type: 'prepared'; id: number; data: PreparedData }
  | { type: 'imported'; id: number; model: ImportedModel }
  | { type: 'failed'; id: number; message: string };
