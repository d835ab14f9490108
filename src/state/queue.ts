/**
 * Runs one after another: with `queueRuns` on, Start while a run trains puts the config in a
 * queue, and the next queued run starts when no run is training (runs sharing one GPU slow each
 * other, so their time and throughput would not compare).
 */
import type { RunConfig } from '../worker/protocol';
import type { LabStore } from './lab';
import type { RunController } from './runner';
import { isActive } from './runs';

const anyActive = (store: LabStore) => Object.values(store.getState().runs).some(isActive);

/** Start pressed: starts the draft now, or queues it behind the run in progress. */
export function submitDraft(store: LabStore, runs: Pick<RunController, 'start'>): void {
  const s = store.getState();
  submitRun(store, runs, s.draft, s.draftText?.text);
}

/** Starts `config` now, or queues it behind the run in progress (a missing baseline the comparison offers, too). */
export function submitRun(store: LabStore, runs: Pick<RunController, 'start'>, config: RunConfig, text?: string): void {
  if (store.getState().queueRuns && anyActive(store)) store.getState().enqueueRun(config, text);
  else runs.start(config, text);
}

/** Starts the first queued run whenever none is training; returns the unsubscribe. */
export function runQueue(store: LabStore, runs: Pick<RunController, 'start'>): () => void {
  let starting = false;
  const tick = () => {
    if (starting || store.getState().queued.length === 0 || anyActive(store)) return;
    starting = true;
    try {
      const next = store.getState().takeQueued();
      if (next) runs.start(next.config, next.text);
    } finally {
      starting = false;
    }
  };
  return store.subscribe(tick);
}
