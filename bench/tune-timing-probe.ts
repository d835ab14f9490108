/**
 * Whether the tuner's timings are the kernels' (issue 36): an H100 tuned f16 `base` steps slower than
 * untuned (s28c1-c5) while its picks each timed faster. For each job of the run in the given
 * families, its first candidates are built and timed three ways — the tuner's rounds (each
 * candidate bracketed by the first; its options on this device), each alone after a long warm-up
 * (the reference), the rounds again —
 * so a row that differs between the ways is the timing method, not the kernel.
 *   node tune-timing-probe.mjs [--model base --scheme f16 --batch 16 --seq 512] [--family f16gemm,f16attn] [--n 3] [--warmup-ms 1000] [--cpu]
 */
import { parseArgs } from 'node:util';
import { parseTrainArgs } from '../src/cli/train-options';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { timeDispatches, warmUntilSteady } from '../src/engine/gpu/timer';
import { KERNEL_FAMILIES, type KernelFamily, trainingTuneJobs } from '../src/engine/tune';
import { type BuiltCandidate, timeBuiltInRounds } from '../src/engine/tune/candidate';
import { deviceTuneOptions, prepareJob } from '../src/engine/tune/tuner';

const a = parseArgs({ options: {
  model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, family: { type: 'string' },
  n: { type: 'string' }, 'warmup-ms': { type: 'string' }, cpu: { type: 'boolean' },
} }).values;
const plan = await parseTrainArgs(['--model', a.model ?? 'base', '--scheme', a.scheme ?? 'f16', '--batch', a.batch ?? '16', '--seq', a.seq ?? '512']);
if (!plan) throw new Error('no run options');
const families = (a.family ?? 'f16gemm,f16attn').split(',');
for (const f of families) if (!(KERNEL_FAMILIES as readonly string[]).includes(f)) throw new Error(`--family: '${f}' is none of ${KERNEL_FAMILIES.join(', ')}`);
const n = Number(a.n ?? 3);
const warmupMs = Number(a['warmup-ms'] ?? 1000);
const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: ['disable-dawn-features=timestamp_quantization', 'enable-dawn-features=allow_unsafe_apis'] });
const rt = new Runtime(gpu);
const o = deviceTuneOptions(rt);
const jobs = trainingTuneJobs(plan.opts).filter((j) => families.includes(j.family as KernelFamily));
if (!jobs.length) console.log(`no ${families.join(' or ')} jobs in this run`);
for (const job of jobs) {
  const p = prepareJob(rt, job, o);
  if (!p.candidates.length) console.log(`${job.label}: ${p.rejected.map((r) => r.why).join('; ')}`);
  const names: string[] = [];
  const built: BuiltCandidate[] = [];
  for (const c of p.candidates.slice(0, n)) {
    const why = await c.check();
    if (why) {
      console.log(`${job.label} ${c.name}: ${why}`);
      continue;
    }
    names.push(c.name);
    built.push(await c.build());
  }
  const rounds = async (label: string) => {
    const t0 = performance.now();
    const r = await timeBuiltInRounds(rt, built, o);
    const s = ((performance.now() - t0) / 1000).toFixed(1);
    names.forEach((name, i) => console.log(`${job.label} [${label}, ${r.rounds} rounds, ${s} s, untuned spread ${r.refSpread.toFixed(2)}x] ${name}: median ${r.medianMs[i].toFixed(3)} ms, score ${r.score[i].toFixed(3)}`));
  };
  if (built.length) await rounds('tuner rounds');
  for (const [i, b] of built.entries()) {
    await warmUntilSteady(rt, b.dispatches, warmupMs, 2 * warmupMs);
    const ms = (await timeDispatches(rt, b.dispatches, { warmup: 0, reps: 10 })).medianMs / b.inner;
    console.log(`${job.label} [alone, warm-up ${warmupMs} ms, 10 reps] ${names[i]}: ${ms.toFixed(3)} ms`);
  }
  if (built.length) await rounds('tuner rounds again');
  built.forEach((b) => b.free());
  p.free();
}
rt.destroy();
