/**
 * A joiner's side of admission (member-group.ts joins through it): it says HELLO until welcomed,
 * hears the members' CLAIMs, WELCOMEs and REFUSEs, and enters the plan a majority of its voters
 * welcomed (joins.ts's WelcomeVotes) only once every connected peer answered or the settle time
 * passed, so a forged welcome sent first is weighed against the real members' votes, a member
 * withholding its answer delays it at most that long, and one REFUSE stops it only with a majority's.
 */
import { type JoinRequests, refusedByMajority, SETTLE_HEARTBEATS, WelcomeVotes } from './joins';
import { membersSignedBy } from './agreement';
import { DpError, type DpEventKind, type Plan } from './types';
import { type ControlMessage, DpKind, encodeControl } from './wire';
import type { PeerId, Transport } from '../../peers/transport/transport';
import type { Identity } from '../../peers/room/identity';

/** What the joiner needs of its member (MemberGroup). */
export interface JoinerHost {
  readonly id: PeerId;
  readonly run: string;
  readonly fingerprint: number;
  readonly heartbeatMs: number;
  readonly joinTimeoutMs: number;
  readonly transport: Transport;
  readonly joins: JoinRequests;
  identity(): Identity;
  stepIndex(): number;
  send(peer: PeerId, msg: Uint8Array): void;
  reject(peer: PeerId, why: string): void;
  event(kind: DpEventKind, peers: PeerId[], message: string): void;
}

type Signed = Extract<ControlMessage, { kind: DpKind.Welcome | DpKind.Claim }>;

export class Joiner {
  private readonly welcomes = new WelcomeVotes();
  /** The plan this peer last entered by WELCOME: the others' identical welcomes after it are no fault. */
  private welcomedAs = '';
  private welcome: { resolve: (p: Plan) => void; reject: (e: Error) => void } | null = null;
  /** While joining: peers that claimed membership of the run (voters on the welcomes), and every peer heard from. */
  private claimers = new Set<PeerId>();
  private heard = new Set<PeerId>();
  /** While joining: peers that refused this peer, with their reasons (it stops only on a majority's). */
  private refusers = new Map<PeerId, string>();
  /** Welcomes are weighed once every connected peer was heard from, or this long after joining began. */
  private settleAt = 0;

  constructor(private readonly h: JoinerHost) {}

  /** The plan a majority welcomed this peer into; rejects with DpError (no group in time, refused by a majority). */
  join(): Promise<Plan> {
    const { h } = this;
    const hello = encodeControl({ kind: DpKind.Hello, fingerprint: h.fingerprint });
    const greet = (p: PeerId) => h.send(p, hello);
    for (const p of h.transport.peers()) greet(p);
    const unsub = h.transport.onPeerJoin(greet);
    // Again every heartbeat until welcomed: a member whose driver was not listening yet (still
    // building its model) dropped the first one, and admission needs every member's.
    const again = setInterval(() => h.transport.peers().forEach(greet), h.heartbeatMs);
    this.claimers = new Set();
    this.heard = new Set();
    this.refusers = new Map();
    // Issue 38: a welcome weighed before the real members' claims came could be an insider's alone, so
    // the joiner waits for every connected peer; the cap only serves a linked peer that runs nothing.
    const settleMs = Math.min(SETTLE_HEARTBEATS * h.heartbeatMs, h.joinTimeoutMs / 2);
    this.settleAt = Date.now() + settleMs;
    return new Promise<Plan>((resolve, reject) => {
      const refusals = () => [...this.refusers].map(([p, why]) => `${p}: ${why}`).join('; ') || 'none';
      const timer = setTimeout(() => reject(new DpError('no-group', `no group of run '${h.run}' admitted this peer within ${h.joinTimeoutMs} ms (welcomes: ${this.welcomes.describe()}; members that claimed the run: ${[...this.claimers].join(', ') || 'none'}; a welcome needs a majority of both; refusals: ${refusals()})`, h.stepIndex())), h.joinTimeoutMs);
      const settle = setTimeout(() => this.weighWelcomes(), settleMs);
      const done = () => {
        clearTimeout(timer);
        clearTimeout(settle);
        clearInterval(again);
        unsub();
        this.welcome = null;
      };
      this.welcome = {
        resolve: (p) => (done(), resolve(p)),
        reject: (e) => (done(), reject(e)),
      };
    });
  }

  /** A peer with the run's fingerprint said HELLO: it answered, as far as settling goes. */
  heardFrom(from: PeerId): void {
    this.heard.add(from);
  }

  claim(from: PeerId, m: Signed): void {
    // Only a joiner weighs claims; one arriving after its welcome is no fault.
    if (!this.welcome) return;
    if (m.fingerprint !== this.h.fingerprint || !m.members.includes(from) || !membersSignedBy(this.h.identity(), from, 'claim', m)) return this.h.reject(from, 'claim for another configuration, or not signed by its sender');
    this.heard.add(from);
    this.claimers.add(from);
    return this.weighWelcomes();
  }

  welcomeFrom(from: PeerId, m: Signed): void {
    const { h } = this;
    const key = `${m.epoch}:${[...m.members].sort().join(',')}`;
    if (!this.welcome) return key === this.welcomedAs ? undefined : h.reject(from, 'unexpected welcome');
    if (m.fingerprint !== h.fingerprint || !m.members.includes(h.id) || !m.members.includes(from)) {
      return h.reject(from, 'welcome for another configuration or membership');
    }
    if (!membersSignedBy(h.identity(), from, 'welcome', m)) return h.reject(from, 'welcome not signed by its sender');
    this.heard.add(from);
    this.welcomes.add(from, h.id, m.epoch, m.members, h.joins.pendingPeers(), this.claimers);
    return this.weighWelcomes();
  }

  refuse(from: PeerId, reason: string): void {
    if (!this.welcome) return this.h.reject(from, 'unexpected refusal');
    // One refusal is named, not obeyed (issue 38: one insider's REFUSE stopped a joiner); weighWelcomes stops on a majority's.
    this.heard.add(from);
    this.refusers.set(from, reason);
    this.h.event('refused', [from], reason);
    return this.weighWelcomes();
  }

  /** The run stops on this peer while it waits: the wait ends with `e`. */
  stop(e: Error): void {
    this.welcome?.reject(e);
  }

  /**
   * A joiner enters the plan a majority of its voters welcomed (WelcomeVotes), weighed only once
   * every connected peer was heard from or the settle time passed: members answer HELLO with a
   * CLAIM at once, so a forged welcome sent first is weighed against the real members' votes, and
   * a refusal stops the joiner only when a majority of the members heard refused.
   */
  private weighWelcomes(): void {
    if (!this.welcome) return;
    const { h } = this;
    const settled = Date.now() >= this.settleAt || h.transport.peers().every((p) => this.heard.has(p));
    // Before then, only a plan that a strict majority of every linked peer welcomed (no answer still
    // to come could outvote it), so a quiet insider delays nobody.
    const voters = settled ? this.claimers : new Set([...this.claimers, ...h.transport.peers()]);
    const plan = this.welcomes.decide(h.id, h.joins.pendingPeers(), voters);
    if (!plan) {
      if (!settled) return;
      const refused = refusedByMajority(this.refusers, this.claimers, this.welcomes.senders());
      if (refused) this.welcome.reject(new DpError('refused', `refused by a majority of the run's members heard (${[...this.refusers].map(([p, why]) => `${p}: ${why}`).join('; ')})`, h.stepIndex(), [refused]));
      return;
    }
    h.joins.welcomed();
    this.welcomes.clear();
    this.welcomedAs = `${plan.epoch}:${plan.members.join(',')}`;
    this.welcome.resolve(plan);
  }
}
