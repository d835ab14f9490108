/**
 * "Tune this GPU" (the bench page): tunes the kernel choices of the lab page's run of a preset at a
 * batch and context (engine/tune labRunOptions: the shapes that run trains) on this browser's GPU,
 * with progress, and stores the cache in IndexedDB, where every later run's worker finds it. Cancel: the page posts `cancel` (the candidate in flight finishes; what was
 * tuned is kept).
 *   page → worker: { type: 'tune', preset, batch, seq, scheme (a preset's name), budgetS } | { type: 'cancel' }
 *   worker → page: progress* → done | error
 */
import { z } from 'zod';
import { acquireGpu } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { PRESET_NAMES } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { adapterKeyOf, adapterLabel, labRunOptions, pendingTune, type TuneProgress } from '../engine/tune';
import { loadTuneCacheIdb, saveTuneCacheIdb } from '../engine/tune/idb';
import { type TuneStepOutcome, tuneForRun } from '../lab/tune-check';

export const TuneRequestSchema = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('tune'), preset: z.enum(PRESET_NAMES), batch: z.number().int().min(1).max(4096), seq: z.number().int().min(2).max(65536),
    scheme: z.string().refine((k) => Object.hasOwn(SCHEME_PRESETS, k), 'not a scheme preset'),
    budgetS: z.number().min(1).max(3600),
  }),
  z.strictObject({ type: z.literal('cancel') }),
]);
export type ToTuneWorker = z.infer<typeof TuneRequestSchema>;
export type FromTuneWorker =
  | { type: 'started'; adapter: string; jobs: number; candidates: number; estimateS: number }
  | { type: 'progress'; progress: TuneProgress }
  | { type: 'done'; adapter: string; tuned: number; cached: number; unfinished: number; seconds: number; cancelled: boolean; stepCheck?: TuneStepOutcome }
  | { type: 'error'; message: string };

const scope = self as unknown as DedicatedWorkerGlobalScope;
const post = (m: FromTuneWorker) => scope.postMessage(m);
let abort: AbortController | null = null;

async function tune({ preset, batch, seq, scheme, budgetS }: Extract<ToTuneWorker, { type: 'tune' }>): Promise<void> {
  const t0 = performance.now();
  const gpu = await acquireGpu(scope.navigator.gpu);
  const rt = new Runtime(gpu);
  try {
    const { cache, problem } = await loadTuneCacheIdb();
    if (problem) console.warn(`tuning cache: ${problem}; starting a new one`);
    const opts = labRunOptions(preset, batch, seq, SCHEME_PRESETS[scheme]);
    const adapter = adapterLabel(adapterKeyOf(gpu.adapterInfo));
    const pending = pendingTune(rt, opts, cache, { budgetS });
    post({ type: 'started', adapter, jobs: pending.jobs.length, candidates: pending.candidates, estimateS: pending.seconds });
    abort = new AbortController();
    let last = 0;
    // Kept only if the lab run's step is not slower with it (lab/tune-check.ts); the budget counts from the request.
    const { outcome, stepCheck, wallS } = await tuneForRun(rt, preset, opts, cache, {
      budgetS, since: t0, signal: abort.signal, jobs: pending.all,
      onProgress: (p) => {
        if (performance.now() - last < 200 && p.phase !== 'done') return;
        last = performance.now();
        post({ type: 'progress', progress: p });
      },
    });
    if (outcome.tuned.length) await saveTuneCacheIdb(cache);
    post({
      type: 'done', adapter, tuned: outcome.tuned.length, cached: outcome.cached.length, unfinished: outcome.unfinished.length,
      seconds: wallS, cancelled: outcome.cancelled, stepCheck,
    });
  } finally {
    rt.destroy();
  }
}

scope.onmessage = (ev: MessageEvent<unknown>) => {
  const m = TuneRequestSchema.safeParse(ev.data);
  if (!m.success) {
    post({ type: 'error', message: `bad request: ${m.error.issues[0]?.message}` });
    return;
  }
  if (m.data.type === 'cancel') {
    abort?.abort();
    return;
  }
  tune(m.data).catch((e: unknown) => post({ type: 'error', message: e instanceof Error ? e.message : String(e) }));
};
