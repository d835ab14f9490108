/**
 * The roster of a peer group as one member sees it: who is there, in which role and rank, how good
 * the link is (round-trip time from heartbeats) and how many bytes went each way.
 */
import type { PeerId } from '../transport/transport';

/** 'host' is the member that created the room; everyone else is a 'peer'. */
export type PeerRole = 'host' | 'peer';
/** A link is dialled ('connecting'), proving the room key ('authenticating'), then 'admitted'. */
export type LinkState = 'connecting' | 'authenticating' | 'admitted';

export interface RosterEntry {
  id: PeerId;
  /** This entry is the member whose roster it is. */
  self: boolean;
  /** Unknown (null) until the peer's hello arrives. */
  role: PeerRole | null;
  /** Rank among the admitted members and self, sorted by id (PeerGroup's ranks); -1 while not admitted. */
  rank: number;
  state: LinkState;
  /** Smoothed heartbeat round-trip time in ms; null before the first reply. */
  rttMs: number | null;
  /** Bytes on the data channel (payloads, control messages and framing), each way. */
  bytesSent: number;
  bytesReceived: number;
  /** Messages from this peer that were rejected (malformed, oversized, before admission). */
  rejected: number;
  /** Date.now() of the last message from this peer (null for self or before any message). */
  lastSeen: number | null;
}

/** Round-trip time smoothed like TCP's SRTT (new sample weighted 1/8), so one slow reply doesn't swing it. */
export class RttEstimator {
  private value: number | null = null;

  sample(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    this.value = this.value === null ? ms : this.value + (ms - this.value) / 8;
  }

  get ms(): number | null {
    return this.value;
  }
}

/** Ranks as PeerGroup assigns them: index in the sorted member ids. */
export function ranksOf(members: Iterable<PeerId>): Map<PeerId, number> {
  return new Map([...new Set(members)].sort().map((id, r) => [id, r]));
}

function bytesText(n: number): string {
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

/** A plain-text table of the roster, one line per member, for terminals and logs. */
export function formatRoster(entries: readonly RosterEntry[], now = Date.now()): string {
  const rows = [...entries]
    .sort((a, b) => (a.rank < 0 ? 99 : a.rank) - (b.rank < 0 ? 99 : b.rank) || a.id.localeCompare(b.id))
    .map((e) => [
      e.rank < 0 ? '-' : String(e.rank),
      e.id + (e.self ? ' (me)' : ''),
      e.role ?? '?',
      e.state,
      e.rttMs === null ? '-' : `${e.rttMs.toFixed(1)} ms`,
      bytesText(e.bytesSent),
      bytesText(e.bytesReceived),
      e.lastSeen === null ? '-' : `${((now - e.lastSeen) / 1000).toFixed(1)} s ago`,
    ]);
  const head = ['rank', 'id', 'role', 'state', 'rtt', 'sent', 'received', 'last seen'];
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  return [head, ...rows].map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n');
}
