/**
 * The peer group a data-parallel or DiLoCo member trains in, over any Transport (loopback in tests,
 * PeerJS/WebRTC in the lab): its membership, its state, its step reports. What a group step does is
 * the stepper's (GroupStepper): data parallel's gradient mean and optimizer step (dp.ts), DiLoCo's
 * outer step (diloco/diloco.ts). After every group step the members all-gather step reports (loss,
 * weights hash, joiners) and compare the hashes, judged by majority; members whose contributions
 * fault, keep failing the screen, or whose weights leave the majority's are removed at the step's
 * end, alike on every member.
 *
 * Membership (channels.ts): one PeerGroup per epoch. A new group begins with a sync: an
 * all-gather of each peer's (step, weights hash, established?); the state a strict majority of the
 * established members vouches for is handed to whoever differs (sync.ts), validated whole before
 * anything is applied (at a start without a majority, adopted only where its held-out loss is no
 * worse than the receiver's own). A group ends when a member is gone (leave, BYE), silent for `silenceMs`, or a
 * collective fails (the survivors retry the step in the next epoch; a slow but heartbeating member is
 * waited for up to the collective timeout); or when joiners are admitted: a joiner sends HELLO, once
 * a strict majority of the step reports list it every member sends WELCOME (the joiner enters on a
 * majority's) and all form the next epoch at the next step.
 */
import { inMemoryData } from '../../engine/train/data/data';
import type { Trainer } from '../../engine/train/trainer';
import { crc32 } from '../../peers/collectives/crc32';
import { EpochChannels } from './channels';
import { gradientAccess } from './grads';
import { Accusations, admitByMajority, JoinRequests, Withholding } from './joins';
import { Joiner } from './joiner';
import { MemberGuard } from '../../peers/collectives/screen';
import { checkHashes, stepStats } from './step';
import { handOver, stateDigest } from './sync';
import { encodeTuneTable, TuneShareInbox } from './tune-share';
import { agreedReports, agreedSyncVerdict, agreeStatements, signMembers } from './agreement';
import {
  type Applied, type DataParallelOptions, DpError, type DpEvent, type DpEventKind, type DpStepStats, type Plan, type Reported,
  resolveOptions, type ResolvedOptions, type StepBegin,
} from './types';
import {
  type ControlMessage, decodeControl, decodeStatus, DpKind, DP_VERSION, encodeControl, encodeReport,
  encodeStatus, fingerprintOf, type GroupStatus, MAX_EPOCH, type StepReport, weightsHash,
} from './wire';
import { CollectiveError, PeerGroup } from '../../peers/collectives/group';
import type { PeerId, Transport, Unsubscribe } from '../../peers/transport/transport';
import type { Identity } from '../../peers/room/identity';

/**
 * What a group step does, and what else the members hold alike: data parallel's gradient step
 * (dp.ts), DiLoCo's outer step (diloco/diloco.ts).
 */
export interface GroupStepper {
  /** Enters the run's fingerprint beside the group's own fields (what else must agree). */
  fingerprint?: Record<string, unknown>;
  /** The group step at trainer step s with group g; re-run with the next group when a collective fails. */
  step(g: PeerGroup, s: number): Promise<Applied>;
  /** State beyond the trainer's that every member holds alike (DiLoCo's outer state); absent: the trainer's weights. */
  shared?: SharedState;
  /** Frees the stepper's buffers: called once the group has stopped and no step is in flight. */
  release?(): void;
}

/**
 * A state every member holds alike instead of the local weights (DiLoCo's θ_global and outer
 * momentum): the syncs and step reports compare `hash`, and a member that receives the trainer
 * state also receives this one through `handOver`: first, because it names the hash of the source's
 * local weights that the trainer state is checked against; applied after it.
 */
export interface SharedState {
  hash(): Promise<number>;
  /** SHA-256 of the shared state: what a sync's majority vouches for. */
  digest(): Promise<Uint8Array>;
  /** The shared state to `needy`, checked against `digest` (the vouched one) before it is applied. */
  handOver(g: PeerGroup, src: number, needy: number[], digest: Uint8Array): Promise<{ weightsHash: number; apply(): void } | null>;
}

export class MemberGroup {
  readonly id: PeerId;
  /** crc32 of everything that must agree for bit-identical training (model, optimizer, data, mode). */
  readonly fingerprint: number;
  /** Messages rejected so far (bad frames, bad control messages). */
  rejected = 0;
  /** The options with their defaults. */
  readonly o: ResolvedOptions;
  /** Strikes and bans of members (a stepper records its screen's exclusions here). */
  readonly guard: MemberGuard;
  private readonly channels: EpochChannels;
  private group: PeerGroup | null = null;
  private plan: Plan | null = null;
  private epoch = 0;
  /** When the current group formed (Date.now): silence is counted from here at the earliest. */
  private groupSince = 0;
  /** Group steps taken by the current group (its frames are tagged with them; the sync is 0). */
  private groupSteps = 0;
  private members: PeerId[] = [];
  /** When members saw different groups at a sync: the peers all of them saw (the next group's). */
  private agreedView: PeerId[] | null = null;
  /** Why the current group can no longer complete a collective (null: it can). */
  private broken: string | null = null;
  private established = false;
  private readonly joins = new JoinRequests();
  /** Members this peer saw abuse from since its last report (flood over the mailbox bound, withholding). */
  private accusing = new Set<PeerId>();
  private readonly accusations: Accusations;
  /** Agreed absences (a STATUS or REPORT no honest member received in time) per member, for removal. */
  private readonly withholding: Withholding;
  /** This peer's side of its own admission (HELLO until a majority's WELCOME). */
  private readonly joiner: Joiner;
  /** When this member last answered a peer's HELLO with a CLAIM (one per heartbeat per peer). */
  private readonly claimed = new Map<PeerId, number>();
  /** Tuning tables (tune-share.ts): this member's own, as messages, sent once per peer in the run; the peers' as they come. */
  private readonly tuneOut: Uint8Array[];
  private readonly tuneSentTo = new Set<PeerId>();
  private readonly tuneIn: TuneShareInbox | null;
  private fatal: Error | null = null;
  private running = false;
  private events: DpEvent[] = [];
  private readonly heartbeat: ReturnType<typeof setInterval>;
  private readonly unsub: Unsubscribe[] = [];

  constructor(
    private readonly trainer: Trainer,
    readonly transport: Transport,
    private readonly opts: DataParallelOptions,
    private readonly stepper: GroupStepper,
  ) {
    this.id = transport.id;
    this.o = resolveOptions(opts, this.id);
    const o = this.o;
    const grads = gradientAccess(trainer.model);
    this.guard = new MemberGuard(o.screen.strikes, o.restartIntervalMs);
    this.accusations = new Accusations(o.screen.strikes);
    this.withholding = new Withholding(o.screen.strikes);
    const t = trainer.opts;
    const tokens = inMemoryData(trainer.data).tokens;
    this.fingerprint = fingerprintOf({
      protocol: DP_VERSION, run: o.run, mode: o.mode, screen: o.screen, accumulate: o.accumulate, bucketFloats: o.bucketFloats,
      model: t.model, batch: t.batch, seq: t.seq, seed: t.seed, optimizer: t.optimizer, scheme: t.scheme ?? null,
      exchange: grads.length, storage: grads.storage, backend: o.exchange, ...stepper.fingerprint,
      data: crc32(new Uint8Array(tokens.buffer, tokens.byteOffset, tokens.byteLength)),
      // Loss scaling hangs on the device too (an f16 scheme scales only where shader-f16 runs it): members must
      // agree, or they would average differently scaled gradients. Absent without it: fp32 runs' fingerprint as before.
      ...(trainer.plan.model.lossScale ? { lossScale: trainer.plan.model.lossScale } : {}),
    });
    const share = opts.tuneShare;
    this.tuneOut = share && share.table.families.length ? encodeTuneTable(share.table) : [];
    this.tuneIn = share ? new TuneShareInbox((from, t) => share.accept(from, t), (from, why) => this.reject(from, why), (from, m) => this.event('tuning', [from], m)) : null;
    this.joiner = new Joiner({
      id: this.id, run: o.run, fingerprint: this.fingerprint, heartbeatMs: o.heartbeatMs, joinTimeoutMs: o.joinTimeoutMs, transport, joins: this.joins,
      identity: () => this.identity, stepIndex: () => trainer.stepIndex,
      send: (p, m) => this.sendControl(p, m), reject: (p, why) => this.reject(p, why), event: (k, p, m) => this.event(k, p, m),
    });
    const runTag = crc32(new TextEncoder().encode(`dp-run:${o.run}`)) >>> 16;
    this.channels = new EpochChannels(transport, runTag, (from, p) => this.control(from, p), (from, why) => this.reject(from, why));
    this.unsub.push(transport.onPeerLeave((p) => {
      this.joins.gone(p);
      if (this.members.includes(p)) this.breakGroup(`${p} left`);
    }));
    this.heartbeat = setInterval(() => this.beat(), o.heartbeatMs);
    (this.heartbeat as { unref?: () => void }).unref?.();
  }

  /**
   * Forms the planned group now, if there is one to form (joining first when this peer has none):
   * DiLoCo forms it right after an outer step, where every member holds θ_global.
   */
  async formGroup(): Promise<void> {
    await this.step({ formOnly: true });
  }

  /** This member's signing key (the transport's: its id commits to it). */
  private get identity(): Identity {
    const id = this.transport.identity;
    if (!id) throw new Error('MemberGroup: the transport has no signing identity');
    return id;
  }

  /** The formed group while it can still run collectives (DiLoCo's streamed fragments use it between steps). */
  get activeGroup(): PeerGroup | null {
    return this.broken ? null : this.group;
  }

  /** A collective run outside a step failed: the next step regroups first. */
  invalidate(reason: string): void {
    this.breakGroup(reason);
  }

  /** The current group's members (empty before the first group formed). */
  get currentMembers(): readonly PeerId[] {
    return this.members;
  }

  /**
   * Trains one step with the group: joins or forms a group first if needed, retries on a new group
   * when a peer leaves or stalls. Throws DpError when the run must stop on this peer.
   */
  async step(o: { next?: boolean; formOnly?: boolean } = {}): Promise<DpStepStats> {
    if (this.fatal) throw this.fatal;
    if (this.running) throw new Error('DataParallel.step: the previous step has not finished');
    this.running = true;
    this.events = [];
    const begin = { t0: performance.now(), sent: this.transport.stats.bytesSent, received: this.transport.stats.bytesReceived };
    let s = this.trainer.stepIndex;
    const wasMember = this.established;
    let applied: Applied | null = null;
    let appliedBy: readonly PeerId[] = [];
    try {
      for (let attempt = 1; ; attempt++) {
        try {
          if (!this.group) await this.regroup();
          if (this.trainer.stepIndex !== s) {
            // A member's step was completed while regrouping (it had applied it before the failure,
            // or received the state after it); a joiner takes part in the group's current step.
            // It counts for the group that trained it, not the one it regrouped into.
            if (wasMember) return this.stepStats(s, begin, applied, null, appliedBy);
            s = this.trainer.stepIndex;
          }
          if (o.formOnly) return this.stepStats(s, begin, null, null);
          const r = await this.trainOnce(s, (a) => ((applied = a), (appliedBy = [...this.members])));
          return this.stepStats(s, begin, applied, r);
        } catch (e) {
          if (this.fatal) throw this.fatal;
          if (!(e instanceof CollectiveError)) throw e;
          if (attempt >= this.o.maxAttempts) {
            throw new DpError('regroup-failed', `step ${s}: gave up after ${attempt} attempts; last failure: ${e.message}`, s, this.members);
          }
          this.fault(e);
        }
      }
    } catch (e) {
      this.stopWith(e instanceof Error ? e : new Error(String(e)));
      throw this.fatal;
    } finally {
      this.running = false;
      if (this.fatal) this.release();
    }
  }

  private stepStats(s: number, begin: StepBegin, a: Applied | null, report: Reported | null, by: readonly PeerId[] = this.members): DpStepStats {
    const { id, epoch, transport, events } = this;
    return stepStats({ id, members: by.length ? by : this.members, epoch, mode: this.o.mode, transport, events }, s, begin, a, report);
  }

  /** Leaves the group (members drop this peer at once) and stops; the transport stays open. */
  stop(reason = 'stopped by the user'): void {
    this.stopWith(new DpError('stopped', reason, this.trainer.stepIndex, [this.id]));
  }

  // ---- one step in a formed group ----

  private async trainOnce(s: number, onApplied: (a: Applied) => void): Promise<Reported> {
    if (this.broken) throw new CollectiveError('closed', this.broken);
    const g = this.group!;
    // Group step 0 is the sync; then one by one (a frame may be at most one group step ahead of its
    // receiver, and DiLoCo's group steps are H trainer steps apart). Data parallel's count is its
    // trainer steps since the group formed: a group that fails a step ends.
    g.setStep(++this.groupSteps);
    const applied = await this.stepper.step(g, s);
    onApplied(applied);
    const { loss, weightsHash: hash } = applied;
    const hashed = hash !== null;

    const joiners = this.joins.joiners(g.members, this.transport.peers());
    const accused = [...this.accusing].filter((p) => g.members.includes(p) && p !== this.id).sort();
    this.accusing.clear();
    // Signed and echoed as the sync's statuses: admission, accusations and the hash check are
    // decided from the same reports on every honest member; one that signed two is removed.
    const agreed = await agreeStatements(g, encodeReport({ step: s + 1, weightsHash: hash, loss, joiners, accused }), { domain: 'report', lastHeard: (p) => this.channels.lastHeard(p) });
    this.noteWithheld(g, agreed.absent, `after step ${s}`);
    const { reports: signed, removed: liars, suspects } = agreedReports(g, agreed, s);
    for (const [p, why] of suspects) this.event('suspect', [p], why);
    if (liars.length) {
      // The step itself is applied alike; its admissions, accusations and hash check wait for the next group's step.
      const kept = signed.filter((r): r is StepReport => r !== null);
      this.remove(g, [...(applied.removed ?? []), ...liars]);
      return { groupLoss: kept.reduce((a, r) => a + r.loss, 0) / kept.length, weightsHash: hash };
    }
    const reports = signed as StepReport[];
    const odd = hashed ? checkHashes(g, reports, s) : [];
    this.admit(g, reports);
    const abusers = this.accusations.record(g.members, reports.map((r) => r.accused))
      .map((p): [PeerId, string] => [p, `accused by a majority (flooding, withholding, or a DiLoCo pseudo-gradient that failed the held-out check), ${this.o.screen.strikes} steps in a row`]);
    this.remove(g, [...(applied.removed ?? []), ...odd.map((p): [PeerId, string] => [p, `weights diverged from the majority's after step ${s}`]), ...abusers]);
    return { groupLoss: reports.reduce((a, r) => a + r.loss, 0) / reports.length, weightsHash: hash };
  }

  /**
   * Joiners a strict majority of the reports list enter at the next step (one report leaving a
   * joiner out vetoes nobody, and its sender is named); every member welcomes them, so a welcomer
   * that withholds its WELCOME stalls nobody.
   */
  private admit(g: PeerGroup, reports: StepReport[]): void {
    const { admitted: everyone, omitted } = admitByMajority(g.members, reports.map((r) => r.joiners));
    const members = [...g.members, ...everyone].sort();
    if (everyone.length === 0 || members.length > 8) return;
    const epoch = this.nextEpoch(g.members);
    const msg = encodeControl({ kind: DpKind.Welcome, fingerprint: this.fingerprint, epoch, members, ...signMembers(this.identity, 'welcome', this.fingerprint, epoch, members) });
    for (const p of everyone) this.sendControl(p, msg);
    if (g.members[0] === this.id) this.event('welcomed', everyone, `welcomed into epoch ${epoch}`);
    if (omitted.length) this.event('suspect', omitted, `${omitted.join(', ')} left out joiners the majority lists (${everyone.join(', ')})`);
    this.joins.admitted(everyone);
    this.event('admitted', everyone, `${everyone.join(', ')} join at step ${this.trainer.stepIndex}`);
    this.endGroup();
    this.plan = { epoch, members };
  }

  /**
   * Members whose signed statement no honest member holds (agreement.ts: alike on all of them) are
   * named; the decision then leaves them out of the next group, and `strikes` such absences in the
   * run remove them for it.
   */
  private noteWithheld(g: PeerGroup, absent: readonly number[], when: string): void {
    const peers = absent.map((r) => g.members[r]).filter((p) => p !== this.id);
    if (peers.length === 0) return;
    this.event('suspect', peers, `${peers.join(', ')} withheld ${when} from every member (nobody holds its signed statement)`);
    for (const [p, n] of this.withholding.record(peers)) {
      const why = `withheld its signed status or report from every member ${n} times`;
      this.guard.ban(p, why);
      this.joins.gone(p);
      this.event('removed', [p], `${p} removed: ${why}`);
    }
  }

  /** Members removed by the step's checks (alike on every member) leave the group now, for good. */
  private remove(g: PeerGroup, out: [PeerId, string][]): void {
    if (out.length === 0) return;
    for (const [p, why] of out) {
      this.guard.ban(p, why);
      this.joins.gone(p);
      this.event('removed', [p], `${p} removed: ${why}`);
    }
    if (out.some(([p]) => p === this.id)) throw new DpError('removed', `this peer was removed by the group: ${out.find(([p]) => p === this.id)![1]}`, this.trainer.stepIndex, [this.id]);
    const members = (this.plan?.members ?? g.members).filter((p) => !out.some(([q]) => q === p));
    const epoch = this.plan?.epoch ?? this.nextEpoch(g.members);
    this.endGroup();
    this.plan = { epoch, members };
  }

  // ---- forming groups ----

  private async regroup(): Promise<void> {
    if (!this.plan) {
      if (this.established) throw new Error('DataParallel: no group and no plan (internal)');
      if (this.opts.members) this.plan = { epoch: 1, members: [...new Set(this.opts.members)].sort() };
      else if (this.transport.peers().length === 0) this.plan = { epoch: 1, members: [this.id] };
      else this.plan = await this.joiner.join();
    }
    const { epoch, members } = this.plan;
    this.endGroup();
    const view = this.channels.open(epoch);
    const g = new PeerGroup(view, {
      runId: this.channels.runId(epoch), members, timeoutMs: this.o.collectiveTimeoutMs, chunkPayload: this.o.chunkPayload,
      onReject: (p, why) => this.reject(p, why),
      onAbuse: (p, why) => this.accuse(p, why),
    });
    this.channels.release();
    this.group = g;
    this.groupSince = Date.now();
    this.epoch = epoch;
    this.members = [...g.members];
    this.plan = null;
    await this.sync(g);
    this.joins.synced();
    this.established = true;
    this.groupSteps = 0;
    this.event('formed', this.members, `epoch ${epoch}: ${this.members.join(', ')}`);
    this.shareTuning();
  }

  /** Sends this member's tuning table to the group's members it has not sent it to in this run. */
  private shareTuning(): void {
    if (this.tuneOut.length === 0) return;
    for (const p of this.members) {
      if (p === this.id || this.tuneSentTo.has(p)) continue;
      this.tuneSentTo.add(p);
      for (const m of this.tuneOut) this.sendControl(p, m);
    }
  }

  /** The new group's first collective: agree on the state, hand it to whoever differs. */
  private async sync(g: PeerGroup): Promise<void> {
    const { trainer } = this;
    const t0 = performance.now();
    const state = await trainer.trainingState();
    const { shared } = this.stepper;
    const mine: GroupStatus = {
      fingerprint: this.fingerprint, epoch: this.epoch, members: [...g.members], step: state.step,
      established: this.established,
      // DiLoCo's members share θ_global and the outer momentum, not their local weights and Adam moments.
      weightsHash: shared ? await shared.hash() : weightsHash(state.weights),
      stateDigest: shared ? await shared.digest() : await stateDigest(state),
    };
    // Signed and echoed (agreement.ts): every honest member decides from the same signed statuses,
    // and a member that signed two different ones is proven to and removed by all (issue 38).
    // The last status is waited for at least 4 × what this member's own took (reading back and hashing the
    // state), at least 2 s: a slower device is no withholder; one sent to nobody is absent alike everywhere.
    const agreed = await agreeStatements(g, encodeStatus(mine), { domain: 'status', lastSenderMs: Math.max(2000, 4 * (performance.now() - t0)), lastHeard: (p) => this.channels.lastHeard(p) });
    this.noteWithheld(g, agreed.absent, `at the sync of epoch ${this.epoch}`);
    const { verdict: v, removed, suspects } = agreedSyncVerdict(g, agreed, this.fingerprint, this.epoch, trainer.stepIndex);
    for (const [p, why] of suspects) this.event('suspect', [p], why);
    for (const [p, why] of removed) {
      this.guard.ban(p, why);
      this.joins.gone(p);
      this.event('removed', [p], `${p} removed: ${why}`);
    }
    const st = agreed.bodies.map((b) => (b ? decodeStatus(b) : null));
    if ('agreedView' in v) {
      this.agreedView = v.agreedView;
      throw new CollectiveError('invalid-payload', v.why);
    }
    if (v.outvoted.length) this.event('outvoted', v.outvoted, `${v.outvoted.join(', ')}: state not vouched for by the majority; resynced`);
    if (v.needy.length) {
      // A shared state is checked against the vouched digest; the trainer state then against the source's local weights hash.
      const src = st[v.src]!;
      const outer = await shared?.handOver(g, v.src, v.needy, src.stateDigest);
      const announced = outer ? { ...src, weightsHash: outer.weightsHash } : src;
      await handOver(g, trainer, v.src, v.needy, announced, this.o.stateRoundBytes, (k, p, m) => this.event(k, p, m), { checkDigest: !outer, unvouched: v.unvouched });
      outer?.apply();
    }
  }

  // ---- faults ----

  /** A collective failed: close the group and plan the next one without the peers that are gone. */
  private fault(e: CollectiveError): void {
    const old = this.agreedView ?? this.members;
    this.agreedView = null;
    const silent = this.silentMembers();
    const why = this.broken ?? e.message;
    this.endGroup();
    if (!this.established && !this.opts.members) {
      // A welcomed joiner whose first group failed asks again rather than guess the membership.
      this.event('fault', old, `joining failed: ${why}; asking again`);
      this.plan = null;
      return;
    }
    const connected = new Set(this.transport.peers());
    const gone = old.filter((p) => p !== this.id && (
      !connected.has(p) || this.joins.isExcluded(p) || silent.includes(p) || this.guard.bannedWhy(p) !== null || (e.code === 'invalid-payload' && e.peer === p)));
    const members = old.filter((p) => !gone.includes(p));
    this.event('fault', old, `step ${this.trainer.stepIndex} failed: ${why}`);
    if (gone.length) this.event('dropped', gone, `dropped ${gone.join(', ')}`);
    this.plan = { epoch: this.nextEpoch(members), members };
  }

  /** Past the current epoch and any epoch a member has already moved to (so failed peers meet again). */
  private nextEpoch(members: readonly PeerId[]): number {
    const e = Math.max(this.epoch + 1, ...members.filter((p) => p !== this.id).map((p) => this.channels.epochOf(p)));
    if (e > MAX_EPOCH) throw new DpError('regroup-failed', `run '${this.o.run}' used up its ${MAX_EPOCH} group epochs`, this.trainer.stepIndex);
    return e;
  }

  /**
   * The group lost a member: a collective in flight fails now (instead of at its timeout), and the
   * next step regroups before computing anything.
   */
  private breakGroup(reason: string): void {
    if (!this.group) return;
    this.broken ??= reason;
    this.group.close();
  }

  private endGroup(): void {
    this.broken = null;
    this.group?.close();
    this.group = null;
    this.channels.closeEpoch();
  }

  // ---- control channel ----

  private control(from: PeerId, payload: Uint8Array): void {
    let m: ControlMessage;
    try {
      m = decodeControl(payload);
    } catch (e) {
      return this.reject(from, `control message: ${(e as Error).message}`);
    }
    switch (m.kind) {
      case DpKind.Hello:
        if (this.guard.bannedWhy(from) !== null) {
          this.sendControl(from, encodeControl({ kind: DpKind.Refuse, reason: `removed from run '${this.o.run}': ${this.guard.bannedWhy(from)}` }));
          return this.reject(from, 'hello from a removed member');
        }
        if (m.fingerprint !== this.fingerprint) {
          this.sendControl(from, encodeControl({ kind: DpKind.Refuse, reason: `run '${this.o.run}' trains with another configuration (model, optimizer, data, seed, batch or mode)` }));
          this.event('refused', [from], `${from} asked to join with another configuration`);
          return;
        }
        this.joiner.heardFrom(from);
        switch (this.joins.hello(from, this.members.includes(from) && from !== this.id, () => this.guard.allowRestart(from))) {
          case 'too-soon': return this.reject(from, `hello again within ${this.o.restartIntervalMs} ms: ignored`);
          case 'restart': return this.breakGroup(`${from} restarted`);
          case 'request': return this.claim(from);
          default: return;
        }
      case DpKind.Claim:
        return this.joiner.claim(from, m);
      case DpKind.Welcome:
        return this.joiner.welcomeFrom(from, m);
      case DpKind.Refuse:
        return this.joiner.refuse(from, m.reason);
      case DpKind.Bye:
        this.joins.bye(from, this.members.includes(from));
        if (this.members.includes(from)) this.breakGroup(`${from} left the group: ${m.reason}`);
        return;
      case DpKind.Heartbeat:
        return; // the channels noted the time
      case DpKind.TuneShare:
        if (!this.tuneIn) return; // this member takes no tables (its caller did not ask)
        if (!this.members.includes(from) || from === this.id) return this.reject(from, 'tuning table from a peer outside the group');
        return this.tuneIn.receive(from, m, payload.length);
    }
  }

  /** Answers a joiner's HELLO with this member's signed group (at most once a heartbeat per peer): it makes this member a voter on its welcomes. */
  private claim(to: PeerId): void {
    if (!this.established || this.members.length === 0) return;
    const now = Date.now();
    if (now - (this.claimed.get(to) ?? -Infinity) < this.o.heartbeatMs) return;
    this.claimed.set(to, now);
    const { epoch, members, fingerprint } = this;
    this.sendControl(to, encodeControl({ kind: DpKind.Claim, fingerprint, epoch, members, ...signMembers(this.identity, 'claim', fingerprint, epoch, members) }));
  }

  /** Heartbeats to the members, and the watchdog: a silent member fails the group now. */
  private beat(): void {
    if (!this.group) return;
    const msg = encodeControl({ kind: DpKind.Heartbeat });
    for (const p of this.members) if (p !== this.id) this.sendControl(p, msg);
    const silent = this.silentMembers();
    if (silent.length) this.breakGroup(`${silent.join(', ')} silent for ${this.o.silenceMs} ms`);
  }

  private silentMembers(): PeerId[] {
    const cut = Date.now() - this.o.silenceMs;
    return this.members.filter((p) => p !== this.id && Math.max(this.channels.lastHeard(p), this.groupSince) < cut);
  }

  private sendControl(peer: PeerId, msg: Uint8Array): void {
    if (!this.transport.peers().includes(peer)) return;
    try {
      this.channels.sendControl(peer, msg);
    } catch (e) {
      this.reject(peer, `could not send: ${(e as Error).message}`);
    }
  }

  // ---- helpers ----

  private reject(peer: PeerId, reason: string): void {
    this.rejected++;
    this.event('reject', [peer], reason);
  }

  /**
   * Abuse this peer saw from `peer` (a flood over its mailbox bound, a contribution withheld from
   * it): named now, and listed in this peer's next report, where a majority's accusation removes.
   */
  accuse(peer: PeerId, why: string): void {
    this.accusing.add(peer);
    this.event('suspect', [peer], why);
  }

  /** Records an event (a stepper's too: screened contributions, suspects) and hands it to onEvent. */
  event(kind: DpEventKind, peers: PeerId[], message: string): void {
    const e: DpEvent = { kind, step: this.trainer.stepIndex, epoch: this.epoch, peers, message };
    this.events.push(e);
    if (this.events.length > 1000) this.events.splice(0, this.events.length - 1000);
    try {
      this.opts.onEvent?.(e);
    } catch (err) {
      console.error('DataParallel onEvent handler threw', err);
    }
  }

  /** Stops this peer: says BYE to the members, closes the group and the channels; later steps throw `e`. */
  private stopWith(e: Error): void {
    if (this.fatal) return;
    this.fatal = e;
    const bye = encodeControl({ kind: DpKind.Bye, reason: e.message });
    for (const p of this.members) if (p !== this.id) this.sendControl(p, bye);
    this.event('stopped', [this.id], e.message);
    this.endGroup();
    this.joiner.stop(e);
    clearInterval(this.heartbeat);
    this.channels.close();
    for (const u of this.unsub) u();
    if (!this.running) this.release();
  }

  /** The stepper's buffers go with the run (a step in flight releases them when it ends). */
  private release(): void {
    this.stepper.release?.();
  }
}
