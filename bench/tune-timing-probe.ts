/**
 * Why a tuned f16 `base` step ran slower than the untuned one on the H100 (s28c1: 101.8k vs 108.1k
 * tokens/s), while the tuner timed the f16 attention forward at 0.87 ms a layer and f16-attn-device
 * times the same kernels at ~0.17 ms: each f16 attention job's first candidates are timed as the
 * tuner does (its options on this device), then with a long warm-up to a steady clock, then again
 * in the first order — so a difference between the rows is the timing method, not the kernel.
 *   node tune-timing-probe.mjs [--model base --scheme f16 --batch 16 --seq 512] [--n 3] [--warmup-ms 1000]
 */
import { parseArgs } from 'node:util';
import { parseTrainArgs } from '../src/cli/train-options';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { trainingTuneJobs } from '../src/engine/tune';
import { prepareF16Attention } from '../src/engine/tune/f16-attention';
import type { F16AttnJob } from '../src/engine/tune/jobs';
import { deviceTuneOptions, type TuneOptions } from '../src/engine/tune/tuner';

const a = parseArgs({ options: {
  model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, n: { type: 'string' }, 'warmup-ms': { type: 'string' },
} }).values;
const plan = await parseTrainArgs(['--model', a.model ?? 'base', '--scheme', a.scheme ?? 'f16', '--batch', a.batch ?? '16', '--seq', a.seq ?? '512']);
if (!plan) throw new Error('no run options');
const n = Number(a.n ?? 3);
const gpu = await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization', 'enable-dawn-features=allow_unsafe_apis'] });
const rt = new Runtime(gpu);
const jobs = trainingTuneJobs(plan.opts).filter((j): j is F16AttnJob => j.family === 'f16attn');
if (!jobs.length) console.log('no f16 attention jobs in this run (no shader-f16 or subgroup matrices here?)');
const variants: [string, TuneOptions][] = [
  ['tuner (this device)', deviceTuneOptions(rt)],
  [`warm-up ${a['warmup-ms'] ?? 1000} ms, 10 reps`, { ...deviceTuneOptions(rt), warmupMs: Number(a['warmup-ms'] ?? 1000), reps: 10 }],
  ['tuner again', deviceTuneOptions(rt)],
];
for (const job of jobs) {
  for (const [label, o] of variants) {
    const p = prepareF16Attention(rt, job, o);
    if (!p.candidates.length) console.log(`${job.label}: ${p.rejected.map((r) => r.why).join('; ')}`);
    for (const c of p.candidates.slice(0, n)) {
      const why = await c.check();
      if (why) {
        console.log(`${job.label} [${label}] ${c.name}: ${why}`);
        continue;
      }
      const t0 = performance.now();
      const ms = await c.time(undefined);
      console.log(`${job.label} [${label}] ${c.name}: ${ms.toFixed(3)} ms (${((performance.now() - t0) / 1000).toFixed(1)} s to time)`);
    }
    p.free();
  }
}
