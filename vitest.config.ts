import { readFileSync } from 'node:fs';
import { relative } from 'node:path';
import { defineConfig } from 'vitest/config';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

// Seconds per file from a full run (regenerate from test-results/vitest.json after big changes).
// CI starts without Vitest's duration cache, so without this the files would go longest-on-disk
// first and a long GPU file could start last and leave the other fork idle at the end.
const durations: Record<string, number> = JSON.parse(readFileSync(new URL('./tests/durations.json', import.meta.url), 'utf8'));

/** Longest files first (files not in the table, i.e. new ones, before all), so both forks finish together. */
class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const base = await super.sort(files);
    const secs = (f: TestSpecification) => durations[relative(f.project.config.root, f.moduleId).split('\\').join('/')] ?? Infinity;
    return base.map((f, i) => ({ f, i, s: secs(f) })).sort((a, b) => (b.s - a.s) || (a.i - b.i)).map((x) => x.f);
  }
}

export default defineConfig({
  test: {
    include: ['tests/**/*.test.ts', 'src/**/*.test.ts'],
    exclude: ['tests/e2e/**', 'node_modules/**'],
    // Dawn + SwiftShader use the CPU; two forks match the 2-core CI machine.
    pool: 'forks',
    maxWorkers: 2,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    sequence: { sequencer: LongestFirst },
  },
});
