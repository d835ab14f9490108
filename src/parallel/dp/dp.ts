/**
 * Data-parallel training over any Transport (loopback in tests, PeerJS/WebRTC in the lab): every
 * peer holds the whole model, trains on its own shard of each step's batch, and the peers average
 * their gradients — fp32 or AGoQ's INT8 codes, all-gathered, screened and reduced by every member
 * itself (verified-reduce.ts, screen.ts) — before the same optimizer step everywhere. After every
 * step (or every `hashEvery`) the peers compare a hash of their weights (computed on the GPU), judged by majority.
 *
 * A step: forward/backward on the peer's micro-batch(es) → verified mean of the gradients, on the GPU
 * over the model's gradient storage (gpu-contributions.ts) or read, reduced on the host and written
 * back (grads.ts) → clipping + AdamW on the GPU (the same bytes in, so the same weights out) → the
 * group's step report (member-group.ts).
 *
 * Data: step s has a global batch of world·accumulate·B rows; rank r's micro-batch j is rows
 * [(r·accumulate + j)·B, +B) (src/parallel/rank.ts): a function of (seed, step, rank, world) only,
 * so the rows re-shard by themselves when the membership changes.
 *
 * Membership, joins, state hand-over and the step reports are the group's (member-group.ts), which
 * DiLoCo's members run on too; this file is the per-step gradient exchange over it.
 */
import { GradExchange } from '../exchange/grad-exchange';
import type { RunTrainer } from '../../engine/train/run-trainer';
import type { Trainer } from '../../engine/train/trainer';
import { MemberTrainer } from '../member-trainer';
import { gradientAccess } from './grads';
import { MemberGroup } from './member-group';
import { applyGroupGradient, type GradientPath } from './step';
import { type DataParallelOptions, type DpStepStats, resolveOptions } from './types';
import type { PeerGroup } from '../../peers/collectives/group';
import type { PeerId, Transport } from '../../peers/transport/transport';

// The options, errors, events and stats live in types.ts; callers keep importing them from here.
export { type DataParallelOptions, DpError, type DpErrorCode, type DpEvent, type DpEventKind, type DpStepStats } from './types';

export class DataParallel extends MemberTrainer implements RunTrainer<DpStepStats> {
  readonly group: MemberGroup;
  private readonly path: GradientPath;

  constructor(trainer: Trainer, transport: Transport, opts: DataParallelOptions) {
    super(trainer);
    // Resolved here first: a bad option throws before the exchange's buffers are allocated.
    const o = resolveOptions(opts, transport.id);
    this.path = { grads: gradientAccess(trainer.model), gpu: o.exchange === 'gpu' ? GradExchange.forModel(trainer.model, o.mode) : null };
    this.group = new MemberGroup(trainer, transport, opts, {
      step: (g, s) => this.gradientStep(g, s),
      // The GPU exchange's buffers go with the run.
      release: () => {
        this.path.gpu?.destroy();
        this.path.gpu = null;
      },
    });
  }

  get id(): PeerId {
    return this.group.id;
  }

  get transport(): Transport {
    return this.group.transport;
  }

  /** crc32 of everything that must agree for bit-identical training (model, optimizer, data, mode). */
  get fingerprint(): number {
    return this.group.fingerprint;
  }

  /** Messages rejected so far (bad frames, bad control messages). */
  get rejected(): number {
    return this.group.rejected;
  }

  /** The current group's members (empty before the first group formed). */
  get currentMembers(): readonly PeerId[] {
    return this.group.currentMembers;
  }

  /**
   * Trains one step with the group: joins or forms a group first if needed, retries on a new group
   * when a peer leaves or stalls. Throws DpError when the run must stop on this peer.
   */
  step(o: { next?: boolean } = {}): Promise<DpStepStats> {
    return this.group.step(o);
  }

  /** Leaves the group (members drop this peer at once) and stops; the transport stays open. */
  stop(reason = 'stopped by the user'): void {
    this.group.stop(reason);
  }

  /** Nothing of its own to free once stopped (the exchange goes with the group's stop). */
  destroy(): void {}

  /** Per-step data parallel: this member's gradient, the group's mean of it, the optimizer step. */
  private gradientStep(g: PeerGroup, s: number) {
    const { group } = this;
    return applyGroupGradient(g, this.trainer, s, group.o, this.path, group.guard, (kind, peer, message) => (kind === 'suspect' ? group.accuse(peer, message) : group.event(kind, [peer], message)));
  }
}
