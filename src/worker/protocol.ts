/**
 * The typed message protocol between the page and a training worker (one worker hosts one run, so
 * several runs can train side by side, each with its own device). Messages into the worker are
 * validated with zod, because a worker is a trust boundary of sorts: a malformed `start` must come
 * back as an `error` message, not as a silent dead worker.
 *
 *   page → worker: start | stop
 *   worker → page: status → ready → (metrics | val | sample)* → done, or error at any point
 */
import { z } from 'zod';
import type { MemReport } from '../engine/gpu/memory';
import { PRESET_NAMES } from '../engine/model/config';

export const RunConfigSchema = z
  .object({
    preset: z.enum(PRESET_NAMES),
    steps: z.number().int().min(1).max(10_000_000),
    batch: z.number().int().min(1).max(4096),
    /** Context length (tokens per sequence); the model's positions grow to fit (RoPE has no table). */
    seq: z.number().int().min(2).max(8192),
    /** Peak learning rate; absent = the preset's default. */
    lr: z.number().positive().max(1).optional(),
    seed: z.number().int().min(0).max(0xffffffff),
    /** Evaluate validation loss every N steps and after the last one (0 = never). */
    evalEvery: z.number().int().min(0),
    /** Validation batches averaged per evaluation. */
    evalBatches: z.number().int().min(1).max(1000),
    /** Generate a sample every N steps (0 = only at the end). */
    sampleEvery: z.number().int().min(0),
    /** Characters generated per sample (0 = no samples). */
    sampleLength: z.number().int().min(0).max(4000),
  })
  .strict();

export type RunConfig = z.infer<typeof RunConfigSchema>;

export const DEFAULT_RUN_CONFIG: RunConfig = {
  preset: 'micro',
  steps: 200,
  batch: 8,
  seq: 32,
  seed: 1337,
  evalEvery: 50,
  evalBatches: 8,
  sampleEvery: 0,
  sampleLength: 200,
};

export const ToWorkerSchema = z.discriminatedUnion('type', [
  z.object({ type: z.literal('start'), runId: z.string().min(1), config: RunConfigSchema, corpusUrl: z.string().min(1) }),
  z.object({ type: z.literal('stop'), runId: z.string().min(1) }),
]);
export type ToWorker = z.infer<typeof ToWorkerSchema>;

/** One training step as the worker reports it (the trainer's StepMetrics, plain data). */
export interface StepReport {
  step: number;
  loss: number;
  lr: number;
  grad_norm: number;
  tokens_per_s: number;
  mem: MemReport;
  elapsed_s: number;
}

export interface RunInfo {
  adapter: string;
  params: number;
  vocabSize: number;
  memory: MemReport;
}

/** webgpu: no API/adapter; gpu: a validation or out-of-memory error from the device. */
export type ErrorKind = 'webgpu' | 'gpu' | 'device-lost' | 'config' | 'error';

export type FromWorker =
  | { type: 'status'; runId: string; phase: string }
  | { type: 'ready'; runId: string; info: RunInfo }
  | { type: 'metrics'; runId: string; metrics: StepReport }
  | { type: 'val'; runId: string; step: number; loss: number }
  | { type: 'sample'; runId: string; step: number; text: string }
  | { type: 'error'; runId: string; kind: ErrorKind; message: string }
  | { type: 'done'; runId: string; step: number; reason: 'completed' | 'stopped' };

/** Human-readable list of what is wrong with a config, or null when it is valid. */
export function checkRunConfig(raw: unknown): string | null {
  const r = RunConfigSchema.safeParse(raw);
  if (r.success) return null;
  return r.error.issues.map((i) => `${i.path.join('.') || 'config'}: ${i.message}`).join('; ');
}
