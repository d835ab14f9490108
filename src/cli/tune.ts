/**
 * `npm run tune`: tunes the kernel choices a training run makes on this machine's GPU (engine/tune)
 * and keeps them in the user's tuning cache (cli/tune-cache.ts), which `train --tune`, `peer --tune`
 * and every later run on this adapter read. --import merges a file into the cache first (validated:
 * a malformed or foreign file is refused before the GPU starts), --export writes the cache after.
 */
import { acquireNodeGpu } from '../engine/gpu/node';
import { stepCheckWords, tuneForRun } from '../lab/tune-check';
import { Runtime } from '../engine/gpu/runtime';
import { adapterKeyOf, adapterLabel, pendingTune, tunedJobWords } from '../engine/tune';
import { fail, num, parseCliArgs, UsageError } from './common';
import { INTERRUPTED_EXIT } from './interrupt';
import { parseTrainArgs } from './train-options';
import { readImportFile, readTuneCacheFile, tuneCachePath, writeTuneCacheFile } from './tune-cache';

export const TUNE_HELP = `usage: npm run tune -- [options]
  --model micro|tiny|small|base   the run to tune for (default micro); with --scheme, --batch, --seq,
  --scheme NAME|FILE.json         --config, --data, --tokenizer, --text-field as train takes them
  --budget-s N                    the whole tune within N seconds from the start, step check included
                                  (default 90): the candidates get what is left after the step check's
                                  share; a choice cut short keeps the best of what it timed
  --force                         time again what the cache already holds for this adapter
  --no-step-check                 keep the tune without timing the run's step with and without it (by
                                  default a tune whose step is slower than before it is dropped)
  --import FILE                   merge a tuning cache file (e.g. another member's export) into the cache
                                  first; refused with an error if it is not a valid tuning cache
  --export FILE                   write the cache (every adapter) to FILE at the end
  --cpu                           force the SwiftShader CPU adapter
With only --import and/or --export (no model option) nothing is tuned and no GPU is used.
The cache: $LAB_TUNE_CACHE, else $XDG_CACHE_HOME/webgpu-quant-lab/tune.json, else ~/.cache/webgpu-quant-lab/tune.json.
exit status: 0 done, 2 bad input (nothing written), 1 a failure during the tune, 130 interrupted (what was tuned is saved)`;

const OWN = { 'budget-s': { type: 'string' }, force: { type: 'boolean' }, 'no-step-check': { type: 'boolean' }, import: { type: 'string' }, export: { type: 'string' }, help: { type: 'boolean', short: 'h' } } as const;
const PASSED = ['model', 'scheme', 'batch', 'seq', 'config', 'data', 'tokenizer', 'text-field', 'cpu'] as const;
const MODEL_OPTIONS = PASSED.filter((k) => k !== 'cpu');

async function main(): Promise<number> {
  const argv = process.argv.slice(2);
  const a = parseCliArgs(argv, {
    ...OWN, model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, config: { type: 'string' },
    data: { type: 'string' }, tokenizer: { type: 'string' }, 'text-field': { type: 'string' }, cpu: { type: 'boolean' },
  });
  if (a.help) {
    console.log(TUNE_HELP);
    return 0;
  }
  const budgetS = num('budget-s', a['budget-s'], { min: 1 }) ?? 90;
  const file = tuneCachePath();
  // Every input is checked before the GPU starts: the import, the cache, the run's options.
  const imported = a.import !== undefined ? readImportFile(a.import) : null;
  const cache = readTuneCacheFile(file);
  const tuneRun = MODEL_OPTIONS.some((k) => a[k] !== undefined) || (a.import === undefined && a.export === undefined);
  const trainArgv = PASSED.flatMap((k) => (a[k] === undefined ? [] : a[k] === true ? [`--${k}`] : [`--${k}`, String(a[k])]));
  const plan = tuneRun ? await parseTrainArgs(trainArgv) : null;
  if (tuneRun && !plan) throw new UsageError('nothing to tune');
  if (imported) {
    const { added } = cache.merge(imported);
    writeTuneCacheFile(file, cache);
    console.error(`imported ${a.import}: ${added} entries merged into ${file}`);
  }
  let summary: Record<string, unknown> = { cache: file };
  let interrupted = false;
  if (plan) {
    // Subgroup matrices (the INT8 and f16 tensor-core layouts this tunes) exist only behind Dawn's unsafe APIs:
    // without them an H100 reported 'no f16 → f32 subgroup matrices' and skipped every tensor-core job (s27c4).
    const flags = ['disable-dawn-features=timestamp_quantization', 'enable-dawn-features=allow_unsafe_apis'];
    // A CPU adapter compiles each pipeline for seconds with Vulkan's zero-initialization extension; Tint's own loop is the same semantics.
    if (plan.cpu) flags.push('disable-dawn-features=use_vulkan_zero_initialize_workgroup_memory_extension');
    const gpu = await acquireNodeGpu({ forceSwiftShader: plan.cpu, dawnFlags: flags });
    const rt = new Runtime(gpu);
    const adapter = adapterKeyOf(gpu.adapterInfo);
    const pending = pendingTune(rt, plan.opts, cache, { budgetS, force: a.force });
    console.error(`adapter: ${adapterLabel(adapter)}`);
    console.error(`tune ${plan.preset} (${plan.scheme.name}, batch ${plan.opts.batch}, seq ${plan.opts.seq}): ${pending.jobs.length} kernel choices to tune, `
      + `${pending.candidates} candidates, up to ~${Math.ceil(pending.seconds)} s`);
    const abort = new AbortController();
    const onSignal = () => {
      interrupted = true;
      console.error('\ninterrupted: stopping after the candidate in flight and saving what was tuned');
      abort.abort();
    };
    process.once('SIGINT', onSignal);
    process.once('SIGTERM', onSignal);
    let last = 0;
    try {
      // The budget counts from the process's start (performance.now() in Node): the command's own wall time.
      const run = await tuneForRun(rt, plan.preset, plan.opts, cache, {
        budgetS, since: 0, force: a.force, signal: abort.signal, stepCheck: !a['no-step-check'], jobs: pending.all,
        onFirstTiming: (f, reserveS) => console.error(`  the step before the tune: ${f.stepMs.toFixed(2)} ms, timed in ${f.seconds.toFixed(1)} s `
          + `(${f.compileS.toFixed(1)} s of it compiling); ${reserveS.toFixed(1)} s set aside for the check after the tune`),
        onProgress: (p) => {
          if (p.phase === 'done' || performance.now() - last < 1000) return;
          last = performance.now();
          console.error(`  [${p.done}/${p.total}] ${p.job}${p.candidate ? `: ${p.candidate}` : ''} (${p.elapsedS.toFixed(0)} s, ~${Math.ceil(p.remainingS)} s left)`);
        },
      });
      const { outcome } = run;
      for (const t of outcome.tuned) console.error(`  ${tunedJobWords(t)}`);
      for (const u of outcome.unfinished) console.error(`  ${u.key}: not tuned (${u.why})`);
      let stepCheck: Record<string, unknown> | undefined;
      if (run.stepCheck) {
        const c = run.stepCheck;
        console.error(stepCheckWords(c));
        if (!('skip' in c)) stepCheck = { tuned_ms: Number(c.tunedMs.toFixed(3)), before_ms: Number(c.beforeMs.toFixed(3)), kept: c.kept };
      }
      console.error(`tune: ${run.wallS.toFixed(1)} s from the start (budget ${budgetS} s; the candidates had ${run.tunerBudgetS.toFixed(1)} s, used ${outcome.elapsedS.toFixed(1)})`);
      writeTuneCacheFile(file, cache);
      summary = {
        adapter, cache: file, tuned: outcome.tuned.length, cached: outcome.cached.length, unfinished: outcome.unfinished.length,
        rejected: outcome.rejected.length, elapsed_s: Number(outcome.elapsedS.toFixed(2)), tuner_budget_s: Number(run.tunerBudgetS.toFixed(2)), check_reserve_s: Number(run.reserveS.toFixed(2)), wall_s: Number(run.wallS.toFixed(2)), out_of_budget: outcome.outOfBudget, cancelled: outcome.cancelled,
        entries: cache.counts(adapter), ...(stepCheck ? { step_check: stepCheck } : {}),
        // Per job the pick's and the untuned pick's medians over the same rounds: whether the picks can be trusted.
        jobs: outcome.tuned.map((t) => ({
          job: t.key, pick: t.pick, ms: Number(t.ms.toFixed(4)), untuned: t.untuned,
          untuned_ms: t.untunedMs === undefined ? null : Number(t.untunedMs.toFixed(4)), rounds: t.rounds, candidates: t.candidates,
          // The untuned pick's slowest timing over its fastest in the rounds: far over 1, the clock moved while the job was timed.
          untuned_spread: t.untunedSpread === undefined ? null : Number(t.untunedSpread.toFixed(3)),
        })),
      };
    } finally {
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      rt.destroy();
    }
  }
  if (a.export !== undefined) {
    try {
      writeTuneCacheFile(a.export, cache);
    } catch (e) {
      throw new Error(`--export ${a.export}: ${(e as Error).message}`);
    }
    console.error(`exported the cache to ${a.export}`);
    summary.exported = a.export;
  }
  console.log(JSON.stringify(summary));
  return interrupted ? INTERRUPTED_EXIT : 0;
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then((code) => {
  clearInterval(keepAlive);
  process.exit(code);
}, fail);
