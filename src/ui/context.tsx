import { createContext, useContext } from 'react';
import { useStore } from 'zustand';
import type { LabState, LabStore } from '../state/lab';
import type { DataController } from '../state/data-prep';
import type { RunController } from '../state/runner';

export interface Lab {
  store: LabStore;
  runs: RunController;
  data: DataController;
}

export const LabContext = createContext<Lab | null>(null);

export function useLabApi(): Lab {
  const lab = useContext(LabContext);
  if (!lab) throw new Error('LabContext is missing: render inside <LabContext.Provider>');
  return lab;
}

/** Subscribes to a slice of the store; selectors must return stable references (no new objects). */
export function useLab<T>(selector: (s: LabState) => T): T {
  return useStore(useLabApi().store, selector);
}
