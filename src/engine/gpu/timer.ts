/**
 * GPU timing of a list of dispatches (autotuning, benchmarks). With timestamp-query, each rep is one
 * compute pass bracketed by timestampWrites, so the figure is GPU time of the pass alone; otherwise
 * wall clock from submit to onSubmittedWorkDone, which adds submit and completion latency (tens of
 * µs on a real GPU) — time enough work per rep that this does not matter.
 * Dawn may quantize timestamps (Chrome: 100 µs unless unsafe APIs are on); in Node, pass the toggle
 * 'disable-dawn-features=timestamp_quantization' for exact figures. Samples that are not positive
 * (quantized to 0, or an adapter with broken counters) make the whole run fall back to wall clock.
 */
import { assertAlive } from './device';
import type { Dispatch, Runtime } from './runtime';

export interface TimingOptions {
  warmup?: number;
  reps?: number;
  /** Ignore timestamp queries even when present (tests of the fallback). */
  forceWallclock?: boolean;
  /** Then keep running until per-run time is steady, for at least this many ms (warmUntilSteady). */
  warmupMs?: number;
}

/** What warmUntilSteady did: runs of the list, wall ms, and wall ms per run in each batch. */
export interface SteadyWarmup {
  runs: number;
  ms: number;
  batchMsPerRun: number[];
}

export interface TimingResult {
  medianMs: number;
  samplesMs: number[];
  method: 'timestamp' | 'wallclock';
}

export function median(xs: number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

export async function timeDispatches(rt: Runtime, dispatches: Dispatch[], opts: TimingOptions = {}): Promise<TimingResult> {
  const warmup = opts.warmup ?? 2;
  const reps = Math.max(1, opts.reps ?? 10);
  for (let i = 0; i < warmup; i++) rt.run(dispatches);
  await rt.sync();
  if (opts.warmupMs) await warmUntilSteady(rt, dispatches, opts.warmupMs, Math.max(3000, 2 * opts.warmupMs));
  if (rt.gpu.features.timestampQuery && !opts.forceWallclock) {
    const samples = await passTimes(rt, Array.from({ length: reps }, () => dispatches));
    if (samples && samples.every((s) => Number.isFinite(s) && s > 0)) {
      return { medianMs: median(samples), samplesMs: samples, method: 'timestamp' };
    }
  }
  const samples: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    rt.run(dispatches);
    await rt.sync();
    samples.push(performance.now() - t0);
  }
  return { medianMs: median(samples), samplesMs: samples, method: 'wallclock' };
}

/**
 * GPU ms of each timed pass (its dispatches in one compute pass, timestamps around it), all passes in
 * one submit, in order; null if the queries could not be made. Passes marked untimed run in the same
 * submit without timestamps. The work is submitted before the first await: a caller may submit more
 * before awaiting this.
 */
async function passTimes(rt: Runtime, passes: Dispatch[][], timed?: readonly boolean[]): Promise<number[] | null> {
  assertAlive(rt.gpu);
  const device = rt.device;
  const isTimed = (i: number) => timed?.[i] ?? true;
  const slots = passes.map((_, i) => i).filter(isTimed);
  const count = 2 * slots.length;
  if (count === 0 || count > MAX_QUERIES) return null;
  let querySet: GPUQuerySet | null = null;
  let resolve: GPUBuffer | null = null;
  let readback: GPUBuffer | null = null;
  let scoped = true;
  device.pushErrorScope('validation');
  try {
    querySet = device.createQuerySet({ label: 'timer', type: 'timestamp', count });
    resolve = device.createBuffer({
      label: 'timer.resolve',
      size: count * 8,
      usage: GPUBufferUsage.QUERY_RESOLVE | GPUBufferUsage.COPY_SRC,
    });
    readback = device.createBuffer({
      label: 'timer.readback',
      size: count * 8,
      usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST,
    });
    const enc = device.createCommandEncoder({ label: 'timer' });
    let q = 0;
    passes.forEach((p, i) => {
      if (!isTimed(i)) return rt.encode(enc, p);
      rt.encode(enc, p, { querySet: querySet!, beginningOfPassWriteIndex: q, endOfPassWriteIndex: q + 1 });
      q += 2;
    });
    enc.resolveQuerySet(querySet, 0, count, resolve, 0);
    enc.copyBufferToBuffer(resolve, 0, readback, 0, count * 8);
    device.queue.submit([enc.finish()]);
    scoped = false;
    if (await device.popErrorScope()) return null;
    await readback.mapAsync(GPUMapMode.READ);
    const ticks = new BigUint64Array(readback.getMappedRange().slice(0));
    readback.unmap();
    return slots.map((_, k) => Number(ticks[2 * k + 1] - ticks[2 * k]) / 1e6);
  } catch {
    return null;
  } finally {
    if (scoped) void device.popErrorScope();
    querySet?.destroy();
    resolve?.destroy();
    readback?.destroy();
  }
}

/** Most timestamps in one query set (Dawn's limit). */
const MAX_QUERIES = 4096;

/** One item of timeSequence: a dispatch list, its untimed runs and its timed passes. */
export interface SequenceItem {
  dispatches: Dispatch[];
  warmup?: number;
  reps?: number;
}

/**
 * Times items back to back: per item `warmup` untimed passes then `reps` timed ones (default 0 and
 * 1), its ms the median of those. With timestamp queries everything goes in one submit, made before
 * this returns its promise, so the GPU runs the whole sequence without a CPU gap (its clock sees one
 * load) and a caller can submit the next sequence before awaiting this one. Otherwise (or when the
 * queries fail) each pass is timed by wall clock from submit to done, one at a time.
 */
export async function timeSequence(rt: Runtime, items: readonly SequenceItem[]): Promise<number[]> {
  const passes: Dispatch[][] = [];
  const timed: boolean[] = [];
  for (const it of items) {
    const w = it.warmup ?? 0;
    const n = w + Math.max(1, it.reps ?? 1);
    for (let k = 0; k < n; k++) {
      passes.push(it.dispatches);
      timed.push(k >= w);
    }
  }
  const ms = rt.gpu.features.timestampQuery ? await passTimes(rt, passes, timed) : null;
  if (ms && ms.every((x) => Number.isFinite(x) && x > 0)) {
    let k = 0;
    return items.map((it) => median(ms.slice(k, (k += Math.max(1, it.reps ?? 1)))));
  }
  // One wall-clock sequence at a time per device: a pipelined caller may have asked for the next one already.
  const run = (wallclockQueue.get(rt.device) ?? Promise.resolve()).then(async () => {
    await rt.sync();
    const out: number[] = [];
    for (const it of items) {
      for (let w = 0; w < (it.warmup ?? 0); w++) rt.run(it.dispatches);
      const xs: number[] = [];
      for (let r = 0; r < Math.max(1, it.reps ?? 1); r++) {
        const t0 = performance.now();
        rt.run(it.dispatches);
        await rt.sync();
        xs.push(performance.now() - t0);
      }
      out.push(median(xs));
    }
    return out;
  });
  wallclockQueue.set(rt.device, run.catch(() => undefined));
  return run;
}

const wallclockQueue = new WeakMap<object, Promise<unknown>>();

/**
 * GPU time of each dispatch on its own (one compute pass each, timestamps around it), median over
 * `reps` runs of the whole list in order — a profile of a training step by kernel. The dispatches
 * run in sequence as in the step, so each sees the caches its predecessors left; passes add a few
 * µs of boundary each, so the sum exceeds the one-pass time somewhat. Null without timestamp queries
 * (or when they could not be made).
 */
export async function profileDispatches(rt: Runtime, dispatches: Dispatch[], reps = 3): Promise<number[] | null> {
  if (!rt.gpu.features.timestampQuery) return null;
  const live = dispatches.filter((d) => d.workgroups.every((n) => n > 0));
  const per: number[][] = live.map(() => []);
  const maxQueries = 4096;
  for (let r = 0; r < reps; r++) {
    for (let start = 0; start < live.length; start += maxQueries / 2) {
      const chunk = live.slice(start, start + maxQueries / 2);
      const ms = await passTimes(rt, chunk.map((d) => [d]));
      if (!ms) return null;
      ms.forEach((t, i) => per[start + i].push(t));
    }
  }
  const byDispatch = new Map(live.map((d, i) => [d, median(per[i])]));
  return dispatches.map((d) => byDispatch.get(d) ?? 0);
}

/**
 * Runs `ds` (`batch` copies in one pass, one submit per batch) until its wall-clock time per run is
 * steady: at least minMs spent and the median of the last three batches within 10 % of the best
 * batch so far; at most maxMs in all. A transient — clocks ramping up, the first uses of freshly
 * allocated buffers — shows as slower early batches, several times slower on a fresh GPU even after
 * timeDispatches' two warm-up runs (too short a warm-up, not a different one). 10 % by default, not
 * less: SwiftShader on a busy CPU jitters by more (`tolerance` sets it). Batches double until
 * one takes ≥ 20 ms, so that the figure is GPU time rather than submit latency.
 */
export async function warmUntilSteady(rt: Runtime, ds: Dispatch[], minMs = 500, maxMs = 3000, tolerance = 0.1): Promise<SteadyWarmup> {
  const t0 = performance.now();
  const perRun: number[] = [];
  let batch = 1;
  let runs = 0;
  for (;;) {
    const b0 = performance.now();
    rt.run(Array.from({ length: batch }, () => ds).flat());
    await rt.sync();
    const dt = performance.now() - b0;
    perRun.push(dt / batch);
    runs += batch;
    const spent = performance.now() - t0;
    const steady = perRun.length >= 3 && median(perRun.slice(-3)) <= (1 + tolerance) * Math.min(...perRun);
    if (spent >= maxMs || (spent >= minMs && steady)) break;
    if (dt < 20) batch *= 2;
  }
  return { runs, ms: performance.now() - t0, batchMsPerRun: perRun };
}
