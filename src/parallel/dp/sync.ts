/**
 * A new group's sync (dp.ts): from every member's status, who holds the state the group goes on
 * from and who must receive it; then the hand-over itself. Apart from the driver because it is the
 * membership's one decision and its one bulk transfer, and neither needs the driver's own state.
 */
import type { FlatTrainingState, Trainer } from '../../engine/train/trainer';
import { digestOfParts, sameBytes } from '../../peers/collectives/digest';
import { decodeState, encodeState, type GroupStatus, lossScaleBytes, stateBytes } from './wire';
import { DpError, type DpEventKind } from './types';
import type { PeerGroup } from '../../peers/collectives/group';
import type { PeerId } from '../../peers/transport/transport';
import { compareHeldOut } from '../held-out';

const EMPTY = new Uint8Array(0);

/**
 * What a member vouches for at a sync: SHA-256 of the SHA-256s of step (u32 LE), weights, m and v, and
 * with loss scaling of the scaler's state (the state message's trailer): members whose scalers
 * diverged would average differently scaled gradients, so they must not count as agreeing.
 */
export async function stateDigest(s: FlatTrainingState): Promise<Uint8Array> {
  const f = (x: Float32Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  const step = new Uint8Array(4);
  new DataView(step.buffer).setUint32(0, s.step >>> 0, true);
  return digestOfParts([step, f(s.weights), f(s.m), f(s.v), ...(s.lossScale ? [lossScaleBytes(s.lossScale)] : [])]);
}

const hex = (b: Uint8Array) => [...b.subarray(0, 4)].map((x) => x.toString(16).padStart(2, '0')).join('');

/**
 * Who sends the state (a rank) to which ranks; or, when the members' views differ, the peers all of
 * them saw. `unvouched`: no majority vouched for the source's state (a group starting together
 * without one), so each receiver adopts it only if it is no worse than its own (checkClaimedState).
 */
export type SyncVerdict = { src: number; needy: number[]; outvoted: PeerId[]; unvouched?: true } | { agreedView: PeerId[]; why: string };

/**
 * The sync's verdict from the members' statuses, alike on every member. Throws DpError when the run
 * must stop: a member trains another configuration, or no majority of the established members
 * vouches for one state (step and state digest). `outvoted`: established members whose state the majority does not hold
 * (they receive the majority's; a forged "ahead" state is never adopted).
 */
export function syncVerdict(g: PeerGroup, st: GroupStatus[], fingerprint: number, epoch: number, stepIndex: number): SyncVerdict {
  const alien = g.members.filter((_, r) => st[r].fingerprint !== fingerprint);
  if (alien.length) {
    throw new DpError('config-mismatch', `${alien.join(', ')} train${alien.length === 1 ? 's' : ''} with another configuration (model, optimizer, data, seed, batch or mode): a group needs the same run on every peer`, stepIndex, alien);
  }
  const same = (x: GroupStatus) => x.epoch === epoch && x.members.length === g.size && x.members.every((p, i) => p === g.members[i]);
  const other = st.findIndex((x) => !same(x));
  if (other >= 0) {
    // Views differ (a leave not yet seen everywhere, an admission half done): all retry with the
    // peers a strict majority of the views holds, which every member computes alike from these
    // statuses; one status that leaves a member out evicts nobody (issue 38) and is named.
    const agreedView = g.members.filter((p) => st.filter((x) => x.members.includes(p)).length * 2 > st.length);
    const omits = g.members.filter((_, r) => agreedView.some((p) => !st[r].members.includes(p)));
    return {
      agreedView,
      why: `${g.members[other]} sees another group (epoch ${st[other].epoch}: ${st[other].members.join(', ')})${omits.length ? `; ${omits.join(', ')} left out members the majority holds` : ''}`,
    };
  }
  const ranks = g.members.map((_, r) => r);
  const est = ranks.filter((r) => st[r].established);
  // A group starting together (nothing trained in a group yet) votes among all its members, the
  // others among the established ones: the state a strict majority holds, never the state of the
  // one that claims the furthest step (issue 38: an insider in the starting quorum set the start).
  // Starting together without a majority (e.g. two members, one resumed from a checkpoint): the
  // highest step is offered, one member's word only, so every receiver checks it against its own
  // state on the held-out batches before adopting it, and refuses a worse one (handOver).
  const voters = est.length === 0 ? ranks : est;
  if (est.length === 0) {
    const n = (r: number) => voters.filter((q) => st[q].step === st[r].step && sameBytes(st[q].stateDigest, st[r].stateDigest)).length;
    if (!voters.some((r) => n(r) * 2 > voters.length)) {
      const top = Math.max(...ranks.map((r) => st[r].step));
      const src = ranks.find((r) => st[r].step === top)!;
      return { src, needy: ranks.filter((r) => st[r].step !== top || !sameBytes(st[r].stateDigest, st[src].stateDigest)), outvoted: [], unvouched: true };
    }
  }
  // State adoption by majority: the (step, state digest) that a strict majority of the established
  // members vouch for; never the state of the one that claims the highest step.
  const votes = new Map<string, number[]>();
  for (const r of voters) {
    const k = `${st[r].step}:${[...st[r].stateDigest].join(',')}`;
    votes.set(k, [...(votes.get(k) ?? []), r]);
  }
  const best = [...votes.values()].sort((a, b) => b.length - a.length)[0];
  const show = [...votes.values()].map((rs) => `step ${st[rs[0]].step} state ${hex(st[rs[0]].stateDigest)}… on ${rs.map((r) => g.members[r]).join(', ')}`).join('; ');
  if (best.length * 2 <= voters.length) {
    const all = voters.map((r) => g.members[r]);
    throw new DpError('diverged', `no majority of the established members vouches for one state when forming epoch ${epoch} (${show}); nothing adopted. The run stops on this peer, its weights as they are.`, stepIndex, all);
  }
  const src = best[0];
  const outvoted = voters.filter((r) => !best.includes(r)).map((r) => g.members[r]);
  const needy = ranks.filter((r) => !best.includes(r));
  return { src, needy, outvoted };
}

type OnEvent = (kind: DpEventKind, peers: PeerId[], message: string) => void;

/**
 * How much higher than its own held-out loss an unvouched starting state's may be and still be
 * adopted (relative). Small, not zero: two honest checkpoints of one run a few steps apart can
 * measure within a fraction of a percent of each other on a few batches, and refusing then would
 * stop a run for noise; a state worse by more is refused, and an insider gains at most this much.
 */
export const START_LOSS_TOLERANCE = 0.01;

/**
 * Whether a receiver adopts an unvouched state, from both held-out losses (the same batches, so
 * alike on members holding the same own state): a finite claimed loss at most
 * `tolerance` × |own| above its own (any finite one when its own is not finite). Null: adopt; else why not.
 */
export function judgeClaimedState(own: number, claimed: number, tolerance = START_LOSS_TOLERANCE): string | null {
  if (!Number.isFinite(claimed)) return `its held-out loss is ${claimed}`;
  if (!Number.isFinite(own)) return null;
  const bound = own + tolerance * Math.abs(own);
  return claimed <= bound ? null : `its held-out loss ${claimed.toPrecision(5)} is above this peer's own ${own.toPrecision(5)} (+${(100 * tolerance).toFixed(1)} % allowed)`;
}

/** The source's state to the needy ranks, in rounds of `roundBytes`; validated before use. */
export async function handOver(
  g: PeerGroup, trainer: Trainer, src: number, needy: number[], announced: GroupStatus, roundBytes: number, event: OnEvent,
  o: { checkDigest: boolean; unvouched?: boolean } = { checkDigest: true },
): Promise<void> {
  const n = trainer.model.layout.totalFloats;
  // Same plan on every member (the fingerprint), so all agree whether the state carries the scaler.
  const lossScaled = Boolean(trainer.plan.model.lossScale);
  const total = stateBytes(n, lossScaled);
  const R = roundBytes;
  const rounds = Math.ceil(total / R);
  const payload = g.rank === src ? encodeState(await trainer.trainingState()) : null;
  const iNeed = needy.includes(g.rank);
  const got = iNeed ? new Uint8Array(total) : null;
  for (let i = 0; i < rounds; i++) {
    const piece = payload ? payload.subarray(i * R, Math.min(total, (i + 1) * R)) : EMPTY;
    const recv = await g.allToAll(g.members.map((_, r) => (needy.includes(r) ? piece : EMPTY)));
    if (got) {
      const want = Math.min(total, (i + 1) * R) - i * R;
      if (recv[src].length !== want) {
        rejectState(g, trainer, src, `round ${i} carried ${recv[src].length} B, expected ${want}`, event);
      }
      got.set(recv[src], i * R);
    }
  }
  if (g.rank === src) event('state-sent', needy.map((r) => g.members[r]), `state of step ${announced.step} (${total} B)`);
  if (!got) return;
  let state;
  try {
    state = decodeState(got, { n, step: announced.step, weightsHash: announced.weightsHash, lossScaled });
  } catch (e) {
    rejectState(g, trainer, src, (e as Error).message, event);
  }
  // The weights hash is checked by decodeState; the digest covers the Adam moments and the step too.
  if (o.checkDigest && !sameBytes(await stateDigest(state), announced.stateDigest)) rejectState(g, trainer, src, 'state digest differs from the one the majority vouched for', event);
  let how = '';
  if (o.unvouched) {
    // One member's word (no majority at a start): compared on the run's held-out batches with this
    // member's own weights, which are put back as they were; a worse state stops this member.
    const l = await compareHeldOut(trainer, state.weights, 0);
    const why = judgeClaimedState(l.own, l.other);
    const on = `on ${l.split === 'val' ? 'the held-out batches' : 'fixed training batches (the run has no validation split)'}`;
    if (why) {
      const from = g.members[src];
      const msg = `state of step ${state.step} that ${from} claims, which no majority vouched for, refused ${on}: ${why}. Nothing adopted; the run stops on this peer, its weights as they are.`;
      event('state-rejected', [from], msg);
      throw new DpError('state-rejected', msg, trainer.stepIndex, [from]);
    }
    how = ` (no majority vouched for it: held-out loss ${l.other.toPrecision(5)}, this peer's own ${l.own.toPrecision(5)}, ${on})`;
  }
  trainer.restoreTrainingState(state);
  event('state-received', [g.members[src]], `state of step ${state.step} from ${g.members[src]}${how}`);
}

function rejectState(g: PeerGroup, trainer: Trainer, src: number, why: string, event: OnEvent): never {
  const from = g.members[src];
  event('state-rejected', [from], why);
  throw new DpError('state-rejected', `state from ${from} rejected, nothing applied: ${why}`, trainer.stepIndex, [from]);
}
