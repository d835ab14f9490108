// A tune is kept only when the run's step is not slower with it (lab/tune-check.ts). The step is a
// stand-in here that reads which picks the device holds: the decision and what the cache and the
// device end with are the unit, not a GPU's timings.
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../engine/gpu/runtime';
import { TuneCache } from '../engine/tune';
import { tunedPicks } from '../engine/tune/store';
import { checkTuneByStep, runStepTimer, stepCheckWords } from './tune-check';
import { defaultTrainOptions } from '../engine/train/options';

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100' };
const entry = (picks: string[]) => ({ picks, ms: 0.5, candidates: 3, at: '2026-12-07T10:00:00.000Z' });
const KEY = '8192x768x768NT';

function setup() {
  const rt = { device: {}, gpu: { adapterInfo: H100, features: {} } } as unknown as Runtime;
  const cache = new TuneCache();
  cache.put(H100, 'matmul', '64x64x64NN', entry(['64x64k16_4x4'])); // from an earlier tune
  const before = structuredClone(cache.toJSON());
  cache.put(H100, 'matmul', KEY, entry(['128x128k8_8x16'])); // this tune's
  const steps: string[] = [];
  const step = (tuned: number, untuned: number) => async () => {
    const has = tunedPicks(rt.device, 'matmul', KEY) !== undefined;
    steps.push(has ? 'tuned' : 'before');
    return has ? tuned : untuned;
  };
  return { rt, cache, before, steps, step };
}

describe('a tune checked in the run\'s step', () => {
  it('a tune whose step is slower is dropped: the cache and the device are as before it', async () => {
    const { rt, cache, before, steps, step } = setup();
    expect(await checkTuneByStep(rt, cache, before, step(75, 70))).toEqual({ tunedMs: 75, beforeMs: 70, kept: false });
    expect(steps).toEqual(['tuned', 'before', 'tuned', 'before']); // alternately, two rounds
    expect(cache.get(H100, 'matmul', KEY)).toBeUndefined();
    expect(cache.get(H100, 'matmul', '64x64x64NN')).toBeDefined(); // the earlier tune's entry stays
    expect(tunedPicks(rt.device, 'matmul', KEY)).toBeUndefined();
    expect(tunedPicks(rt.device, 'matmul', '64x64x64NN')).toEqual(['64x64k16_4x4']);
  });

  it('a tune whose step is as fast (within 1 %) or faster is kept, its picks on the device', async () => {
    for (const tuned of [70.5, 60]) {
      const { rt, cache, before, step } = setup();
      expect((await checkTuneByStep(rt, cache, before, step(tuned, 70))).kept).toBe(true);
      expect(cache.get(H100, 'matmul', KEY)?.picks).toEqual(['128x128k8_8x16']);
      expect(tunedPicks(rt.device, 'matmul', KEY)).toEqual(['128x128k8_8x16']);
    }
  });

  it('a before timed ahead of the tune is the first round\'s: tuned, before, tuned, and it counts in before\'s best', async () => {
    const { rt, cache, before, steps, step } = setup();
    expect(await checkTuneByStep(rt, cache, before, step(70.5, 72), 2, 0.01, 69)).toEqual({ tunedMs: 70.5, beforeMs: 69, kept: false });
    expect(steps).toEqual(['tuned', 'before', 'tuned']);
    expect(cache.get(H100, 'matmul', KEY)).toBeUndefined();
  });

  it('the synthetic step stands only for a preset\'s shape over its vocabulary, and not on a CPU adapter', () => {
    const gpu = { device: {}, gpu: { adapterInfo: H100, features: {} } } as unknown as Runtime;
    const cpu = { device: {}, gpu: { adapterInfo: { vendor: 'google', architecture: 'swiftshader', device: 'swiftshader', description: 'SwiftShader' }, features: {} } } as unknown as Runtime;
    const base = defaultTrainOptions('base', { model: { vocab_size: 65 } });
    expect('time' in runStepTimer(gpu, 'base', base)).toBe(true);
    expect(runStepTimer(cpu, 'base', base)).toEqual({ skip: expect.stringContaining('CPU adapter') });
    expect(runStepTimer(gpu, 'small', base)).toEqual({ skip: expect.stringContaining("small's shape") });
    expect(runStepTimer(gpu, 'base', defaultTrainOptions('base', { model: { vocab_size: 49152 } }))).toEqual({ skip: expect.stringContaining('vocabulary') });
  });

  it('says what it did: skipped and why, or both times and whether the tune stays', () => {
    expect(stepCheckWords({ skip: 'a CPU adapter' })).toBe('step check skipped: a CPU adapter');
    expect(stepCheckWords({ tunedMs: 75, beforeMs: 70, kept: false })).toBe('step check: 75.00 ms a step tuned, 70.00 ms before the tune: not faster, so this tune is dropped (the cache is as it was)');
    expect(stepCheckWords({ tunedMs: 60, beforeMs: 70, kept: true })).toMatch(/: kept$/);
  });
});
