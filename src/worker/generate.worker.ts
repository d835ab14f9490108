/**
 * The generation worker: builds a KV-cache decoder (engine/model/decode.ts) from a checkpoint's
 * files and streams generated text back. The decoder stays built for the next request on the same
 * checkpoint (its pipelines compile once); stop is checked between tokens.
 */
/// <reference lib="webworker" />
import { acquireGpu, type Gpu } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { loadCheckpoint } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';
import { Decoder } from '../engine/model/decode';
import { streamText } from '../engine/train/generate-text';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import type { Tokenizer } from '../engine/train/tokenizer/tokenizer';
import { type FromGenerate, type ToGenerate, ToGenerateSchema } from './generate-protocol';

const scope = self as unknown as DedicatedWorkerGlobalScope;
let rt: Runtime | null = null;
let built: { key: string; decoder: Decoder; tokenizer: Tokenizer } | null = null;
let active: { id: number; abort: AbortController } | null = null;

function post(msg: FromGenerate): void {
  scope.postMessage(msg);
}

async function runtime(): Promise<Runtime> {
  if (rt) return rt;
  const gpu: Gpu = await acquireGpu(scope.navigator.gpu);
  rt = new Runtime(gpu);
  return rt;
}

async function model(msg: Extract<ToGenerate, { type: 'generate' }>): Promise<NonNullable<typeof built>> {
  if (built?.key === msg.key) return built;
  built?.decoder.destroy();
  built = null;
  const ck = loadCheckpoint(msg.files);
  if (!ck.extra?.tokenizer) throw new Error('the checkpoint has no tokenizer to encode the prompt with');
  const tokenizer = tokenizerFromJSON(ck.extra.tokenizer, ck.extra.tokenizerConfig);
  post({ type: 'status', id: msg.id, phase: 'acquiring GPU' });
  const r = await runtime();
  post({ type: 'status', id: msg.id, phase: 'building the decoder (compiling shaders)' });
  // A LoRA run's checkpoint generates as the model it trained: its adapters merged into the base.
  const params = ck.adapters ? mergeLora(ck.config, ck.adapters.spec, ck.params, ck.adapters.tensors) : ck.params;
  const decoder = await r.checked('building the decoder', () => Decoder.withParams(r, ck.config, params));
  built = { key: msg.key, decoder, tokenizer };
  return built;
}

async function generate(msg: Extract<ToGenerate, { type: 'generate' }>): Promise<void> {
  const abort = new AbortController();
  active = { id: msg.id, abort };
  try {
    const { decoder, tokenizer } = await model(msg);
    post({ type: 'status', id: msg.id, phase: 'generating' });
    // Decode tokens/s so far: from the first token (the prefill's end) to the latest.
    let first: { at: number; tokens: number } | null = null;
    const p = msg.params;
    const r = await streamText(decoder, tokenizer, p.prompt, { ...p, signal: abort.signal }, (text, tokens) => {
      const now = performance.now();
      first ??= { at: now, tokens };
      const tps = tokens > first.tokens ? (tokens - first.tokens) / ((now - first.at) / 1000) : null;
      post({ type: 'text', id: msg.id, text, tokens, tokensPerS: tps });
    });
    post({
      type: 'done', id: msg.id, tokens: r.ids.length, prefillMs: r.prefillMs, reason: r.reason, ctx: decoder.ctx,
      tokensPerS: r.decodeSteps > 0 ? r.decodeSteps / (r.decodeMs / 1000) : null,
    });
  } catch (e) {
    post({ type: 'error', id: msg.id, message: e instanceof Error ? e.message || e.name : String(e) });
  } finally {
    if (active?.id === msg.id) active = null;
  }
}

scope.onmessage = (ev: MessageEvent<unknown>) => {
  const parsed = ToGenerateSchema.safeParse(ev.data);
  if (!parsed.success) {
    const id = (ev.data as { id?: unknown } | null)?.id;
    post({ type: 'error', id: typeof id === 'number' ? id : -1, message: `invalid message: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}` });
    return;
  }
  const msg = parsed.data;
  if (msg.type === 'stop') {
    if (active?.id === msg.id) active.abort.abort();
    return;
  }
  if (active) {
    post({ type: 'error', id: msg.id, message: 'a generation is already running' });
    return;
  }
  void generate(msg);
};
