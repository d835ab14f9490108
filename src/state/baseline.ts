/**
 * The comparison's baseline (issue 35): every run measured against the run of the same training
 * problem — model, data, tokenizer, batch, context, learning rate, seed — under fp32 or under f16
 * mixed precision (the baseline people train with). f16 is the default where the device runs it
 * (shader-f16), fp32 elsewhere. Pure: the compare panel draws what this picks, and starts a missing
 * baseline with `baselineConfig`.
 */
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import type { Scheme } from '../engine/scheme/scheme';
import type { RunConfig } from '../worker/protocol';
import type { RunState } from './runs';

export type BaselineKind = 'fp32' | 'f16';
/** What the page knows of the device (lab.ts GpuSupport; not imported, so lab.ts can import this module). */
type GpuSupport = { state: 'checking' | 'available' | 'unavailable'; shaderF16?: boolean };
/** What the user picked; 'auto' follows the device (f16 with shader-f16, else fp32). */
export type BaselineChoice = BaselineKind | 'auto';
export const BASELINE_CHOICES: readonly BaselineChoice[] = ['auto', 'fp32', 'f16'];

export function isBaselineChoice(x: unknown): x is BaselineChoice {
  return typeof x === 'string' && (BASELINE_CHOICES as readonly string[]).includes(x);
}

/** The device runs f16 GEMMs (shader-f16): an f16 run there is mixed precision, not fp32 under another name. */
export function deviceRunsF16(gpu: GpuSupport): boolean {
  return gpu.state === 'available' && gpu.shaderF16 === true;
}

export function resolveBaseline(choice: BaselineChoice, gpu: GpuSupport): BaselineKind {
  return choice === 'auto' ? (deviceRunsF16(gpu) ? 'f16' : 'fp32') : choice;
}

/** The scheme a baseline run trains with (fp32: no scheme, as the form's default). */
export function baselineScheme(kind: BaselineKind): Scheme | undefined {
  return kind === 'fp32' ? undefined : SCHEME_PRESETS.f16;
}

/** A scheme's training fields: its name and description say nothing about what it trains. */
function schemeBody(s: Scheme | undefined): string {
  const { name: _n, description: _d, ...body } = s ?? SCHEME_PRESETS.fp32;
  return JSON.stringify(body);
}

/** The run trains under the baseline's scheme (a renamed copy of the preset counts). */
export function trainsAs(c: RunConfig, kind: BaselineKind): boolean {
  // A QLoRA run's baseline is the same LoRA over the fp32 base (what the quantized base costs in loss).
  if (c.lora && c.qlora) return false;
  return schemeBody(c.scheme) === schemeBody(baselineScheme(kind));
}

/**
 * What must agree between a run and its baseline: everything that shapes training but the scheme
 * (steps and cadence may differ). LoRA included: a LoRA run's baseline is the same LoRA in fp32/f16, not full fine-tuning.
 */
function problemKey(c: RunConfig): string {
  return JSON.stringify([c.preset, c.model ?? null, c.dataset, c.tokenizer ?? null, c.data?.key ?? null, c.data?.field ?? null, c.init ?? null, c.batch, c.seq, c.lr ?? null, c.seed, c.lora ?? null]);
}

/** The config that starts `c`'s baseline: the same run under the baseline's scheme. */
export function baselineConfig(c: RunConfig, kind: BaselineKind): RunConfig {
  const { scheme: _s, qlora: _q, ...rest } = c;
  const scheme = baselineScheme(kind);
  return scheme ? { ...rest, scheme } : rest;
}

/**
 * `run`'s baseline among `runs`: a run of the same problem under the baseline's scheme, not `run`
 * itself; the one with the most steps (the later one on a tie), a pending one (no step yet) too, so
 * the page does not offer to start a second.
 */
export function findBaseline(run: RunState, runs: readonly RunState[], kind: BaselineKind): RunState | null {
  const want = problemKey(run.config);
  let best: RunState | null = null;
  for (const r of runs) {
    if (r.id === run.id || !trainsAs(r.config, kind) || problemKey(r.config) !== want) continue;
    if (!best || r.train.length >= best.train.length) best = r;
  }
  return best;
}

/** A run against its baseline, each figure null where one of them has none yet. */
export interface BaselineDelta {
  /** Loss relative to the baseline's, in % ((run / base − 1) · 100): validation at the last step both evaluated, else train. */
  lossPct: number | null;
  lossOn: 'val' | 'train' | null;
  /** The step the loss is compared at (train: the last of the up to 10 common steps averaged). */
  lossStep: number | null;
  /** GPU memory (total, measured) relative to the baseline's, in %. */
  memoryPct: number | null;
  /** Median tokens/s over the baseline's (> 1: faster). */
  speedRatio: number | null;
}

const pct = (a: number, b: number) => (b > 0 && Number.isFinite(a) ? (a / b - 1) * 100 : null);

function median(xs: number[]): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  const h = s.length >> 1;
  return s.length % 2 ? s[h] : (s[h - 1] + s[h]) / 2;
}

// A run not built yet reports an empty ledger: no figure rather than −100 %.
const memTotal = (r: RunState) => {
  const t = (r.latest?.mem ?? r.info?.memory)?.total ?? 0;
  return t > 0 ? t : null;
};
const medianSpeed = (r: RunState) => median(r.train.map((p) => p.tokens_per_s).filter((v): v is number => v !== undefined && v > 0));

export function baselineDelta(run: RunState, base: RunState): BaselineDelta {
  let lossPct: number | null = null;
  let lossOn: BaselineDelta['lossOn'] = null;
  let lossStep: number | null = null;
  const baseVal = new Map(base.val.map((p) => [p.step, p.loss]));
  const val = [...run.val].reverse().find((p) => baseVal.has(p.step));
  if (val) {
    [lossPct, lossOn, lossStep] = [pct(val.loss, baseVal.get(val.step)!), 'val', val.step];
  } else {
    // Mean train loss over the last (up to) 10 steps both logged: one step's noise says little.
    const baseTrain = new Map(base.train.map((p) => [p.step, p.loss]));
    const common = run.train.filter((p) => baseTrain.has(p.step)).slice(-10);
    if (common.length > 0) {
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
      lossPct = pct(mean(common.map((p) => p.loss)), mean(common.map((p) => baseTrain.get(p.step)!)));
      [lossOn, lossStep] = ['train', common.at(-1)!.step];
    }
  }
  const [m, bm] = [memTotal(run), memTotal(base)];
  const [s, bs] = [medianSpeed(run), medianSpeed(base)];
  return { lossPct, lossOn, lossStep, memoryPct: m !== null && bm !== null ? pct(m, bm) : null, speedRatio: s !== null && bs ? s / bs : null };
}

export interface BaselineRow {
  run: RunState;
  base: RunState | null;
  delta: BaselineDelta | null;
  /** No baseline yet: the config that starts it (one key per distinct baseline, so rows sharing one start it once). */
  missing: { key: string; config: RunConfig } | null;
}

/**
 * One row per run that is not itself a run under the baseline's scheme: its baseline and the
 * deltas, or the baseline to start. `queued`: configs waiting in the run queue (a queued baseline
 * is not offered again).
 */
export function baselineRows(runs: readonly RunState[], kind: BaselineKind, queued: readonly RunConfig[] = []): BaselineRow[] {
  const waiting = new Set(queued.filter((c) => trainsAs(c, kind)).map(problemKey));
  return runs.filter((r) => !trainsAs(r.config, kind)).map((run) => {
    const base = findBaseline(run, runs, kind);
    const key = problemKey(run.config);
    const missing = base || waiting.has(key) ? null : { key, config: baselineConfig(run.config, kind) };
    return { run, base, delta: base ? baselineDelta(run, base) : null, missing };
  });
}

/** Why the f16 baseline is no mixed-precision run on this device (null where it is, or the baseline is fp32). */
export function f16BaselineCaveat(kind: BaselineKind, gpu: GpuSupport): string | null {
  if (kind !== 'f16' || gpu.state !== 'available' || deviceRunsF16(gpu)) return null;
  return 'this device has no shader-f16, so an f16 run here computes in fp32 (the plan falls back and its GEMM paths say fp32): '
    + 'it is neither faster nor f16\'s rounding, only the same run under another name. The engine\'s f32 twin of the f16 path '
    + '(f16-rounded values held in f32, a fidelity stand-in, not faster) runs in its tests, not in the page.';
}
