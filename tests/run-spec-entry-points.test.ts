/**
 * Every entry point trains on one cadence definition: the run spec's (cadenceOf). Statically, each
 * runTraining call in src/ takes cadenceOf(...) as its cadence; and the specs the page's form, the
 * group panel and `npm run train` build give the cadence their settings say (the headless peer's
 * run is in tests/cli/peer.test.ts: it cannot be imported, being a script).
 */
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { parseTrainArgs } from '../src/cli/train-options';
import { cadenceOf, DEFAULT_CHECKPOINT_EVERY } from '../src/engine/run/spec';
import { DEFAULT_GROUP_CONFIG, groupRunSpec } from '../src/state/group/config';
import { DEFAULT_RUN_CONFIG, runSpecOfConfig } from '../src/worker/protocol';
import { ROOT } from './helpers/bundle';

const sources = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
  const p = path.join(dir, e.name);
  return e.isDirectory() ? sources(p) : /\.tsx?$/.test(e.name) ? [p] : [];
});

describe('one cadence for every entry point', () => {
  it('every runTraining call takes cadenceOf(spec)', () => {
    const calls: [string, string][] = [];
    for (const f of sources(path.join(ROOT, 'src'))) {
      const text = readFileSync(f, 'utf8');
      for (const m of text.matchAll(/\brunTraining(?:<[^>]*>)?\(\s*[\w.]+,\s*([\w.]+)\(/g)) calls.push([path.relative(ROOT, f), m[1]]);
      // A call whose cadence is not a call at all (an object literal) is one this test must not miss.
      for (const m of text.matchAll(/\brunTraining(?:<[^>]*>)?\(\s*[\w.]+,\s*([^\w\s])/g)) calls.push([path.relative(ROOT, f), m[1]]);
    }
    const files = [...new Set(calls.map(([f]) => f))].sort();
    expect(files).toEqual(expect.arrayContaining(['src/cli/peer.ts', 'src/cli/train.ts', 'src/state/group/training.ts', 'src/worker/train.worker.ts']));
    for (const [f, cadence] of calls) expect(cadence, f).toBe('cadenceOf');
  });

  it("the page's form: the worker checkpoints on the spec's checkpointEvery, not on evalEvery", () => {
    const c = { ...DEFAULT_RUN_CONFIG, evalEvery: 10, sampleEvery: 5, sampleLength: 20 };
    const cadence = cadenceOf(runSpecOfConfig(c), { prompt: '\n' });
    expect(cadence).toMatchObject({ steps: 200, evalEvery: 10, checkpointEvery: DEFAULT_CHECKPOINT_EVERY, checkpointAtEnd: true });
    expect(cadence.sample).toMatchObject({ every: 5, length: 20, atEnd: true });
    expect(cadenceOf(runSpecOfConfig({ ...c, checkpointEvery: 7 })).checkpointEvery).toBe(7);
  });

  it('the group panel: periodic checkpoints like every run, no evaluation, the strategy of the mode', () => {
    const spec = groupRunSpec({ ...DEFAULT_GROUP_CONFIG, steps: 300 }, 3);
    expect(spec.strategy).toEqual({ kind: 'dp', wire: 'int8' });
    expect(cadenceOf(spec)).toEqual({ steps: 300, evalEvery: 0, checkpointEvery: DEFAULT_CHECKPOINT_EVERY, checkpointAtEnd: true, resumed: false });
    expect(groupRunSpec({ ...DEFAULT_GROUP_CONFIG, mode: 'tp-taco' }, 2).strategy).toEqual({ kind: 'tp', size: 2, codec: 'taco' });
    expect(groupRunSpec({ ...DEFAULT_GROUP_CONFIG, mode: 'diloco' }, 2).strategy).toMatchObject({ kind: 'diloco', innerSteps: 50, wire: 'int8' });
  });

  it('npm run train: its flags are the spec\'s cadence', async () => {
    const p = (await parseTrainArgs(['--steps', '30', '--eval-every', '10', '--checkpoint-every', '4', '--sample', '8', '--plan']))!;
    expect(p.opts.evalEvery).toBe(10);
    const cadence = cadenceOf(p.spec, { prompt: '\n' });
    expect(cadence).toMatchObject({ steps: 30, evalEvery: 10, checkpointEvery: 4, checkpointAtEnd: true, resumed: false });
    expect(cadence.sample).toMatchObject({ every: 0, length: 8, atEnd: true, prompt: '\n' });
    const plain = (await parseTrainArgs(['--plan']))!;
    expect(cadenceOf(plain.spec)).toEqual({ steps: 100, evalEvery: 50, checkpointEvery: DEFAULT_CHECKPOINT_EVERY, checkpointAtEnd: true, resumed: false });
  });
});
