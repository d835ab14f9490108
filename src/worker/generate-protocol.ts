/**
 * Messages between the page and the generation worker (generate.worker.ts), which runs prompted
 * generation with a KV cache on a run's checkpoint, on its own device beside any training worker.
 *
 *   page → worker: generate (checkpoint files + prompt + sampling) | stop
 *   worker → page: status* → text* → done, or error
 */
import { z } from 'zod';
import type { StopReason } from '../engine/model/generate';

export const GenerateParamsSchema = z.object({
  prompt: z.string().max(100_000),
  maxTokens: z.number().int().min(1).max(100_000),
  temperature: z.number().min(0).max(100),
  topK: z.number().int().min(0),
  topP: z.number().gt(0).max(1),
  seed: z.number().int().min(0).max(0xffffffff),
});
export type GenerateParams = z.infer<typeof GenerateParamsSchema>;

export const DEFAULT_GENERATE_PARAMS: GenerateParams = { prompt: '\n', maxTokens: 200, temperature: 0.8, topK: 0, topP: 1, seed: 0 };

export const ToGenerateSchema = z.discriminatedUnion('type', [
  z.object({
    type: z.literal('generate'),
    id: z.number().int(),
    /** Names the checkpoint (run id and step): the worker keeps the model built for the same key. */
    key: z.string().min(1),
    files: z.record(z.string(), z.union([z.instanceof(Uint8Array), z.string()])),
    params: GenerateParamsSchema,
  }),
  z.object({ type: z.literal('stop'), id: z.number().int() }),
]);
export type ToGenerate = z.infer<typeof ToGenerateSchema>;

export type FromGenerate =
  | { type: 'status'; id: number; phase: string }
  /** New text; `tokens` so far and decode tokens/s (after the prefill) so far. */
  | { type: 'text'; id: number; text: string; tokens: number; tokensPerS: number | null }
  | { type: 'done'; id: number; tokens: number; tokensPerS: number | null; prefillMs: number; reason: StopReason; ctx: number }
  | { type: 'error'; id: number; message: string };
