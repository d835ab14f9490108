/**
 * The one place a run's trainer is made for its parallel strategy (the run spec's `strategy`):
 * every entry point — npm run train, the page's worker, the headless peer, the group panel — asks
 * here, and runs what it gets with the engine's training loop (runTraining).
 *
 * - single: the engine's Trainer on this device.
 * - dp / diloco: a member of a peer group over its own Trainer (every member holds the whole model):
 *   DataParallel averages gradients every step, DiLoCo pseudo-gradients every H steps. The member's
 *   Trainer is built first, with `single` (compiling its pipelines blocks for seconds, so callers
 *   build it before they join), and handed in here with the transport.
 * - tp: this member's rank of a tensor-parallel run over a peer group (every member calls alike).
 */
import type { Runtime } from '../engine/gpu/runtime';
import type { Strategy } from '../engine/run/spec';
import type { GradWire } from '../engine/scheme/wire';
import type { TrainOptions } from '../engine/train/options';
import type { RunTrainer } from '../engine/train/run-trainer';
import { Trainer, type TrainerInit } from '../engine/train/trainer';
import type { PeerGroup } from '../peers/collectives/group';
import type { Transport } from '../peers/transport/transport';
import { DiLoCo } from './diloco/diloco';
import { DataParallel, type DataParallelOptions, type DpStepStats } from './dp/dp';
import { createTpTrainer } from './tp/group';
import type { TpTrainer } from './tp/trainer';

type Of<K extends Strategy['kind']> = Extract<Strategy, { kind: K }>;

/** What a trainer of its own is built from. */
export interface TrainerBuild {
  rt: Runtime;
  opts: TrainOptions;
  text: string;
  init?: TrainerInit;
}

/** What a group member is made of: its own Trainer, the transport to the group, the group's options. */
export interface MemberBuild {
  trainer: Trainer;
  transport: Transport;
  /** The gradient wire format is not among them: it is the trainer's plan's (the scheme's grads.wire). */
  options: Omit<DataParallelOptions, 'mode'>;
}

/** A data-parallel or DiLoCo member: the group's step over the member's Trainer, which the caller destroys. */
export interface GroupMember extends RunTrainer<DpStepStats> {
  readonly trainer: Trainer;
  /** Leaves the group; later steps throw. */
  stop(reason?: string): void;
  /** Frees what the member holds beside its Trainer (DiLoCo's outer state), once stopped. */
  destroy(): void;
}

export function createParallelTrainer(r: { strategy: Of<'single'> } & TrainerBuild): Promise<Trainer>;
export function createParallelTrainer(r: { strategy: Of<'tp'>; group: PeerGroup } & TrainerBuild): Promise<TpTrainer>;
export function createParallelTrainer(r: { strategy: Strategy } & MemberBuild): Promise<GroupMember>;
export async function createParallelTrainer(
  r: { strategy: Strategy } & (TrainerBuild | MemberBuild) & { group?: PeerGroup },
): Promise<RunTrainer<{ step: number }>> {
  const s = r.strategy;
  if (s.kind === 'single' || s.kind === 'tp') {
    if (!('rt' in r)) throw new Error(`a ${s.kind} trainer is built from options (rt, opts, text), not from a member's trainer`);
    if (s.kind === 'single') return Trainer.create(r.rt, r.opts, r.text, r.init);
    if (!r.group) throw new Error('a tensor-parallel rank needs its peer group');
    if (r.group.size !== s.size) throw new Error(`strategy tp over ${s.size} members, but the group has ${r.group.size}`);
    return createTpTrainer(r.rt, r.group, r.opts, r.text, r.init);
  }
  if (!('trainer' in r)) throw new Error(`a ${s.kind} member wraps its own Trainer (built with the single strategy) and a transport`);
  const { trainer, transport, options } = r;
  // The DiLoCo-or-DP choice, made here once.
  if (s.kind === 'diloco') {
    const { kind: _kind, ...diloco } = s;
    // The pseudo-gradients' wire format is the member's plan's, as data parallel's gradient wire is.
    const wire = trainer.plan.wire.diloco;
    if (wire !== s.wire) throw new Error(`strategy diloco sends pseudo-gradients as ${s.wire}, but this member's plan as ${wire ?? 'nothing (its trainer was not built for DiLoCo: memberInit)'}`);
    return new DiLoCo(trainer, transport, { ...options, diloco: { ...diloco, wire } });
  }
  const mode = dpWireOf(trainer);
  if (s.wire !== mode) throw new Error(`strategy dp sends gradients as ${s.wire}, but scheme '${trainer.plan.scheme.name}' as ${mode}`);
  return new DataParallel(trainer, transport, { ...options, mode });
}

/** What a member's own Trainer must be built with for the strategy it will train in (DiLoCo's wire in its plan). */
export function memberInit(s: Strategy): Pick<TrainerInit, 'diloco'> {
  return s.kind === 'diloco' ? { diloco: { wire: s.wire } } : {};
}

/** The gradient wire format of a data-parallel member: its trainer's plan's (the scheme's grads.wire). */
function dpWireOf(trainer: Trainer): GradWire {
  const mode = trainer.plan.wire.dp.format;
  if (!mode) throw new Error(`scheme '${trainer.plan.scheme.name}' asks for a gradient wire format no all-reduce carries`);
  return mode;
}
