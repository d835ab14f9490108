/**
 * The training worker: hosts one engine run off the main thread, so the page stays responsive
 * while SwiftShader (or a real GPU) grinds. It owns its own GPUDevice (devices cannot be shared
 * between the page and a worker). Stop and pause are cooperative: the flags are checked between
 * steps, since a step in flight is one submitted command buffer that cannot be cancelled anyway.
 * Pause keeps the trainer (and its GPU state) alive and waits; a checkpoint is posted on pause, on
 * stop, at the end and every spec.cadence.checkpointEvery steps, so the page can persist it and resume
 * after a reload. The cadence is the run spec's (cadenceOf) run by the engine's training loop
 * (runTraining); this file only turns it into messages.
 */
/// <reference lib="webworker" />
import { acquireGpu, WebGpuUnavailableError } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { loadCheckpoint } from '../engine/io/checkpoint';
import { countParams } from '../engine/model/config';
import { gemmPathSummary } from '../engine/model/int8-gemms';
import { tokenizerFromJSON } from '../engine/train/tokenizer/hf-tokenizer';
import { bitsAndWire } from '../engine/train/probe-bits';
import { runTraining } from '../engine/train/loop';
import { newlinePrompt } from '../engine/train/tokenizer/tokenizer';
import { StreamDataset } from '../engine/train/data/token-stream';
import type { Trainer, TrainerInit } from '../engine/train/trainer';
import { createParallelTrainer } from '../parallel/factory';
import { adapterKeyOf, applySharedForTraining, resetRunChoices, runTuningStatus } from '../engine/tune';
import { loadTuneCacheIdb, saveTuneCacheIdb } from '../engine/tune/idb';
import { checkpointOfFiles, initOfImport, initOfResume } from './checkpoint-files';
import { OpfsTokenCache } from './token-cache';
import { cadenceOf, trainOptionsOf } from '../engine/run/spec';
import { runSpecOfConfig, ToWorkerSchema, type CheckpointBlob, type ErrorKind, type FromWorker, type ToWorker } from './protocol';

const scope = self as unknown as DedicatedWorkerGlobalScope;
let activeRun: string | null = null;
let stopRequested = false;
let pauseRequested = false;
let wake: (() => void) | null = null;

function post(msg: FromWorker): void {
  scope.postMessage(msg);
}

function errorKind(e: unknown): ErrorKind {
  if (e instanceof WebGpuUnavailableError) return 'webgpu';
  if (e instanceof Error && e.name === 'DeviceLostError') return 'device-lost';
  if (e instanceof Error && /out of memory|GPUOutOfMemoryError/i.test(`${e.name} ${e.message}`)) return 'oom';
  return 'error';
}

function describe(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  return String(e);
}

async function run(msg: Extract<ToWorker, { type: 'start' }>): Promise<void> {
  const { runId, config } = msg;
  activeRun = runId;
  stopRequested = false;
  pauseRequested = false;
  let trainer: Trainer | null = null;
  let closeData = () => {};
  try {
    const spec = runSpecOfConfig(config);
    let text = msg.text;
    let init: TrainerInit = {};
    if (config.data) {
      // Prepared data: batches read from the token cache, the corpus never whole in memory.
      post({ type: 'status', runId, phase: 'opening the prepared data' });
      const opened = await new OpfsTokenCache().open(config.data.key);
      closeData = opened.close;
      init = { tokenizer: tokenizerFromJSON(opened.meta.tokenizerJSON), data: new StreamDataset(opened.stores, config.seed) };
      text = '';
    } else if (text === undefined) {
      if (!msg.corpusUrl) throw new Error('no training text: neither a file nor a corpus URL was given');
      post({ type: 'status', runId, phase: 'loading corpus' });
      const res = await fetch(msg.corpusUrl);
      if (!res.ok) throw new Error(`could not load the training text ${msg.corpusUrl}: HTTP ${res.status}`);
      text = await res.text();
    }

    if (msg.init && !msg.resume) {
      post({ type: 'status', runId, phase: 'reading the imported checkpoint' });
      init = { ...init, ...initOfImport(await checkpointOfFiles(msg.init as File[]), config.lora) };
    }
    if (msg.resume) {
      post({ type: 'status', runId, phase: 'reading checkpoint' });
      const ck = loadCheckpoint(msg.resume.files);
      init = {
        ...init,
        // A LoRA run's: the frozen base, its adapters and their moments.
        ...initOfResume(ck),
        tokenizer: ck.extra?.tokenizer ? tokenizerFromJSON(ck.extra.tokenizer, ck.extra.tokenizerConfig) : init.tokenizer,
      };
    }

    post({ type: 'status', runId, phase: 'acquiring GPU' });
    const gpu = await acquireGpu(scope.navigator.gpu);
    // A validation or out-of-memory error means the step's results are garbage; in a worker it
    // would otherwise only reach the devtools console (headless: nowhere). Fail the run with it.
    gpu.device.addEventListener('uncapturederror', (ev) => {
      const e = (ev as GPUUncapturedErrorEvent).error;
      stopRequested = true;
      wake?.();
      const oom = e.constructor.name === 'GPUOutOfMemoryError';
      post({ type: 'error', runId, kind: oom ? 'oom' : 'gpu', message: oom ? `out of GPU memory: ${e.message}` : `GPU error (${e.constructor.name}): ${e.message}` });
    });
    const rt = new Runtime(gpu);

    post({ type: 'status', runId, phase: 'compiling GPU pipelines' });
    // Compiling takes minutes on a software GPU: say how many pipelines are in the works and how many
    // are ready. The GPU process compiles in submission order, so the queue's done-promise after a
    // pipeline's creation resolves once that pipeline is compiled. Posted from a microtask, batched.
    let pending = false;
    let ready = 0;
    const compiling = () => {
      if (pending) return;
      pending = true;
      queueMicrotask(() => {
        pending = false;
        if (ready < rt.pipelines.size) post({ type: 'status', runId, phase: `compiling ${rt.pipelines.size} GPU pipelines, ${ready} ready` });
      });
    };
    rt.pipelines.onCreate = () => {
      compiling();
      void gpu.device.queue.onSubmittedWorkDone().then(() => {
        ready++;
        compiling();
      }, () => {});
    };
    // The tuning cache in IndexedDB (the bench page's "Tune this GPU") applies to this adapter's kernel choices.
    const tuneCache = await loadTuneCacheIdb();
    tuneCache.cache.applyTo(rt.device, adapterKeyOf(gpu.adapterInfo));
    // Picks a group member shared (state/group) are checked on this device first; one that fails is dropped from the cache.
    const shared = await applySharedForTraining(rt, trainOptionsOf(spec), tuneCache.cache);
    if (shared.failed.length && !tuneCache.problem) await saveTuneCacheIdb(tuneCache.cache).catch(() => {});
    resetRunChoices(rt);
    try {
      trainer = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts: trainOptionsOf(spec), text, init });
    } finally {
      rt.pipelines.onCreate = null;
    }
    const a = gpu.adapterInfo;
    const startStep = trainer.stepIndex;
    post({
      type: 'ready',
      runId,
      startStep,
      info: {
        adapter: [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' ') || 'unknown adapter',
        params: countParams(trainer.opts.model),
        vocabSize: trainer.tokenizer.vocabSize,
        memory: trainer.memory(),
        accounting: bitsAndWire(trainer.plan.model),
        gemmPaths: gemmPathSummary(trainer.computePaths()),
        tuning: (({ status, label }) => ({ status, label }))(runTuningStatus(rt)),
      },
    });

    // Training time excluding pauses, continued from the checkpoint's.
    let elapsed = msg.resume?.elapsed_s ?? 0;
    let lastStepS = 0;
    const result = await runTraining(trainer, cadenceOf(spec, { resumed: msg.resume !== undefined, prompt: newlinePrompt(trainer.tokenizer) }), {
      // On a slow device (SwiftShader: seconds per step) say which step is in flight.
      // The first step also compiles what only training uses (backward kernels): said, not a bare "training".
      beforeStep: (s) => {
        if (s === startStep) post({ type: 'status', runId, phase: `training: step ${s + 1} / ${config.steps} in flight (the first also compiles the backward pass)` });
        else if (lastStepS > 2) post({ type: 'status', runId, phase: `training: step ${s + 1} / ${config.steps} in flight (last took ${lastStepS.toFixed(1)} s)` });
      },
      onPhase: (p) => {
        if (p !== 'done' && p !== 'paused') post({ type: 'status', runId, phase: p === 'saving checkpoint' ? 'saving the checkpoint' : p });
      },
      onStep: (m, seconds) => {
        lastStepS = seconds;
        elapsed += seconds;
        post({ type: 'metrics', runId, metrics: { ...m, mem: { ...m.mem }, elapsed_s: elapsed } });
      },
      onEval: (step, loss) => post({ type: 'val', runId, step, loss }),
      onQuantErrors: (step, errors) => post({ type: 'quant', runId, step, errors }),
      onSample: (step, text) => post({ type: 'sample', runId, step, text }),
      // Copied, not transferred: the file bytes may be views sharing one buffer.
      onCheckpoint: (step, files) => post({ type: 'checkpoint', runId, step, files: files as unknown as CheckpointBlob }),
      onPaused: (step) => post({ type: 'paused', runId, step }),
      onResumed: () => post({ type: 'resumed', runId }),
    }, {
      stopRequested: () => stopRequested,
      pauseRequested: () => pauseRequested,
      whilePaused: () => new Promise<void>((r) => (wake = () => {
        wake = null;
        r();
      })),
    });
    post({ type: 'done', runId, step: result.lastStep, reason: stopRequested ? 'stopped' : 'completed' });
  } catch (e) {
    post({ type: 'error', runId, kind: errorKind(e), message: describe(e) });
  } finally {
    trainer?.destroy();
    closeData();
    activeRun = null;
  }
}

scope.onmessage = (ev: MessageEvent<unknown>) => {
  const parsed = ToWorkerSchema.safeParse(ev.data);
  if (!parsed.success) {
    const runId = (ev.data as { runId?: unknown } | null)?.runId;
    const message = parsed.error.issues.map((i) => `${i.path.join('.') || 'message'}: ${i.message}`).join('; ');
    post({ type: 'error', runId: typeof runId === 'string' ? runId : '', kind: 'config', message: `invalid message: ${message}` });
    return;
  }
  const msg = parsed.data;
  if (msg.type !== 'start') {
    if (msg.runId !== activeRun) return;
    if (msg.type === 'stop') stopRequested = true;
    if (msg.type === 'pause') pauseRequested = true;
    if (msg.type === 'resume') pauseRequested = false;
    if (msg.type !== 'pause') wake?.();
    return;
  }
  if (activeRun !== null) {
    post({ type: 'error', runId: msg.runId, kind: 'config', message: `this worker is already training run ${activeRun}` });
    return;
  }
  void run(msg);
};

// Anything that escapes the run loop still reaches the page instead of dying silently.
scope.addEventListener('unhandledrejection', (ev: PromiseRejectionEvent) => {
  post({ type: 'error', runId: activeRun ?? '', kind: errorKind(ev.reason), message: describe(ev.reason) });
});
