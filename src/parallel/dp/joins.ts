/**
 * DataParallel's join bookkeeping between groups (dp.ts): who said hello and waits to be admitted,
 * who was admitted since the last group sync, and which members left or restarted (a fault drops
 * them from the next group's plan).
 */
import type { PeerId } from '../../peers/transport/transport';

/**
 * The joiners a group admits after a step: those a strict majority of the step reports list (issue
 * 38: one report leaving a joiner out vetoed it). Alike on every member, as the reports are. With
 * two members that is both; `omitted` names the members whose report left out an admitted joiner.
 */
export function admitByMajority(members: readonly PeerId[], lists: readonly (readonly PeerId[])[]): { admitted: PeerId[]; omitted: PeerId[] } {
  const named = [...new Set(lists.flat())].filter((p) => !members.includes(p)).sort();
  const admitted = named.filter((p) => lists.filter((l) => l.includes(p)).length * 2 > lists.length);
  const omitted = members.filter((_, r) => admitted.some((p) => !lists[r].includes(p)));
  return { admitted, omitted };
}

/**
 * A joiner's side of a WELCOME: every member of the admitting group sends one, signed (a welcomer
 * that withholds it stalls nobody), and the joiner enters once identical welcomes (epoch and member
 * list) came from a strict majority of its *voters*: the listed members and every peer that CLAIMed
 * membership of the run in answer to its HELLO, less itself and the other joiners it heard HELLO
 * from (issue 38: a forged welcome listing only the insider and the joiner was a majority of its own
 * list; the real members' claims make them voters, so it is one voice of several).
 */
export class WelcomeVotes {
  private readonly votes = new Map<string, Set<PeerId>>();

  /** A welcome from `from`; then the plan a majority of the voters sent, if any (decide). */
  add(from: PeerId, self: PeerId, epoch: number, members: readonly PeerId[], joiners: ReadonlySet<PeerId>, claimers: ReadonlySet<PeerId> = new Set()): { epoch: number; members: PeerId[] } | null {
    const key = `${epoch}:${[...members].sort().join(',')}`;
    const got = this.votes.get(key) ?? new Set<PeerId>();
    got.add(from);
    this.votes.set(key, got);
    return this.decide(self, joiners, claimers);
  }

  /** The plan with the most welcomes among those a strict majority of its voters sent (ties: the lower key). */
  decide(self: PeerId, joiners: ReadonlySet<PeerId>, claimers: ReadonlySet<PeerId>): { epoch: number; members: PeerId[] } | null {
    let best: { key: string; n: number } | null = null;
    for (const [key, got] of [...this.votes].sort(([a], [b]) => (a < b ? -1 : 1))) {
      const members = key.slice(key.indexOf(':') + 1).split(',');
      const voters = [...new Set([...members, ...claimers])].filter((p) => p !== self && (!joiners.has(p) || got.has(p)));
      const n = [...got].filter((p) => voters.includes(p)).length;
      if (n * 2 > voters.length && (!best || n > best.n)) best = { key, n };
    }
    if (!best) return null;
    return { epoch: Number(best.key.slice(0, best.key.indexOf(':'))), members: best.key.slice(best.key.indexOf(':') + 1).split(',') };
  }

  /** Every peer a welcome came from (each a member of the run by its own signature). */
  senders(): Set<PeerId> {
    return new Set([...this.votes.values()].flatMap((s) => [...s]));
  }

  /** What was received, for a joiner's timeout message. */
  describe(): string {
    return [...this.votes].map(([k, got]) => `epoch ${k.replace(':', ' [')}] from ${[...got].join(', ')}`).join('; ') || 'none';
  }

  clear(): void {
    this.votes.clear();
  }
}

/**
 * How many heartbeats a joiner waits at most for every connected peer to answer its HELLO before it
 * weighs welcomes (it weighs at once when all did): long enough that the real members' claims come
 * in before a forged welcome could be taken alone (issue 38: two heartbeats were too few).
 */
export const SETTLE_HEARTBEATS = 10;

/**
 * A joiner stops on refusals only when the refusers are a strict majority of the run's members it
 * heard from (refusers, claimers, welcome senders): one insider's REFUSE is named and outvoted.
 * Returns the refuser to name (the last one), or null.
 */
export function refusedByMajority(refusers: ReadonlyMap<PeerId, string>, claimers: ReadonlySet<PeerId>, welcomers: ReadonlySet<PeerId>): PeerId | null {
  const heard = new Set([...refusers.keys(), ...claimers, ...welcomers]);
  return refusers.size * 2 > heard.size ? [...refusers.keys()].at(-1)! : null;
}

/** What a hello with the run's fingerprint means (dp.ts acts on it). */
export type HelloVerdict =
  /** A crossed hello of a joiner already admitted: neither a request nor a restart. */
  | 'ignore'
  /** A member that restarted again within the restart interval: ignored. */
  | 'too-soon'
  /** A member that restarted: its state is gone, it joins afresh (the group breaks). */
  | 'restart'
  /** A peer asking to join. */
  | 'request';

export class JoinRequests {
  private readonly pending = new Set<PeerId>();
  /**
   * Joiners admitted since the last group sync: a hello of theirs crossed the welcome (a joiner says
   * hello every heartbeat until welcomed) and is neither a request nor a restart. Ordered channels
   * deliver it before the joiner's part of the sync, which clears the set.
   */
  private readonly admittedUnsynced = new Set<PeerId>();
  private readonly excluded = new Set<PeerId>();

  /** A hello from `from`; `member`: whether it is in the current group; `allowRestart` asks the guard. */
  hello(from: PeerId, member: boolean, allowRestart: () => boolean): HelloVerdict {
    if (this.admittedUnsynced.has(from)) return 'ignore';
    let verdict: HelloVerdict = 'request';
    if (member) {
      // A regroup each time would let one member stall the group, so at most one per interval.
      if (!allowRestart()) return 'too-soon';
      this.excluded.add(from);
      verdict = 'restart';
    }
    this.pending.add(from);
    return verdict;
  }

  /** The peers asking to join that are not in `members` and are connected. */
  joiners(members: readonly PeerId[], connected: readonly PeerId[]): PeerId[] {
    return [...this.pending].filter((p) => !members.includes(p) && connected.includes(p));
  }

  /** Joiners the group admits at the next step (a peer that left or restarted earlier is back with a fresh hello). */
  admitted(peers: readonly PeerId[]): void {
    for (const p of peers) {
      this.pending.delete(p);
      this.admittedUnsynced.add(p);
      this.excluded.delete(p);
    }
  }

  /** A peer left the transport, or was removed from the run. */
  gone(p: PeerId): void {
    this.pending.delete(p);
    this.admittedUnsynced.delete(p);
  }

  /** A peer said BYE; a member's leaving also drops it from the next group. */
  bye(p: PeerId, member: boolean): void {
    this.pending.delete(p);
    if (member) this.excluded.add(p);
  }

  /** This peer was welcomed into a group. */
  welcomed(): void {
    this.excluded.clear();
  }

  /** A new group finished its sync. */
  synced(): void {
    this.admittedUnsynced.clear();
  }

  /** Peers that said HELLO and wait to be admitted (a joiner hears the other joiners'). */
  pendingPeers(): ReadonlySet<PeerId> {
    return this.pending;
  }

  isExcluded(p: PeerId): boolean {
    return this.excluded.has(p);
  }
}

/**
 * Removal for abuse one member alone cannot prove (issue 38: a flood over the mailbox bound, a
 * contribution withheld from some members): each report lists whom its sender saw abuse from;
 * a member that a strict majority of the other members accuse, `strikes` steps in a row, is
 * removed (with three members or more). Alike on every member, as the reports are; one member's word removes nobody.
 */
export class Accusations {
  private readonly run = new Map<PeerId, number>();

  constructor(private readonly strikes: number) {}

  /** One step's reports (`lists[r]`: whom member r accuses); returns the members to remove now. */
  record(members: readonly PeerId[], lists: readonly (readonly PeerId[])[]): PeerId[] {
    const out: PeerId[] = [];
    for (const p of members) {
      const by = lists.filter((l, r) => members[r] !== p && l.includes(p)).length;
      // A strict majority of the others (of two members, one word against the other: never).
      if (members.length < 3 || by * 2 <= members.length - 1) {
        this.run.delete(p);
        continue;
      }
      const c = (this.run.get(p) ?? 0) + 1;
      this.run.set(p, c);
      if (c >= this.strikes) out.push(p);
    }
    return out;
  }
}

/**
 * Withholding from everyone (issue 38): a member whose signed STATUS or REPORT no honest member
 * received within the bounded wait is absent on all of them alike (agreement.ts) and left out of
 * the next group; one that is absent `strikes` times in the run is removed for it (a slow honest
 * member that misses the bound that often goes too: the price of not waiting for it).
 */
export class Withholding {
  private readonly count = new Map<PeerId, number>();

  constructor(private readonly strikes: number) {}

  /** The members absent from one agreement; returns those to remove now, with how often. */
  record(absent: readonly PeerId[]): [PeerId, number][] {
    const out: [PeerId, number][] = [];
    for (const p of absent) {
      const c = (this.count.get(p) ?? 0) + 1;
      this.count.set(p, c);
      if (c >= this.strikes) out.push([p, c]);
    }
    return out;
  }
}
