import type { Peer } from 'peerjs';
import { describe, expect, it } from 'vitest';
import { guardSignalling, MAX_CANDIDATES_PER_CONNECTION, MAX_OFFERS_PER_MINUTE, MAX_STORED_CONNECTIONS, MAX_STORED_PER_CONNECTION } from '../../src/peers/peerjs/signal-guard';

/** The slice of PeerJS 1.5.5's Peer the guard wraps: its handler stores messages for unknown connections. */
function fakePeer(known: Set<string> = new Set()) {
  const handled: unknown[] = [];
  const p = {
    _lostMessages: new Map<string, unknown[]>(),
    _handleMessage(m: { payload?: { connectionId?: string } }) {
      handled.push(m);
      const cid = m.payload?.connectionId;
      if (cid && !known.has(cid) && (m as { type: string }).type !== 'OFFER') p._storeMessage(cid, m);
    },
    _storeMessage(cid: string, m: unknown) {
      if (!p._lostMessages.has(cid)) p._lostMessages.set(cid, []);
      p._lostMessages.get(cid)!.push(m);
    },
    getConnection: () => null,
  };
  return { p, handled, peer: p as unknown as Peer };
}

const offer = (src: string, cid: string) => ({ type: 'OFFER', src, payload: { connectionId: cid, type: 'data', serialization: 'raw', reliable: true, label: cid, sdp: { type: 'offer', sdp: 'v=0' } } });
const cand = (src: string, cid: string) => ({ type: 'CANDIDATE', src, payload: { connectionId: cid, type: 'data', candidate: { candidate: 'candidate:1 1 udp 1 127.0.0.1 9 typ host', sdpMid: '0', sdpMLineIndex: 0 } } });

describe('signalling guard', () => {
  it('drops malformed messages before PeerJS sees them, and never throws', () => {
    const { p, handled, peer } = fakePeer();
    const dropped: string[] = [];
    guardSignalling(peer, { acceptOffer: () => true, dropped: (_, r) => dropped.push(r) });
    const bad = [null, 5, 'x', {}, { type: 'OFFER', src: 'a' }, { type: 'OFFER', src: 'a', payload: null }, { ...offer('a', 'c'), payload: { ...offer('a', 'c').payload, serialization: 'json' } },
      { type: 'CANDIDATE', src: 'a', payload: { connectionId: 'c', type: 'data', candidate: { candidate: 'x'.repeat(5000) } } }, { type: 'ERROR', payload: null }, { type: 'ZZZ' }];
    for (const m of bad) expect(() => p._handleMessage(m as never)).not.toThrow();
    expect(handled).toEqual([]);
    expect(dropped).toHaveLength(bad.length);
    p._handleMessage({ type: 'OPEN' } as never);
    p._handleMessage(offer('a', 'c1') as never);
    expect(handled).toHaveLength(2);
  });

  it('takes offers only from accepted ids, within the per-remote rate', () => {
    const { p, handled, peer } = fakePeer();
    guardSignalling(peer, { acceptOffer: (src) => src !== 'stranger', dropped: () => {} });
    p._handleMessage(offer('stranger', 'c0') as never);
    expect(handled).toHaveLength(0);
    for (let i = 0; i < MAX_OFFERS_PER_MINUTE + 3; i++) p._handleMessage(offer('member', `c${i}`) as never);
    expect(handled).toHaveLength(MAX_OFFERS_PER_MINUTE);
  });

  it('caps candidates per connection and keeps messages for unknown connections in bounded buffers', () => {
    const { p, handled, peer } = fakePeer();
    guardSignalling(peer, { acceptOffer: () => true, dropped: () => {} });
    for (let i = 0; i < MAX_CANDIDATES_PER_CONNECTION + 10; i++) p._handleMessage(cand('a', 'one') as never);
    expect(handled).toHaveLength(MAX_CANDIDATES_PER_CONNECTION);
    expect(p._lostMessages.get('one')).toHaveLength(MAX_STORED_PER_CONNECTION);
    for (let i = 0; i < 1000; i++) p._handleMessage(cand('a', `u${i}`) as never);
    expect(p._lostMessages.size).toBe(MAX_STORED_CONNECTIONS);
    expect(p._lostMessages.has('u999')).toBe(true); // the newest kept, the oldest evicted
  });

  it('refuses a PeerJS without the internals it wraps', () => {
    expect(() => guardSignalling({} as Peer, { acceptOffer: () => true, dropped: () => {} })).toThrow(/1\.5\.5/);
  });
});
