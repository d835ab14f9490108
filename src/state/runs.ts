/**
 * One training run as the page sees it, and the pure reducer that folds worker messages into it.
 * Kept free of zustand and React so it can be tested in Node and reused by the later multi-run lab.
 */
import type { FromWorker, RunConfig, RunInfo, StepReport } from '../worker/protocol';

export type RunStatus = 'starting' | 'running' | 'stopping' | 'done' | 'stopped' | 'error';

export interface LossPoint {
  step: number;
  loss: number;
}

export interface TrainPoint extends LossPoint {
  lr: number;
  grad_norm: number;
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
  error: { kind: string; message: string } | null;
  startedAt: number;
  finishedAt: number | null;
}

export function newRun(id: string, config: RunConfig, now: number): RunState {
  return {
    id,
    label: `${config.preset} · b${config.batch} · t${config.seq}`,
    config,
    status: 'starting',
    phase: 'starting worker',
    info: null,
    train: [],
    val: [],
    latest: null,
    samples: [],
    error: null,
    startedAt: now,
    finishedAt: null,
  };
}

export function isActive(run: RunState): boolean {
  return run.status === 'starting' || run.status === 'running' || run.status === 'stopping';
}

/** Folds one worker message into a run; messages after the run ended are ignored. */
export function reduceRun(run: RunState, msg: FromWorker, now: number): RunState {
  if (!isActive(run)) return run;
  switch (msg.type) {
    case 'status':
      return { ...run, phase: msg.phase };
    case 'ready':
      return { ...run, info: msg.info, status: run.status === 'stopping' ? 'stopping' : 'running', phase: 'training' };
    case 'metrics': {
      const m = msg.metrics;
      const point = { step: m.step, loss: m.loss, lr: m.lr, grad_norm: m.grad_norm };
      return { ...run, latest: m, train: [...run.train, point] };
    }
    case 'val':
      return { ...run, val: [...run.val, { step: msg.step, loss: msg.loss }] };
    case 'sample':
      return { ...run, samples: [...run.samples, { step: msg.step, text: msg.text }] };
    case 'error':
      return { ...run, status: 'error', error: { kind: msg.kind, message: msg.message }, finishedAt: now };
    case 'done':
      return { ...run, status: msg.reason === 'stopped' ? 'stopped' : 'done', phase: msg.reason, finishedAt: now };
  }
}

export function firstLoss(run: RunState): number | null {
  return run.train.length ? run.train[0].loss : null;
}
