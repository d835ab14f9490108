/** The run form's "Checkpoint every" field: the run spec's cadence.checkpointEvery, refused in words below 1 or fractional. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_CHECKPOINT_EVERY } from '../../src/engine/run/spec';
import { runConfigProblem } from '../../src/state/explain';
import { createLabStore } from '../../src/state/lab';
import { DEFAULT_RUN_CONFIG, RunConfigSchema, runSpecOfConfig } from '../../src/worker/protocol';

describe('checkpoint every N steps in the run form', () => {
  it('shows the run spec default and carries the chosen value into the spec', () => {
    expect(createLabStore().getState().draft.checkpointEvery).toBe(DEFAULT_CHECKPOINT_EVERY);
    expect(runSpecOfConfig(DEFAULT_RUN_CONFIG).cadence.checkpointEvery).toBe(DEFAULT_CHECKPOINT_EVERY);
    expect(runSpecOfConfig({ ...DEFAULT_RUN_CONFIG, checkpointEvery: 1 }).cadence.checkpointEvery).toBe(1);
    // A run stored before the field existed still parses and gets the default.
    const { checkpointEvery: _, ...old } = DEFAULT_RUN_CONFIG;
    expect(runSpecOfConfig(RunConfigSchema.parse(old)).cadence.checkpointEvery).toBe(DEFAULT_CHECKPOINT_EVERY);
  });

  it('refuses 0, negative and fractional values with the bound and an example', () => {
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, checkpointEvery: 1 })).toBeNull();
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, checkpointEvery: 0 })).toBe(`checkpointEvery: must be at least 1; e.g. ${DEFAULT_CHECKPOINT_EVERY}`);
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, checkpointEvery: -5 })).toBe(`checkpointEvery: must be at least 1; e.g. ${DEFAULT_CHECKPOINT_EVERY}`);
    expect(runConfigProblem({ ...DEFAULT_RUN_CONFIG, checkpointEvery: 2.5 })).toBe(`checkpointEvery: expected a whole number, got a number (2.5); e.g. ${DEFAULT_CHECKPOINT_EVERY}`);
  });
});
