/**
 * The bench worker: runs the suites of `npm run bench` (src/lab/suites.ts runSuite, the same
 * function the CLI calls) off the main thread, on its own GPUDevice, streaming each row as it is
 * measured. One worker per run; Stop terminates it. A suite that fails (an exception, a GPU
 * validation error, a lost device) is reported as that suite's error and the next suite still
 * runs, on a fresh device when the old one was lost.
 */
/// <reference lib="webworker" />
import { acquireGpu, DeviceLostError, type Gpu, WebGpuUnavailableError } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { enableI8TensorCores, type I8TcProbe } from '../engine/kernels/qgemm/tc';
import { gpuReport, runSuite, type SuitePlan } from '../lab/suites';
import { type BenchErrorKind, type BenchRequest, type FromBenchWorker, suitePlan, ToBenchWorkerSchema } from './protocol';

const scope = self as unknown as DedicatedWorkerGlobalScope;
let started = false;
// The suites write their diagnostics with console.error, the CLI's stderr (stdout is its JSON);
// in the page they are information, not errors: failures come back as messages.
console.error = (...args: unknown[]) => console.info(...args);

function post(msg: FromBenchWorker): void {
  scope.postMessage(msg);
}

function describe(e: unknown): string {
  if (e instanceof Error) return e.message || e.name;
  return String(e);
}

function errorKind(e: unknown): BenchErrorKind {
  if (e instanceof WebGpuUnavailableError) return 'webgpu';
  if (e instanceof DeviceLostError) return 'device-lost';
  return 'error';
}

/** A device and its runtime, with the first GPU error raised on it since the last `takeError`. */
interface Session {
  gpu: Gpu;
  rt: Runtime;
  tensorCores?: I8TcProbe;
  takeError(): string | null;
}

async function openSession(): Promise<Session> {
  const gpu = await acquireGpu(scope.navigator.gpu);
  let error: string | null = null;
  // Validation and out-of-memory errors would otherwise reach only the console: the suite's figures are then garbage.
  gpu.device.addEventListener('uncapturederror', (ev) => {
    const e = (ev as GPUUncapturedErrorEvent).error;
    error ??= `GPU error (${e.constructor.name}): ${e.message}`;
  });
  const rt = new Runtime(gpu);
  return {
    gpu,
    rt,
    // As the CLI: INT8 GEMMs on subgroup matrices where the device has them and they check out exactly.
    tensorCores: gpu.features.subgroupMatrix ? await enableI8TensorCores(rt) : undefined,
    takeError: () => {
      const e = error;
      error = null;
      return e;
    },
  };
}

async function run(request: BenchRequest): Promise<void> {
  let plan: SuitePlan;
  try {
    plan = suitePlan(request);
  } catch (e) {
    post({ type: 'error', kind: 'config', message: describe(e) });
    return;
  }
  let session: Session;
  try {
    session = await openSession();
  } catch (e) {
    post({ type: 'error', kind: errorKind(e), message: describe(e) });
    return;
  }
  post({ type: 'gpu', report: gpuReport(session.gpu, session.tensorCores) });
  for (const suite of request.suites) {
    post({ type: 'suite', suite, status: 'running' });
    try {
      if (session.gpu.lostMessage) {
        session.rt.destroy();
        session = await openSession();
      }
      session.takeError();
      await runSuite(session.rt, suite, plan, (row) => post({ type: 'row', row }));
      // A lost device may surface only as zeros or a resolved wait; say so rather than report its figures as good.
      if (session.gpu.lostMessage) throw new DeviceLostError(session.gpu.lostMessage);
      const gpuError = session.takeError();
      if (gpuError) throw new Error(gpuError);
      post({ type: 'suite', suite, status: 'done' });
    } catch (e) {
      post({ type: 'suite', suite, status: 'error', kind: session.gpu.lostMessage ? 'device-lost' : errorKind(e), message: describe(e) });
    }
  }
  session.rt.destroy();
  post({ type: 'done' });
}

scope.onmessage = (ev: MessageEvent<unknown>) => {
  const parsed = ToBenchWorkerSchema.safeParse(ev.data);
  if (!parsed.success) {
    const message = parsed.error.issues.map((i) => `${i.path.join('.') || 'message'}: ${i.message}`).join('; ');
    post({ type: 'error', kind: 'config', message: `invalid request: ${message}` });
    return;
  }
  if (started) {
    post({ type: 'error', kind: 'config', message: 'this bench worker is already running' });
    return;
  }
  started = true;
  void run(parsed.data.request);
};

// Anything that escapes the run still reaches the page instead of leaving it waiting.
scope.addEventListener('unhandledrejection', (ev: PromiseRejectionEvent) => {
  post({ type: 'error', kind: errorKind(ev.reason), message: describe(ev.reason) });
});
