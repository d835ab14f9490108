/**
 * DataParallel's join bookkeeping between groups (dp.ts): who said hello and waits to be admitted,
 * who was admitted since the last group sync, and which members left or restarted (a fault drops
 * them from the next group's plan).
 */
import type { PeerId } from '../../peers/transport/transport';

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

  isExcluded(p: PeerId): boolean {
    return this.excluded.has(p);
  }
}
