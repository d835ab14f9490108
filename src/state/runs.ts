/**
 * One training run as the page sees it, and the pure reducer that folds worker messages into it.
 * Kept free of zustand and React so it can be tested in Node.
 */
import { PRESETS } from '../engine/model/config';
import { planMemory, resolveTrainingPlan } from '../engine/plan/train-plan';
import type { MemReport } from '../engine/gpu/memory';
import type { QuantErrorRecord } from '../engine/train/probe';
import { bitsPerByte } from '../engine/train/data/datasets';
import { type BitsAndWire, bitsAndWire } from '../engine/train/probe-bits';
import { type FromWorker, loraLabel, type RunConfig, type RunInfo, type StepReport, trainOptionsFor } from '../worker/protocol';

/**
 * pausing/paused: the worker keeps its state and waits; interrupted: the page was reloaded while
 * the run was live (its worker is gone; it can continue from its last checkpoint).
 */
export type RunStatus = 'starting' | 'running' | 'pausing' | 'paused' | 'stopping' | 'done' | 'stopped' | 'error' | 'interrupted';

export interface LossPoint {
  step: number;
  loss: number;
  /** Training time of the run when the point was taken. */
  elapsed_s?: number;
}

export interface TrainPoint extends LossPoint {
  lr: number;
  grad_norm: number;
  tokens_per_s?: number;
}

export interface RunState {
  id: string;
  label: string;
  config: RunConfig;
  status: RunStatus;
  /** What the worker is doing before the first step (loading corpus, compiling, ...). */
  phase: string;
  info: RunInfo | null;
  train: TrainPoint[];
  val: LossPoint[];
  latest: StepReport | null;
  samples: { step: number; text: string }[];
  /** Per-layer quantization error, one entry per evaluation that measured it. */
  quant: QuantSnapshot[];
  error: { kind: string; message: string } | null;
  startedAt: number;
  finishedAt: number | null;
  /** Step count of the latest checkpoint the page holds (null = none). */
  checkpointStep: number | null;
  /** Why the run's latest state could not be saved in the browser (null = saved). */
  storageError: string | null;
  /**
   * Wall-clock spans in which a worker ran it (one per start or continue; `to` = its last message),
   * so an interrupted run is not counted as busy until now. Absent in runs saved before.
   */
  spans?: { from: number; to: number }[];
}

export interface QuantSnapshot {
  step: number;
  errors: QuantErrorRecord[];
}

export function runLabel(config: RunConfig): string {
  const model = config.model ? `custom ${config.model.hidden_size}×${config.model.num_hidden_layers}` : config.preset;
  return `${model} · ${config.scheme?.name ?? 'fp32'}${config.lora ? ` · ${loraLabel(config.lora)}${config.qlora ? ` · ${config.qlora.format} base` : ''}` : ''}${config.checkpointActivations ? ' · recompute' : ''} · b${config.batch} · t${config.seq}`;
}

export function newRun(id: string, config: RunConfig, now: number): RunState {
  return {
    id,
    label: runLabel(config),
    config,
    status: 'starting',
    phase: 'starting worker',
    info: null,
    train: [],
    val: [],
    latest: null,
    samples: [],
    quant: [],
    error: null,
    startedAt: now,
    finishedAt: null,
    checkpointStep: null,
    storageError: null,
    spans: [{ from: now, to: now }],
  };
}

/** The run with its current span ended at `now` (a worker message arrived). */
function touched(run: RunState, now: number): RunState {
  const spans = run.spans ?? [{ from: run.startedAt, to: now }];
  const last = spans.at(-1);
  if (!last || last.to >= now) return run.spans ? run : { ...run, spans };
  return { ...run, spans: [...spans.slice(0, -1), { from: last.from, to: now }] };
}

/** The wall-clock spans the run occupied the GPU: its worker's spans, and the live one until `now`. */
export function busySpans(run: Pick<RunState, 'status' | 'startedAt' | 'finishedAt' | 'spans'>, now: number): { from: number; to: number }[] {
  const spans = run.spans ?? [{ from: run.startedAt, to: run.finishedAt ?? run.startedAt }];
  if (!isActive(run) || spans.length === 0) return spans;
  return [...spans.slice(0, -1), { from: spans.at(-1)!.from, to: now }];
}

/** A worker is (or should be) attached. */
export function isActive(run: Pick<RunState, 'status'>): boolean {
  return run.status === 'starting' || run.status === 'running' || run.status === 'stopping' || run.status === 'pausing' || run.status === 'paused';
}

/** Can continue from its checkpoint in a new worker. */
export function canContinue(run: RunState): boolean {
  return (run.status === 'interrupted' || run.status === 'stopped' || run.status === 'error') && run.checkpointStep !== null && run.checkpointStep < run.config.steps;
}

/** Folds one worker message into a run; messages after the run ended are ignored. */
export function reduceRun(run: RunState, msg: FromWorker, now: number): RunState {
  if (!isActive(run)) return run;
  const next = applyToRun(run, msg, now);
  return touched(next, now);
}

function applyToRun(run: RunState, msg: FromWorker, now: number): RunState {
  switch (msg.type) {
    case 'status':
      // "pausing/stopping after this step" says more than which step is in flight.
      return run.status === 'running' || run.status === 'starting' ? { ...run, phase: msg.phase } : run;
    case 'ready': {
      // A continued run drops points past its checkpoint: the steps are re-run.
      const keep = (p: { step: number }) => p.step < msg.startStep;
      const status = run.status === 'stopping' || run.status === 'pausing' ? run.status : 'running';
      return { ...run, info: msg.info, status, phase: 'training', train: run.train.filter(keep), val: run.val.filter(keep), samples: run.samples.filter(keep), quant: run.quant.filter(keep) };
    }
    case 'metrics': {
      const m = msg.metrics;
      const point: TrainPoint = { step: m.step, loss: m.loss, lr: m.lr, grad_norm: m.grad_norm, tokens_per_s: m.tokens_per_s, elapsed_s: m.elapsed_s };
      return { ...run, latest: m, train: [...run.train, point], phase: run.status === 'running' ? 'training' : run.phase };
    }
    case 'val':
      return { ...run, val: [...run.val, { step: msg.step, loss: msg.loss, elapsed_s: run.latest?.elapsed_s }] };
    case 'quant':
      return { ...run, quant: [...run.quant, { step: msg.step, errors: msg.errors }] };
    case 'sample':
      return { ...run, samples: [...run.samples, { step: msg.step, text: msg.text }] };
    case 'checkpoint':
      return { ...run, checkpointStep: msg.step };
    case 'paused':
      return run.status === 'stopping' ? run : { ...run, status: 'paused', phase: `paused after step ${msg.step + 1}` };
    case 'resumed':
      return run.status === 'stopping' ? run : { ...run, status: 'running', phase: 'training' };
    case 'error':
      return { ...run, status: 'error', error: { kind: msg.kind, message: msg.message }, finishedAt: now };
    case 'done':
      return { ...run, status: msg.reason === 'stopped' ? 'stopped' : 'done', phase: msg.reason, finishedAt: now };
  }
}

/**
 * What the run is doing, in words: the worker's phase (it names each: compiling, training,
 * evaluating, sampling, saving), except in the moment after the last step's metrics, before the
 * worker names what follows.
 */
export function runPhase(run: RunState): string {
  const done = run.latest ? run.latest.step + 1 : 0;
  if (run.status === 'running' && done >= run.config.steps && run.phase === 'training') return 'finishing after the last step';
  return run.phase;
}

/**
 * Seconds of training left: the steps left times the median time of the last (up to 10) measured
 * steps. The first step of a worker (it also compiles the backward pass) and steps beside runs that
 * were still compiling are slow outliers; a median of three or more steps is not moved by them.
 * Null before three measured steps or when not training.
 */
export function timeLeft(run: RunState): number | null {
  if (run.status !== 'running') return null;
  const times: number[] = [];
  const pts = run.train.slice(-11);
  for (let i = 1; i < pts.length; i++) {
    const a = pts[i - 1].elapsed_s;
    const b = pts[i].elapsed_s;
    if (a !== undefined && b !== undefined && b > a && pts[i].step === pts[i - 1].step + 1) times.push(b - a);
  }
  if (times.length < 3) return null;
  times.sort((x, y) => x - y);
  const mid = times.length >> 1;
  const perStep = times.length % 2 ? times[mid] : (times[mid - 1] + times[mid]) / 2;
  const left = run.config.steps - (run.train.at(-1)!.step + 1);
  return Math.max(0, left) * perStep;
}

export function firstLoss(run: RunState): number | null {
  return run.train.length ? run.train[0].loss : null;
}

/**
 * A run as stored across reloads: live statuses come back as `interrupted`, except a run whose
 * final checkpoint is stored (the page closed between it and "done": nothing is missing, the
 * worker posts the last evaluation and sample before it); fields added since it was saved get their defaults.
 */
export function restoredRun(saved: RunState): RunState {
  const run: RunState = { ...saved, quant: Array.isArray(saved.quant) ? saved.quant : [], storageError: saved.storageError ?? null };
  if (!isActive(run)) return run;
  if (run.checkpointStep !== null && run.checkpointStep >= run.config.steps) {
    return { ...run, status: 'done', phase: 'completed' };
  }
  // The page was closed or reloaded (the browser may have been closed: nothing tells the two apart).
  const at = run.latest ? run.latest.step + 1 : 0;
  const kept = run.checkpointStep === null ? 'no checkpoint was kept' : at > run.checkpointStep ? `the last checkpoint is of step ${run.checkpointStep}` : `checkpoint of step ${run.checkpointStep} kept`;
  return { ...run, status: 'interrupted', phase: `the page was closed after step ${at} (${kept})` };
}

/**
 * Bits per element and wire bytes of a run: as the worker computed them for the model it built (the
 * vocabulary follows the data), else from the config before the model exists.
 */
/**
 * The memory the engine's plan predicts for a run's config, per category (a LoRA run's frozen base:
 * weights only, its grads and optimizer the adapters'); null for a config the plan refuses.
 */
export function runPlannedMemory(config: RunConfig): MemReport | null {
  try {
    return planMemory(trainOptionsFor(config));
  } catch {
    return null;
  }
}

export function runAccounting(run: RunState): BitsAndWire {
  const c = run.config;
  return run.info?.accounting ?? bitsAndWire(resolveTrainingPlan({ model: c.model ?? PRESETS[c.preset], batch: c.batch, seq: c.seq, scheme: c.scheme, lora: c.lora, ...(c.lora && c.qlora ? { qlora: c.qlora } : {}), ...(c.checkpointActivations ? { checkpointActivations: true } : {}) }).model);
}

/**
 * A validation loss (nats per token) in bits per byte of the run's validation text, so character
 * and BPE runs compare; null where the page does not know the text's bytes (the bundled text).
 */
export function valBpb(run: RunState, loss: number): number | null {
  return lossBpb(run, loss, 'val');
}

/** A loss (nats per token) of the run's train or validation split in bits per byte of that split's text. */
export function lossBpb(run: RunState, loss: number, split: 'train' | 'val'): number | null {
  const d = run.config.data;
  return d && d.tokens[split] > 0 && d.bytes[split] > 0 ? bitsPerByte(loss, d.tokens[split], d.bytes[split]) : null;
}

/** The run's train or validation points with the loss in bits per byte (none where the bytes are unknown). */
export function pointsInBpb<P extends { loss: number }>(run: RunState, pts: readonly P[], split: 'train' | 'val'): P[] {
  const out: P[] = [];
  for (const p of pts) {
    const b = lossBpb(run, p.loss, split);
    if (b !== null) out.push({ ...p, loss: b });
  }
  return out;
}

/** `qerr_L<layer>_<kind>`: the CSV column of one (layer, kind)'s quantization error. */
export function quantColumn(r: Pick<QuantErrorRecord, 'layer' | 'kind'>): string {
  return `qerr_L${r.layer}_${r.kind}`;
}

/** Metrics as CSV: one row per step; validation loss and per-layer quantization error where they were measured. */
export function runCsv(run: RunState): string {
  const val = new Map(run.val.map((v) => [v.step, v.loss]));
  const quant = new Map(run.quant.map((q) => [q.step, new Map(q.errors.map((e) => [quantColumn(e), e.rel_err]))]));
  const qcols = [...new Set(run.quant.flatMap((q) => q.errors.map(quantColumn)))];
  const bpb = run.config.data ? ['val_bpb'] : [];
  const rows = [['step', 'loss', 'val_loss', ...bpb, 'lr', 'grad_norm', 'tokens_per_s', 'elapsed_s', ...qcols].join(',')];
  for (const p of run.train) {
    const q = quant.get(p.step);
    const v = val.get(p.step);
    const b = bpb.length ? [v === undefined ? '' : (valBpb(run, v) ?? '')] : [];
    rows.push([p.step, p.loss, v ?? '', ...b, p.lr, p.grad_norm, p.tokens_per_s ?? '', p.elapsed_s ?? '', ...qcols.map((c) => q?.get(c) ?? '')].join(','));
  }
  return rows.join('\n') + '\n';
}

export function runJson(run: RunState): string {
  const { id, label, config, status, info, train, val, samples, quant, error, startedAt, finishedAt, checkpointStep } = run;
  return JSON.stringify({
    id, label, config, status, info, metrics: train, val, quant_error: quant, bits_and_wire: runAccounting(run), samples, error, startedAt, finishedAt, checkpointStep,
  }, null, 2);
}
