/**
 * The lab's store (zustand vanilla, so workers, tests and non-React code can use it too). Runs are
 * keyed by id and live side by side; `draft` is the next run's config (scheme included).
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import { DEFAULT_RUN_CONFIG, type FromWorker, type RunConfig } from '../worker/protocol';
import { newRun, reduceRun, type RunState } from './runs';

export type GpuSupport =
  | { state: 'checking' }
  | { state: 'available'; adapter: string }
  | { state: 'unavailable'; reason: 'no-api' | 'no-adapter' | 'error'; detail: string };

export interface LabState {
  gpu: GpuSupport;
  /** The form's current values: the config of the next run. */
  draft: RunConfig;
  /** A text file picked for the next run (null = the bundled corpus). */
  draftText: { name: string; text: string } | null;
  runs: Record<string, RunState>;
  runOrder: string[];
  activeRunId: string | null;
  /** Errors outside any run (uncaught exceptions, failed worker launches). */
  appErrors: string[];

  setGpu(gpu: GpuSupport): void;
  setDraft(patch: Partial<RunConfig>): void;
  setDraftText(t: { name: string; text: string } | null): void;
  addRun(config: RunConfig): string;
  applyMessage(msg: FromWorker): void;
  markStopping(runId: string): void;
  markPausing(runId: string): void;
  /** A run continuing from its checkpoint in a new worker. */
  markContinuing(runId: string): void;
  removeRun(runId: string): void;
  /** What the run is doing now, where no worker message says it (saving after the last step). */
  setPhase(runId: string, phase: string): void;
  /** Why the run could not be saved (null: it was saved again). */
  setStorageError(runId: string, message: string | null): void;
  restoreRuns(runs: RunState[]): void;
  selectRun(runId: string): void;
  reportAppError(message: string): void;
  dismissAppErrors(): void;
}

export type LabStore = StoreApi<LabState>;

export function createLabStore(now: () => number = Date.now): LabStore {
  let counter = 0;
  const patchRun = (s: LabState, id: string, patch: Partial<RunState>) => ({ runs: { ...s.runs, [id]: { ...s.runs[id], ...patch } } });
  return createStore<LabState>()((set, get) => ({
    gpu: { state: 'checking' },
    draft: { ...DEFAULT_RUN_CONFIG },
    draftText: null,
    runs: {},
    runOrder: [],
    activeRunId: null,
    appErrors: [],

    setGpu: (gpu) => set({ gpu }),
    setDraft: (patch) => set({ draft: { ...get().draft, ...patch } }),
    setDraftText: (t) => set({ draftText: t, draft: { ...get().draft, dataset: t ? t.name : DEFAULT_RUN_CONFIG.dataset } }),
    addRun: (config) => {
      let id: string;
      do id = `run-${++counter}-${now().toString(36)}`;
      while (id in get().runs);
      set((s) => ({
        runs: { ...s.runs, [id]: newRun(id, config, now()) },
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
      set((s) => patchRun(s, runId, { status: 'starting', phase: 'continuing from the checkpoint', error: null, finishedAt: null }));
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
          runs[r.id] = r;
        }
        return { runs, runOrder: order, activeRunId: s.activeRunId ?? order.at(-1) ?? null };
      }),
    selectRun: (runId) => set({ activeRunId: runId }),
    reportAppError: (message) => set((s) => ({ appErrors: [...s.appErrors, message].slice(-5) })),
    dismissAppErrors: () => set({ appErrors: [] }),
  }));
}
