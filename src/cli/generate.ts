/**
 * npm run generate -- --checkpoint RUN_DIR|CHECKPOINT_DIR | --init HF_DIR --prompt TEXT [options]:
 * prompted generation with a KV cache (engine/model/decode.ts), the text streamed to stdout as it
 * comes, the timings on stderr. Arguments and files are checked before the GPU starts.
 */
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { type Checkpoint, loadCheckpoint } from '../engine/io/checkpoint';
import { mergeLora } from '../engine/lora/merge';
import { DEFAULT_DECODE_CTX, Decoder, defaultDecodeCtx } from '../engine/model/decode';
import { stopReasonText } from '../engine/model/generate';
import { checkSampling, DEFAULT_SAMPLING } from '../engine/model/sampling';
import { streamText } from '../engine/train/generate-text';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import type { Tokenizer } from '../engine/train/tokenizer/tokenizer';
import { CheckpointError, readLatestCheckpoint } from './checkpoint-store';
import { fail, num, parseCliArgs, UsageError } from './common';
import { readInit } from './data';
import { fetchHubInit } from './hub-cache';

const GENERATE_HELP = `usage: npm run generate -- (--checkpoint PATH | --init DIR) --prompt TEXT [options]

  --checkpoint PATH   a run directory of npm run train (its latest checkpoint) or a checkpoint folder
  --init DIR|hf:ID    a Hugging Face model directory (config.json, safetensors, tokenizer.json), or a Hub
                      model id downloaded into the cache first (HF_TOKEN, HF_ENDPOINT as for train)
  --prompt TEXT       the text to continue ('' starts from the end-of-text token)
  --max-tokens N      tokens to generate (default 200; generation also stops at the context length)
  --temperature T     softmax temperature, 0 = greedy (default ${DEFAULT_SAMPLING.temperature})
  --top-k K           sample from the K most likely tokens (default 0 = all)
  --top-p P           sample from the most likely tokens covering P of the probability (default 1 = all)
  --seed N            sampling seed (default 0): the same seed gives the same text
  --ctx N             positions the KV cache holds (default the model's max_position_embeddings, at most ${DEFAULT_DECODE_CTX})
  --cpu               run on SwiftShader (CPU) even when a GPU is present`;

const OPTIONS = {
  checkpoint: { type: 'string' }, init: { type: 'string' }, prompt: { type: 'string' }, 'max-tokens': { type: 'string' },
  temperature: { type: 'string' }, 'top-k': { type: 'string' }, 'top-p': { type: 'string' }, seed: { type: 'string' },
  ctx: { type: 'string' }, cpu: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
} as const;

interface GeneratePlan {
  model: Checkpoint;
  tokenizer: Tokenizer;
  prompt: string;
  maxTokens: number;
  temperature: number;
  topK: number;
  topP: number;
  seed: number;
  ctx: number;
  cpu: boolean;
}

/** --checkpoint PATH: a run directory (its latest committed checkpoint) or any folder holding a checkpoint's files. */
function readCheckpointArg(p: string): Checkpoint {
  if (!existsSync(p)) throw new UsageError(`--checkpoint ${p}: no such file or directory`);
  if (!statSync(p).isDirectory()) throw new UsageError(`--checkpoint ${p}: expects a run directory or a checkpoint folder, not a file`);
  if (existsSync(path.join(p, 'checkpoints'))) {
    try {
      const latest = readLatestCheckpoint(p);
      if (latest) return loadCheckpoint(latest.files);
    } catch (e) {
      throw new UsageError(`--checkpoint ${p}: ${(e as Error).message}`);
    }
    if (!existsSync(path.join(p, 'model.safetensors'))) throw new UsageError(`--checkpoint ${p}: the run has no committed checkpoint yet`);
  }
  return readInit(p, '--checkpoint');
}

/** The checked plan, or null for --help. Every error is a UsageError naming the flag. */
async function parseGenerateArgs(argv: string[]): Promise<GeneratePlan | null> {
  const a = parseCliArgs(argv, OPTIONS);
  if (a.help) return null;
  if ((a.checkpoint === undefined) === (a.init === undefined)) throw new UsageError('give one of --checkpoint PATH or --init DIR (see --help)');
  if (a.prompt === undefined) throw new UsageError('--prompt TEXT is required (\'\' starts from the end-of-text token)');
  const sampling = {
    temperature: num('temperature', a.temperature, { min: 0 }) ?? DEFAULT_SAMPLING.temperature,
    topK: num('top-k', a['top-k'], { int: true, min: 0 }) ?? 0,
    topP: num('top-p', a['top-p']) ?? 1,
  };
  try {
    checkSampling(sampling);
  } catch (e) {
    throw new UsageError(`--top-p: ${(e as Error).message}`);
  }
  const maxTokens = num('max-tokens', a['max-tokens'], { int: true, min: 1 }) ?? 200;
  const seed = num('seed', a.seed, { int: true, min: 0 }) ?? 0;
  const ctxArg = num('ctx', a.ctx, { int: true, min: 1 });
  // hf:ID[@REV]: downloaded into the user's cache first, as train's --init does (cli/hub-cache.ts).
  const initDir = a.init?.startsWith('hf:') ? await fetchHubInit(a.init.slice(3)) : a.init;
  const read = a.checkpoint !== undefined ? readCheckpointArg(a.checkpoint) : readInit(initDir!, initDir === a.init ? '--init' : `--init ${a.init}, downloaded to`);
  // A LoRA run's checkpoint generates as the model it trained: its adapters merged into the base.
  const model = read.adapters ? { ...read, params: mergeLora(read.config, read.adapters.spec, read.params, read.adapters.tensors) } : read;
  const flag = a.checkpoint !== undefined ? `--checkpoint ${a.checkpoint}` : `--init ${a.init}`;
  const json = model.extra?.tokenizer;
  if (!json) throw new UsageError(`${flag}: no tokenizer (lab.json's or a tokenizer.json) to encode the prompt with`);
  let tokenizer: Tokenizer;
  try {
    tokenizer = tokenizerFromJSON(json, model.extra?.tokenizerConfig);
  } catch (e) {
    throw new UsageError(`${flag}: ${(e as Error).message}`);
  }
  const maxCtx = model.config.max_position_embeddings;
  if (ctxArg !== undefined && ctxArg > maxCtx) throw new UsageError(`--ctx ${ctxArg} exceeds the model's max_position_embeddings ${maxCtx}`);
  return { model, tokenizer, prompt: a.prompt, maxTokens, ...sampling, seed, ctx: ctxArg ?? defaultDecodeCtx(model.config), cpu: a.cpu ?? false };
}

async function main(): Promise<number> {
  let p: GeneratePlan | null;
  try {
    p = await parseGenerateArgs(process.argv.slice(2));
  } catch (e) {
    if (e instanceof CheckpointError) throw new UsageError(e.message);
    throw e;
  }
  if (!p) {
    console.log(GENERATE_HELP);
    return 0;
  }
  const gpu = await acquireNodeGpu({ forceSwiftShader: p.cpu });
  const rt = new Runtime(gpu);
  const decoder = await rt.checked('building the decoder', () => Decoder.withParams(rt, p.model.config, p.model.params, p.ctx));
  process.stdout.write(p.prompt);
  const r = await streamText(decoder, p.tokenizer, p.prompt, p, (t) => process.stdout.write(t));
  process.stdout.write('\n');
  const tps = r.decodeSteps > 0 ? (r.decodeSteps / (r.decodeMs / 1000)).toFixed(1) : '-';
  console.error(`${r.ids.length} tokens (${stopReasonText(r.reason, p.ctx)}); prefill ${r.prefillMs.toFixed(1)} ms, decode ${tps} tokens/s`);
  decoder.destroy();
  rt.destroy();
  return 0;
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then((code) => {
  clearInterval(keepAlive);
  process.exit(code);
}, fail);
