/**
 * The embedded PeerServer's limits on its signalling websockets (src/server/peer-server.ts uses them):
 * who may open one, how much one may send, and how much the server holds for one that does not read.
 *
 * Admission. Sockets are counted per (address, room tag), per address, and in all. A room's age is
 * when its oldest open socket registered. When an address (or the whole server) is at its limit, a
 * socket for a room older than the youngest room that address (or the server) holds sockets in still
 * gets in: the newest socket of that youngest room is closed for it. So a flood that starts after a
 * room exists, from one address or many, cannot lock that room's members out, even behind the same
 * address; the flood's own new rooms are refused instead. What it still can do: a room created
 * while the flood holds the limit has no older claim, and is refused until the flood ends.
 *
 * Sending. Every socket has a budget of messages and bytes (a token bucket): an honest member's
 * offers and candidates to 63 others fit its burst; past it the socket is closed (1008). A message
 * for an id that is not registered is dropped (the `peer` package would keep it 5 s for the id).
 *
 * Buffering. A socket whose unsent bytes (ws `bufferedAmount`: a client that does not read) pass
 * maxBufferedPerSocket is terminated, and when the unsent bytes of all sockets pass
 * maxBufferedTotal, the socket holding the most is terminated, until it is under the bound again.
 */
import type { WebSocket } from 'ws';

export interface SocketLimits {
  /** Sockets one address may hold, over all rooms (see the admission rule above). Default 32. */
  maxSocketsPerAddress: number;
  /** Sockets one address may hold in one room (tag). Default 32. */
  maxSocketsPerAddressRoom: number;
  /** Sockets in all. Default 4096. */
  maxSockets: number;
  /** Ids one room (tag) may register. Default 64. */
  maxIdsPerRoom: number;
  /** Unsent bytes one socket may hold before it is cut off. Default 1 MiB. */
  maxBufferedPerSocket: number;
  /** Unsent bytes all sockets may hold together. Default 64 MiB. */
  maxBufferedTotal: number;
  /** Messages a socket may send at once, and per second after that. Defaults 2000, 200. */
  burstMessages: number;
  messagesPerS: number;
  /** Bytes a socket may send at once, and per second after that. Defaults 1 MiB, 128 KiB. */
  burstBytes: number;
  bytesPerS: number;
}

export const DEFAULT_SOCKET_LIMITS: SocketLimits = {
  maxSocketsPerAddress: 32,
  maxSocketsPerAddressRoom: 32,
  maxSockets: 4096,
  maxIdsPerRoom: 64,
  maxBufferedPerSocket: 1024 * 1024,
  maxBufferedTotal: 64 * 1024 * 1024,
  burstMessages: 2000,
  messagesPerS: 200,
  burstBytes: 1024 * 1024,
  bytesPerS: 128 * 1024,
};

/** One signalling socket, from its upgrade to its close. */
export interface SocketEntry {
  readonly id: string;
  readonly tag: string;
  readonly address: string;
  /** Order of admission (higher: newer). */
  readonly seq: number;
  ws: WebSocket | null;
}

/** What the server's accounting shows (tests and logs). */
export interface SocketStats {
  sockets: number;
  /** Unsent bytes over all sockets now. */
  bufferedBytes: number;
  /** Most unsent bytes seen at once since start. */
  peakBufferedBytes: number;
  /** Sockets closed for buffering, for their send budget, or to make room for an older room. */
  cutOffBuffered: number;
  cutOffBudget: number;
  evicted: number;
  /** Messages dropped because their destination is not registered. */
  droppedNoDestination: number;
}

export class SocketTable {
  private readonly entries = new Set<SocketEntry>();
  private readonly byAddress = new Map<string, Set<SocketEntry>>();
  private readonly byTag = new Map<string, Set<SocketEntry>>();
  /** Sockets that held unsent bytes after a send (the rest hold none). */
  private readonly backlogged = new Set<SocketEntry>();
  private seq = 0;
  readonly stats: SocketStats = { sockets: 0, bufferedBytes: 0, peakBufferedBytes: 0, cutOffBuffered: 0, cutOffBudget: 0, evicted: 0, droppedNoDestination: 0 };

  constructor(readonly limits: SocketLimits) {}

  /** When the room's oldest open socket was admitted (Infinity: no socket, a new room). */
  roomAge(tag: string): number {
    let oldest = Infinity;
    for (const e of this.byTag.get(tag) ?? []) oldest = Math.min(oldest, e.seq);
    return oldest;
  }

  /** Sockets of this room (tag), e.g. for the per-room id limit. */
  inRoom(tag: string): ReadonlySet<SocketEntry> {
    return this.byTag.get(tag) ?? new Set();
  }

  /**
   * Whether a socket for (address, tag) may open: the sockets to close for it (already out of the
   * table; the caller terminates them), or why not.
   */
  admit(address: string, tag: string): { why: string } | { evict: SocketEntry[] } {
    const l = this.limits;
    const mine = this.byAddress.get(address) ?? new Set<SocketEntry>();
    let sameRoom = 0;
    for (const e of mine) if (e.tag === tag) sameRoom++;
    if (sameRoom >= l.maxSocketsPerAddressRoom) return { why: 'too many sockets from this address in this room' };
    const ages = new Map<string, number>();
    const ageOf = (t: string) => ages.get(t) ?? ages.set(t, this.roomAge(t)).get(t)!;
    const age = ageOf(tag);
    const evict: SocketEntry[] = [];
    // The address's limit, then the server's (a socket closed for the first counts for the second).
    if (mine.size >= l.maxSocketsPerAddress) {
      const victim = youngestRoomsNewest(mine, ageOf, evict);
      if (!victim || ageOf(victim.tag) <= age) return { why: 'too many sockets from this address' };
      evict.push(victim);
    }
    if (this.entries.size - evict.length >= l.maxSockets) {
      const victim = youngestRoomsNewest(this.entries, ageOf, evict);
      if (!victim || ageOf(victim.tag) <= age) return { why: 'the server is full' };
      evict.push(victim);
    }
    for (const e of evict) this.remove(e);
    this.stats.evicted += evict.length;
    return { evict };
  }

  add(id: string, tag: string, address: string): SocketEntry {
    const e: SocketEntry = { id, tag, address, seq: ++this.seq, ws: null };
    this.entries.add(e);
    setOf(this.byAddress, address).add(e);
    setOf(this.byTag, tag).add(e);
    this.stats.sockets = this.entries.size;
    return e;
  }

  remove(e: SocketEntry): void {
    if (!this.entries.delete(e)) return;
    dropFrom(this.byAddress, e.address, e);
    dropFrom(this.byTag, e.tag, e);
    this.backlogged.delete(e);
    this.stats.sockets = this.entries.size;
  }

  /**
   * Wraps a freshly upgraded socket before the `peer` package sees it: its sends are checked against
   * the buffer bounds, its messages against its budget and `registered` (a message for an id that is
   * not registered is dropped).
   */
  guard(e: SocketEntry, ws: WebSocket, registered: (id: string) => boolean): void {
    e.ws = ws;
    const l = this.limits;
    const send = ws.send.bind(ws) as (data: unknown, ...rest: unknown[]) => void;
    ws.send = ((data: unknown, ...rest: unknown[]) => {
      if (ws.readyState !== ws.OPEN) return send(data, ...rest);
      const size = typeof data === 'string' ? Buffer.byteLength(data) : ((data as { byteLength?: number }).byteLength ?? 0);
      if (ws.bufferedAmount + size > l.maxBufferedPerSocket) return this.cut(e, 'buffered');
      send(data, ...rest);
      if (ws.bufferedAmount > 0) {
        this.backlogged.add(e);
        this.boundTotal();
      }
    }) as typeof ws.send;

    const bucket = { messages: l.burstMessages, bytes: l.burstBytes, at: Date.now(), over: false };
    const emit = ws.emit.bind(ws) as (event: string | symbol, ...args: unknown[]) => boolean;
    ws.emit = ((event: string | symbol, ...args: unknown[]) => {
      if (event !== 'message') return emit(event, ...args);
      if (bucket.over) return false; // what it sent after its budget ran out, still being read
      const now = Date.now();
      const dt = (now - bucket.at) / 1000;
      bucket.at = now;
      bucket.messages = Math.min(l.burstMessages, bucket.messages + dt * l.messagesPerS) - 1;
      const data = args[0] as Buffer | ArrayBuffer | Buffer[];
      const size = Array.isArray(data) ? data.reduce((n, b) => n + b.byteLength, 0) : data.byteLength;
      bucket.bytes = Math.min(l.burstBytes, bucket.bytes + dt * l.bytesPerS) - size;
      if (bucket.messages < 0 || bucket.bytes < 0) {
        bucket.over = true;
        this.stats.cutOffBudget++;
        this.remove(e);
        ws.close(1008, 'signalling budget exceeded');
        return false;
      }
      let dst: unknown;
      try {
        dst = (JSON.parse(String(data)) as { dst?: unknown } | null)?.dst;
      } catch {
        return emit(event, ...args); // the `peer` package reports it as an error, which is dropped
      }
      if (typeof dst === 'string' && !registered(dst)) {
        this.stats.droppedNoDestination++;
        return false;
      }
      return emit(event, ...args);
    }) as typeof ws.emit;
  }

  private cut(e: SocketEntry, why: 'buffered'): void {
    if (why === 'buffered') this.stats.cutOffBuffered++;
    this.remove(e);
    e.ws?.terminate();
  }

  /** Terminates the most backlogged sockets while all unsent bytes together pass the total bound. */
  private boundTotal(): void {
    for (;;) {
      let total = 0;
      let worst: SocketEntry | null = null;
      let worstBytes = 0;
      for (const b of this.backlogged) {
        const n = b.ws?.bufferedAmount ?? 0;
        if (n === 0) {
          this.backlogged.delete(b);
          continue;
        }
        total += n;
        if (n > worstBytes) [worst, worstBytes] = [b, n];
      }
      this.stats.bufferedBytes = total;
      this.stats.peakBufferedBytes = Math.max(this.stats.peakBufferedBytes, total);
      if (total <= this.limits.maxBufferedTotal || !worst) return;
      this.cut(worst, 'buffered');
    }
  }

  /** Unsent bytes over all sockets now (also refreshes stats.bufferedBytes). */
  bufferedBytes(): number {
    let total = 0;
    for (const e of this.entries) total += e.ws?.bufferedAmount ?? 0;
    this.stats.bufferedBytes = total;
    return total;
  }
}

/** The newest socket of the youngest room in `pool`, skipping `taken`; null for an empty pool. */
function youngestRoomsNewest(pool: Iterable<SocketEntry>, ageOf: (tag: string) => number, taken: readonly SocketEntry[]): SocketEntry | null {
  let best: SocketEntry | null = null;
  let bestAge = -Infinity;
  for (const e of pool) {
    if (taken.includes(e)) continue;
    const a = ageOf(e.tag);
    if (a > bestAge || (a === bestAge && best !== null && e.seq > best.seq)) [best, bestAge] = [e, a];
  }
  return best;
}

function setOf<K, V>(m: Map<K, Set<V>>, k: K): Set<V> {
  let s = m.get(k);
  if (!s) m.set(k, (s = new Set()));
  return s;
}

function dropFrom<K, V>(m: Map<K, Set<V>>, k: K, v: V): void {
  const s = m.get(k);
  if (!s) return;
  s.delete(v);
  if (s.size === 0) m.delete(k);
}
