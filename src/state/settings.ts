/**
 * The lab's settings that outlive a reload: the comparison's baseline and "one run at a time". Kept
 * in localStorage (small, synchronous, read before the first render) under one key; a value the page
 * does not know (older or newer page, hand-edited) falls back to its default, and storage failing
 * (private mode, quota) only costs persistence.
 */
import { type BaselineChoice, isBaselineChoice } from './baseline';
import type { LabStore } from './lab';

export const SETTINGS_KEY = 'webgpu-lab.settings';

export interface LabSettings {
  baseline: BaselineChoice;
  queueRuns: boolean;
}

export const DEFAULT_SETTINGS: LabSettings = { baseline: 'auto', queueRuns: false };

type Storage = Pick<globalThis.Storage, 'getItem' | 'setItem'>;

/** The stored settings, each field checked alone (one bad field keeps the others). */
export function readSettings(storage: Storage | null | undefined): LabSettings {
  let raw: unknown;
  try {
    raw = JSON.parse(storage?.getItem(SETTINGS_KEY) ?? 'null');
  } catch {
    return { ...DEFAULT_SETTINGS };
  }
  const o = raw && typeof raw === 'object' ? (raw as Record<string, unknown>) : {};
  return {
    baseline: isBaselineChoice(o.baseline) ? o.baseline : DEFAULT_SETTINGS.baseline,
    queueRuns: typeof o.queueRuns === 'boolean' ? o.queueRuns : DEFAULT_SETTINGS.queueRuns,
  };
}

/** Loads the stored settings into the store, then saves them whenever they change; returns the unsubscribe. */
export function persistSettings(store: LabStore, storage: Storage | null | undefined, onError?: (message: string) => void): () => void {
  const s = readSettings(storage);
  store.getState().setBaseline(s.baseline);
  store.getState().setQueueRuns(s.queueRuns);
  let saved = JSON.stringify(s);
  let reported = false;
  return store.subscribe((st) => {
    const next = JSON.stringify({ baseline: st.baseline, queueRuns: st.queueRuns } satisfies LabSettings);
    if (next === saved) return;
    saved = next;
    try {
      storage?.setItem(SETTINGS_KEY, next);
    } catch (e) {
      if (!reported) onError?.(`Lab settings will not survive a reload: ${(e as Error).message}`);
      reported = true;
    }
  });
}
