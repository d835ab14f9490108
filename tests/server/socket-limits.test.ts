/**
 * The PeerServer's socket accounting (src/server/socket-limits.ts) on its own: which socket makes
 * room for a newcomer at the address's or the server's limit, and the bound on all unsent bytes.
 */
import { describe, expect, it } from 'vitest';
import type { WebSocket } from 'ws';
import { DEFAULT_SOCKET_LIMITS, type SocketEntry, SocketTable } from '../../src/server/socket-limits';

const table = (over: Partial<typeof DEFAULT_SOCKET_LIMITS> = {}) => new SocketTable({ ...DEFAULT_SOCKET_LIMITS, ...over });

function open(t: SocketTable, address: string, tag: string, id = `${tag}-${Math.random()}`): SocketEntry | string {
  const r = t.admit(address, tag);
  return 'why' in r ? r.why : t.add(id, tag, address);
}

/** A websocket that never reads: what it is sent stays in its buffer. */
function fakeWs(): WebSocket & { terminated: boolean } {
  const ws = {
    OPEN: 1, readyState: 1, bufferedAmount: 0, terminated: false,
    send(data: string) { ws.bufferedAmount += data.length; },
    terminate() { ws.terminated = true; ws.readyState = 3; },
    close() { ws.readyState = 3; },
    emit: () => true,
  };
  return ws as unknown as WebSocket & { terminated: boolean };
}

describe('PeerServer socket limits', () => {
  it('at the address limit an older room gets a socket by closing the youngest room\'s newest; a new room is refused', () => {
    const t = table({ maxSocketsPerAddress: 4 });
    const honest = open(t, 'A', 'room');
    expect(typeof honest).toBe('object');
    const flood = ['f1', 'f2', 'f3'].map((tag) => open(t, 'A', tag));
    expect(flood.every((e) => typeof e === 'object')).toBe(true);
    expect(open(t, 'A', 'f4')).toBe('too many sockets from this address');
    const joiner = open(t, 'A', 'room');
    expect(typeof joiner).toBe('object');
    expect(t.inRoom('f3').size).toBe(0); // the youngest room's socket made way
    expect(t.inRoom('room').size).toBe(2);
    expect(t.stats.evicted).toBe(1);
    // Another address is not affected by A's limit.
    expect(typeof open(t, 'B', 'f9')).toBe('object');
  });

  it('limits one address in one room, and the server in all', () => {
    const t = table({ maxSocketsPerAddressRoom: 2, maxSockets: 3 });
    open(t, 'A', 'r');
    open(t, 'A', 'r');
    expect(open(t, 'A', 'r')).toBe('too many sockets from this address in this room');
    expect(typeof open(t, 'B', 'r')).toBe('object');
    expect(open(t, 'C', 'new')).toBe('the server is full');
  });

  it('cuts off a socket past its own bound and, past the total bound, the one holding the most', () => {
    const t = table({ maxBufferedPerSocket: 1000, maxBufferedTotal: 1500 });
    const [a, b] = ['a', 'b'].map((tag) => t.add(`${tag}-1`, tag, 'A'));
    const [wa, wb] = [fakeWs(), fakeWs()];
    t.guard(a, wa, () => true);
    t.guard(b, wb, () => true);
    wa.send('x'.repeat(900));
    wb.send('x'.repeat(700));
    expect(wa.terminated).toBe(true); // 1,600 in all: the larger goes
    expect(wb.terminated).toBe(false);
    expect(t.stats.cutOffBuffered).toBe(1);
    wb.send('x'.repeat(400));
    expect(wb.terminated).toBe(true); // 1,100 > 1,000 for one socket
    expect(t.stats.peakBufferedBytes).toBeLessThanOrEqual(1600);
  });
});
