/**
 * Ctrl-C and SIGTERM for a long run: the first asks the loop to stop after the step in flight (its
 * checkpoint is then written); a second quits at once, after `restore` (the terminal: progress bar
 * stopped, cursor shown, line wrap on). Exit status 130 either way.
 */
export const INTERRUPTED_EXIT = 130;

export interface Interrupt {
  requested(): boolean;
  /** Removes the handlers (the run is over). */
  dispose(): void;
}

export function interruptOnSignals(restore: () => void, what = 'the current step'): Interrupt {
  let count = 0;
  const handler = (sig: NodeJS.Signals) => {
    count++;
    if (count === 1) {
      console.error(`\n${sig}: stopping after ${what} and saving a checkpoint (again to quit without it)`);
      return;
    }
    restore();
    console.error(`${sig}: quitting without a checkpoint of the step in flight`);
    process.exit(INTERRUPTED_EXIT);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return {
    requested: () => count > 0,
    dispose: () => {
      process.off('SIGINT', handler);
      process.off('SIGTERM', handler);
    },
  };
}
