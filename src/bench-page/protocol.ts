/**
 * What the bench page asks its worker for, and what the worker reports back. The request is the
 * page's form (validated with zod: the worker is a trust boundary, and a malformed request must come
 * back as an `error` message); `suitePlan` turns it into the SuitePlan that `npm run bench` builds
 * from its options, so the page and the CLI measure the same problems with the same defaults.
 *
 *   page → worker: start
 *   worker → page: gpu → (suite running → row* → suite done | suite error)* → done, or error (fatal)
 *   client → page: stopped (Stop terminates the worker; rows already measured stay)
 */
import { z } from 'zod';
import { schemePreset } from '../engine/scheme/presets';
import { type BenchRow, type gpuReport, planDefaults, presetShape, SUITE_NAMES, type SuiteName, type SuitePlan } from '../lab/suites';

export const SIZE_PRESETS = ['quick', 'full'] as const;
export type SizePreset = (typeof SIZE_PRESETS)[number];

export const BenchRequestSchema = z
  .object({
    suites: z.array(z.enum(SUITE_NAMES)).min(1, 'pick at least one suite'),
    /** quick: `npm run bench -- --quick`'s micro shapes (seconds on a GPU, minutes on a software one); full: the CLI's defaults. */
    size: z.enum(SIZE_PRESETS),
    /** Timed repetitions (median) and untimed warm-up; absent: each suite's default for the size. */
    reps: z.number().int().min(1).max(1000).optional(),
    warmup: z.number().int().min(0).max(1000).optional(),
    /** gemm: every variant, only the heuristic's pick, or only the engine's; absent: the size's default. */
    variants: z.enum(['all', 'heuristic', 'pick']).optional(),
  })
  .strict();
export type BenchRequest = z.infer<typeof BenchRequestSchema>;

/**
 * Squares of the gemm suite in a quick run: a few more than the CLI's single 64 so the throughput
 * chart has a curve, all still milliseconds on SwiftShader.
 */
export const QUICK_GEMM_SIZES = [32, 64, 128];

/** The CLI's plan for this request (throws when a preset's shape does not resolve). */
export function suitePlan(r: BenchRequest): SuitePlan {
  const quick = r.size === 'quick';
  const d = planDefaults(quick);
  return {
    quick,
    sizes: quick ? { gemm: QUICK_GEMM_SIZES } : undefined,
    shapes: d.presets.map((p) => presetShape(p)),
    schemes: d.schemes.map(schemePreset),
    variants: r.variants ?? d.variants,
    ranks: d.ranks,
    reps: r.reps,
    warmup: r.warmup,
  };
}

export type GpuReport = ReturnType<typeof gpuReport>;

export type ToBenchWorker = { type: 'start'; request: BenchRequest };
export const ToBenchWorkerSchema = z.object({ type: z.literal('start'), request: BenchRequestSchema }).strict();

/** webgpu: no API or adapter; device-lost: the device went away (the next suite gets a new one); config: bad request. */
export type BenchErrorKind = 'webgpu' | 'device-lost' | 'gpu' | 'config' | 'error';

export type FromBenchWorker =
  | { type: 'gpu'; report: GpuReport }
  | { type: 'suite'; suite: SuiteName; status: 'running' }
  | { type: 'suite'; suite: SuiteName; status: 'done' }
  | { type: 'suite'; suite: SuiteName; status: 'error'; kind: BenchErrorKind; message: string }
  | { type: 'row'; row: BenchRow }
  | { type: 'done' }
  | { type: 'error'; kind: BenchErrorKind; message: string }
  | { type: 'stopped' };
