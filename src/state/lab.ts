/**
 * The lab's store (zustand vanilla, so workers, tests and non-React code can use it too). Runs are
 * keyed by id and live side by side; `draft` is the next run's config (scheme included).
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import { DEFAULT_RUN_CONFIG, type FromWorker, type RunConfig } from '../worker/protocol';
import type { BaselineChoice } from './baseline';
import { uniqueLabel } from './compare';
import type { AdapterLimits } from './preflight';
import { newRun, reduceRun, type RunState } from './runs';

export type GpuSupport =
  | { state: 'checking' }
  /**
   * i8TensorCores: the adapter offers the INT8 tensor-core path (the GEMM paths shown follow it);
   * shaderF16: it offers shader-f16, so f16 runs are mixed precision (the comparison's default baseline).
   */
  | { state: 'available'; adapter: string; limits?: AdapterLimits; i8TensorCores?: boolean; shaderF16?: boolean }
  | { state: 'unavailable'; reason: 'no-api' | 'no-adapter' | 'error'; detail: string };

export interface LabState {
  gpu: GpuSupport;
  /** The form's current values: the config of the next run. */
  draft: RunConfig;
  /** A text file picked for the next run (null = the bundled corpus). */
  draftText: { name: string; text: string } | null;
  /** What is wrong with a field of the form that the draft cannot hold (the custom model JSON): the draft is then stale. */
  draftProblem: string | null;
  runs: Record<string, RunState>;
  runOrder: string[];
  activeRunId: string | null;
  /** Errors outside any run (uncaught exceptions, failed worker launches). */
  appErrors: string[];
  /** Start each new run only when no other is training, so time and throughput compare fairly. */
  queueRuns: boolean;
  /** Runs waiting for their turn (see queue.ts). */
  queued: QueuedRun[];
  /** The run every other is compared against: fp32, f16 mixed precision, or auto (f16 where the device has shader-f16); a lab setting (settings.ts). */
  baseline: BaselineChoice;

  setGpu(gpu: GpuSupport): void;
  setQueueRuns(on: boolean): void;
  setBaseline(choice: BaselineChoice): void;
  enqueueRun(config: RunConfig, text?: string): void;
  /** Takes a queued run out (the first one if no key): to start it, or because the user dropped it. */
  takeQueued(key?: string): QueuedRun | undefined;
  setDraft(patch: Partial<RunConfig>): void;
  setDraftText(t: { name: string; text: string } | null): void;
  setDraftProblem(problem: string | null): void;
  addRun(config: RunConfig): string;
  applyMessage(msg: FromWorker): void;
  markStopping(runId: string): void;
  markPausing(runId: string): void;
  /** A run continuing from its checkpoint in a new worker. */
  markContinuing(runId: string): void;
  removeRun(runId: string): void;
  /** A new label for a run; trimmed, and made unique like a new run's (empty: unchanged). */
  renameRun(runId: string, label: string): void;
  /** What the run is doing now, where no worker message says it (saving after the last step). */
  setPhase(runId: string, phase: string): void;
  /** Why the run could not be saved (null: it was saved again). */
  setStorageError(runId: string, message: string | null): void;
  restoreRuns(runs: RunState[]): void;
  selectRun(runId: string): void;
  reportAppError(message: string): void;
  dismissAppErrors(): void;
}

export interface QueuedRun {
  key: string;
  config: RunConfig;
  text?: string;
}

export type LabStore = StoreApi<LabState>;

function withUniqueLabel(run: RunState, runs: Record<string, RunState>): RunState {
  return { ...run, label: uniqueLabel(run.label, Object.values(runs).map((r) => r.label)) };
}

export function createLabStore(now: () => number = Date.now): LabStore {
  let counter = 0;
  const patchRun = (s: LabState, id: string, patch: Partial<RunState>) => ({ runs: { ...s.runs, [id]: { ...s.runs[id], ...patch } } });
  return createStore<LabState>()((set, get) => ({
    gpu: { state: 'checking' },
    draft: { ...DEFAULT_RUN_CONFIG },
    draftText: null,
    draftProblem: null,
    runs: {},
    runOrder: [],
    activeRunId: null,
    appErrors: [],
    queueRuns: false,
    queued: [],
    baseline: 'auto',

    setGpu: (gpu) => set({ gpu }),
    setQueueRuns: (on) => set({ queueRuns: on }),
    setBaseline: (choice) => set({ baseline: choice }),
    enqueueRun: (config, text) => set((s) => ({ queued: [...s.queued, { key: `q-${++counter}`, config, text }] })),
    takeQueued: (key) => {
      const q = get().queued;
      const item = key === undefined ? q[0] : q.find((x) => x.key === key);
      if (item) set({ queued: q.filter((x) => x !== item) });
      return item;
    },
    setDraft: (patch) => set({ draft: { ...get().draft, ...patch } }),
    setDraftProblem: (problem) => set({ draftProblem: problem }),
    setDraftText: (t) => set({ draftText: t, draft: { ...get().draft, dataset: t ? t.name : DEFAULT_RUN_CONFIG.dataset } }),
    addRun: (config) => {
      let id: string;
      do id = `run-${++counter}-${now().toString(36)}`;
      while (id in get().runs);
      set((s) => ({
        runs: { ...s.runs, [id]: withUniqueLabel(newRun(id, config, now()), s.runs) },
        runOrder: [...s.runOrder, id],
        activeRunId: id,
      }));
      return id;
    },
    applyMessage: (msg) => {
      const run = get().runs[msg.runId];
      if (!run) return;
      const next = reduceRun(run, msg, now());
      if (next !== run) set((s) => ({ runs: { ...s.runs, [run.id]: next } }));
    },
    markStopping: (runId) => {
      const run = get().runs[runId];
      if (!run || !['running', 'starting', 'pausing', 'paused'].includes(run.status)) return;
      set((s) => patchRun(s, runId, { status: 'stopping', phase: 'stopping after this step' }));
    },
    markPausing: (runId) => {
      const run = get().runs[runId];
      if (!run || run.status !== 'running') return;
      set((s) => patchRun(s, runId, { status: 'pausing', phase: 'pausing after this step' }));
    },
    markContinuing: (runId) => {
      const run = get().runs[runId];
      if (!run) return;
      const t = now();
      // A new span: the time it lay interrupted is not time it shared the GPU.
      const spans = [...(run.spans ?? [{ from: run.startedAt, to: run.finishedAt ?? run.startedAt }]), { from: t, to: t }];
      set((s) => patchRun(s, runId, { status: 'starting', phase: 'continuing from the checkpoint', error: null, finishedAt: null, spans }));
    },
    renameRun: (runId, label) => {
      const run = get().runs[runId];
      const wanted = label.trim().slice(0, 120);
      if (!run || !wanted || wanted === run.label) return;
      set((s) => patchRun(s, runId, { label: uniqueLabel(wanted, Object.values(s.runs).filter((r) => r.id !== runId).map((r) => r.label)) }));
    },
    setPhase: (runId, phase) => {
      const run = get().runs[runId];
      if (run && run.phase !== phase) set((s) => patchRun(s, runId, { phase }));
    },
    setStorageError: (runId, message) => {
      const run = get().runs[runId];
      if (run && (run.storageError ?? null) !== message) set((s) => patchRun(s, runId, { storageError: message }));
    },
    removeRun: (runId) =>
      set((s) => {
        const { [runId]: _gone, ...runs } = s.runs;
        const runOrder = s.runOrder.filter((id) => id !== runId);
        return { runs, runOrder, activeRunId: s.activeRunId === runId ? (runOrder.at(-1) ?? null) : s.activeRunId };
      }),
    restoreRuns: (restored) =>
      set((s) => {
        const runs = { ...s.runs };
        const order = [...s.runOrder];
        for (const r of restored) {
          if (!(r.id in runs)) order.push(r.id);
          // Runs saved before labels were unique get a suffix, so no two read the same.
          const { [r.id]: _self, ...others } = runs;
          runs[r.id] = withUniqueLabel(r, others);
        }
        return { runs, runOrder: order, activeRunId: s.activeRunId ?? order.at(-1) ?? null };
      }),
    selectRun: (runId) => set({ activeRunId: runId }),
    reportAppError: (message) => set((s) => ({ appErrors: [...s.appErrors, message].slice(-5) })),
    dismissAppErrors: () => set({ appErrors: [] }),
  }));
}
