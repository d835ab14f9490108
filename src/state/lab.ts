/**
 * The lab's store (zustand vanilla, so workers, tests and non-React code can use it too). Runs are
 * keyed by id so that several can live side by side; the page shows the active one for now.
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
  runs: Record<string, RunState>;
  runOrder: string[];
  activeRunId: string | null;
  /** Errors outside any run (uncaught exceptions, failed worker launches). */
  appErrors: string[];

  setGpu(gpu: GpuSupport): void;
  setDraft(patch: Partial<RunConfig>): void;
  addRun(config: RunConfig): string;
  applyMessage(msg: FromWorker): void;
  markStopping(runId: string): void;
  selectRun(runId: string): void;
  reportAppError(message: string): void;
  dismissAppErrors(): void;
}

export type LabStore = StoreApi<LabState>;

export function createLabStore(now: () => number = Date.now): LabStore {
  let counter = 0;
  return createStore<LabState>()((set, get) => ({
    gpu: { state: 'checking' },
    draft: { ...DEFAULT_RUN_CONFIG },
    runs: {},
    runOrder: [],
    activeRunId: null,
    appErrors: [],

    setGpu: (gpu) => set({ gpu }),
    setDraft: (patch) => set({ draft: { ...get().draft, ...patch } }),
    addRun: (config) => {
      const id = `run-${++counter}-${now().toString(36)}`;
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
      if (!run || (run.status !== 'running' && run.status !== 'starting')) return;
      set((s) => ({ runs: { ...s.runs, [runId]: { ...run, status: 'stopping', phase: 'stopping after this step' } } }));
    },
    selectRun: (runId) => set({ activeRunId: runId }),
    reportAppError: (message) => set((s) => ({ appErrors: [...s.appErrors, message].slice(-5) })),
    dismissAppErrors: () => set({ appErrors: [] }),
  }));
}
