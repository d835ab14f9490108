/**
 * Prompted generation on a Decoder: prefill, then one step per token, sampled on the host from the
 * logits it reads back (sampling.ts), streamed as an async iterator of token ids.
 */
import { Rng } from '../util/rng';
import type { Decoder } from './decode';
import { checkSampling, sampleToken, type SamplingOptions } from './sampling';

export interface GenerateOptions extends SamplingOptions {
  maxTokens: number;
  seed: number;
  /** Token ids that end the text once sampled (an end-of-text token); kept in the output. */
  stopIds?: readonly number[];
  /** Ids at or past this are never sampled (an imported model's embedding padded past its tokenizer). */
  vocab?: number;
  signal?: AbortSignal;
}

/** Why generation stopped: the token budget, the decoder's context filled up, a stop token, or the caller. */
export type StopReason = 'max_tokens' | 'context' | 'stop_token' | 'aborted';

export interface GenerateSummary {
  ids: number[];
  reason: StopReason;
  /** Wall time of the prefill (the prompt, up to the first token's logits). */
  prefillMs: number;
  /** Wall time of the steps after the prefill, and how many there were (decode tokens/s). */
  decodeMs: number;
  decodeSteps: number;
}

/** Yields each sampled id as it comes; returns a summary. Deterministic for a seed. */
export async function* generateTokens(decoder: Decoder, prompt: ArrayLike<number>, o: GenerateOptions): AsyncGenerator<number, GenerateSummary> {
  checkSampling(o);
  if (!(Number.isInteger(o.maxTokens) && o.maxTokens >= 0)) throw new Error(`max tokens must be an integer ≥ 0, got ${o.maxTokens}`);
  const rng = new Rng(o.seed);
  const stop = new Set(o.stopIds ?? []);
  const ids: number[] = [];
  const t0 = performance.now();
  let logits = await decoder.prefill(prompt);
  const prefillMs = performance.now() - t0;
  let decodeMs = 0;
  let decodeSteps = 0;
  let reason: StopReason = 'max_tokens';
  while (ids.length < o.maxTokens) {
    if (o.signal?.aborted) {
      reason = 'aborted';
      break;
    }
    const id = sampleFrom(logits, o, rng);
    ids.push(id);
    yield id;
    if (stop.has(id)) {
      reason = 'stop_token';
      break;
    }
    if (ids.length >= o.maxTokens) break;
    if (decoder.length >= decoder.ctx) {
      reason = 'context';
      break;
    }
    const t = performance.now();
    logits = await decoder.step(id);
    decodeMs += performance.now() - t;
    decodeSteps++;
  }
  return { ids, reason, prefillMs, decodeMs, decodeSteps };
}

function sampleFrom(logits: Float32Array, o: GenerateOptions, rng: Rng): number {
  return sampleToken(o.vocab !== undefined && o.vocab < logits.length ? logits.subarray(0, o.vocab) : logits, o, rng);
}

/**
 * Text of a token stream as it grows: a byte-level token may hold part of a character that the next
 * one completes, so text ending in a replacement character is held back until then (or flush()).
 */
export class TextStream {
  private ids: number[] = [];
  private emitted = 0;

  constructor(private readonly decode: (ids: number[]) => string) {}

  /** The new text once `id` is appended ('' while a character is incomplete). */
  push(id: number): string {
    this.ids.push(id);
    const text = this.decode(this.ids);
    if (text.endsWith('\uFFFD')) return '';
    return this.take(text);
  }

  /** Whatever is held back. */
  flush(): string {
    return this.take(this.decode(this.ids));
  }

  private take(text: string): string {
    const out = text.slice(this.emitted);
    this.emitted = text.length;
    return out;
  }
}

/** A short description of a stop reason, for the CLI and the page. */
export function stopReasonText(r: StopReason, ctx: number): string {
  switch (r) {
    case 'max_tokens': return 'reached the token limit';
    case 'context': return `stopped at the context length (${ctx} tokens)`;
    case 'stop_token': return 'stopped at the end-of-text token';
    case 'aborted': return 'stopped';
  }
}
