/**
 * The training worker: hosts one engine run off the main thread, so the page stays responsive
 * while SwiftShader (or a real GPU) grinds. It owns its own GPUDevice (devices cannot be shared
 * between the page and a worker). Stop is cooperative: the flag is checked between steps, since a
 * step in flight is one submitted command buffer that cannot be cancelled anyway.
 */
/// <reference lib="webworker" />
import { acquireGpu, WebGpuUnavailableError } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { countParams } from '../engine/model/config';
import { Trainer, defaultTrainOptions, type TrainOptions } from '../engine/train/trainer';
import { ToWorkerSchema, type ErrorKind, type FromWorker, type RunConfig } from './protocol';

const scope = self as unknown as DedicatedWorkerGlobalScope;
let activeRun: string | null = null;
let stopRequested = false;

function post(msg: FromWorker): void {
  scope.postMessage(msg);
}

function errorKind(e: unknown): ErrorKind {
  if (e instanceof WebGpuUnavailableError) return 'webgpu';
  if (e instanceof Error && e.name === 'DeviceLostError') return 'device-lost';
  return 'error';
}

function describe(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  return String(e);
}

export function trainOptionsFor(c: RunConfig): TrainOptions {
  return defaultTrainOptions(c.preset, {
    steps: c.steps,
    batch: c.batch,
    seq: c.seq,
    lr: c.lr,
    seed: c.seed,
    evalEvery: c.evalEvery,
    evalBatches: c.evalBatches,
  });
}

async function run(runId: string, config: RunConfig, corpusUrl: string): Promise<void> {
  activeRun = runId;
  stopRequested = false;
  let trainer: Trainer | null = null;
  try {
    post({ type: 'status', runId, phase: 'loading corpus' });
    const res = await fetch(corpusUrl);
    if (!res.ok) throw new Error(`could not load the training text ${corpusUrl}: HTTP ${res.status}`);
    const text = await res.text();

    post({ type: 'status', runId, phase: 'acquiring GPU' });
    const gpu = await acquireGpu(scope.navigator.gpu);
    // A validation or out-of-memory error means the step's results are garbage; in a worker it
    // would otherwise only reach the devtools console (headless: nowhere). Fail the run with it.
    gpu.device.addEventListener('uncapturederror', (ev) => {
      const e = (ev as GPUUncapturedErrorEvent).error;
      stopRequested = true;
      post({ type: 'error', runId, kind: 'gpu', message: `GPU error (${e.constructor.name}): ${e.message}` });
    });
    const rt = new Runtime(gpu);

    post({ type: 'status', runId, phase: 'building model' });
    const opts = trainOptionsFor(config);
    trainer = await Trainer.create(rt, opts, text);
    const a = gpu.adapterInfo;
    post({
      type: 'ready',
      runId,
      info: {
        adapter: [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' ') || 'unknown adapter',
        params: countParams(trainer.opts.model),
        vocabSize: trainer.tokenizer.vocabSize,
        memory: trainer.memory(),
      },
    });

    let step = 0;
    for (let i = 0; i < config.steps && !stopRequested; i++) {
      const m = await trainer.trainStep();
      step = m.step;
      post({ type: 'metrics', runId, metrics: { ...m, mem: { ...m.mem } } });
      const last = i === config.steps - 1;
      if (config.evalEvery > 0 && ((i + 1) % config.evalEvery === 0 || last)) {
        post({ type: 'val', runId, step, loss: await trainer.evaluate() });
      }
      if (config.sampleLength > 0 && config.sampleEvery > 0 && (i + 1) % config.sampleEvery === 0 && !last) {
        post({ type: 'sample', runId, step, text: await trainer.sample('\n', config.sampleLength, 0.8, config.seed + step) });
      }
    }
    if (!stopRequested && config.sampleLength > 0) {
      post({ type: 'sample', runId, step, text: await trainer.sample('\n', config.sampleLength, 0.8, config.seed + step) });
    }
    post({ type: 'done', runId, step, reason: stopRequested ? 'stopped' : 'completed' });
  } catch (e) {
    post({ type: 'error', runId, kind: errorKind(e), message: describe(e) });
  } finally {
    trainer?.destroy();
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
  if (msg.type === 'stop') {
    if (msg.runId === activeRun) stopRequested = true;
    return;
  }
  if (activeRun !== null) {
    post({ type: 'error', runId: msg.runId, kind: 'config', message: `this worker is already training run ${activeRun}` });
    return;
  }
  void run(msg.runId, msg.config, msg.corpusUrl);
};

// Anything that escapes the run loop still reaches the page instead of dying silently.
scope.addEventListener('unhandledrejection', (ev: PromiseRejectionEvent) => {
  post({ type: 'error', runId: activeRun ?? '', kind: errorKind(ev.reason), message: describe(ev.reason) });
});
