import { newKeyPair } from '../../src/peers/room/identity';
import { describe, expect, it } from 'vitest';
import {
  base32,
  createRoomId,
  deriveRoomKey,
  fromBase64,
  isRoomId,
  memberId,
  memberIdBindsKey,
  parseRoomLink,
  parseServerUrl,
  peerListUrl,
  isMemberId,
  randomBytes,
  roomDiscoveryKey,
  roomLink,
  RoomLinkError,
  roomTag,
  sameOriginServer,
  serverForPage,
  tagOfMemberId,
  toBase64,
} from '../../src/peers/room/room';
import { PakeSession } from '../../src/peers/room/pake';
import { formatRoster, ranksOf, type RosterEntry, RttEstimator } from '../../src/peers/room/roster';

describe('room ids and links', () => {
  it('base32 follows RFC 4648 (lowercase, unpadded)', () => {
    const enc = (s: string) => base32(new TextEncoder().encode(s));
    expect(['', 'f', 'fo', 'foo', 'foob', 'fooba', 'foobar'].map(enc)).toEqual(['', 'my', 'mzxq', 'mzxw6', 'mzxw6yq', 'mzxw6ytb', 'mzxw6ytboi']);
  });

  it('room ids carry 128 random bits and never repeat', () => {
    const ids = Array.from({ length: 200 }, createRoomId);
    expect(new Set(ids).size).toBe(ids.length);
    for (const id of ids) {
      expect(id).toMatch(/^[a-z2-7]{26}$/); // 26 × 5 bits = 130 ≥ 128
      expect(isRoomId(id)).toBe(true);
    }
    // Every base32 digit shows up (no constant positions): the bits are really random.
    expect(new Set(ids.join('')).size).toBe(32);
    expect(isRoomId('short')).toBe(false);
    expect(isRoomId('A'.repeat(26))).toBe(false);
  });

  it('a link round-trips, with and without a PeerServer of its own', () => {
    const room = createRoomId();
    const plain = roomLink('http://192.168.1.5:5173/?room=old#x', room);
    expect(plain).toBe(`http://192.168.1.5:5173/?room=${room}`);
    expect(parseRoomLink(plain)).toEqual({ room, page: 'http://192.168.1.5:5173/' });
    const other = roomLink('https://lab.example/', room, 'https://signal.example:9000/p');
    expect(parseRoomLink(other)).toEqual({ room, page: 'https://lab.example/', server: 'https://signal.example:9000/p' });
    expect(serverForPage(other).url).toBe('https://signal.example:9000/p');
    expect(serverForPage(plain)).toEqual(sameOriginServer(plain));
  });

  it('malformed links are refused with a message that says what is wrong', () => {
    const room = createRoomId();
    expect(() => parseRoomLink('not a url')).toThrow(/not a link/);
    expect(() => parseRoomLink('ftp://h/?room=' + room)).toThrow(/http\(s\)/);
    expect(() => parseRoomLink('http://h:5173/')).toThrow(/no \?room=/);
    expect(() => parseRoomLink('http://h:5173/?room=abc')).toThrow(/malformed/);
    expect(() => parseRoomLink(`http://h/?room=${room}&server=nope`)).toThrow(RoomLinkError);
    expect(() => roomLink('http://h/', 'bad id')).toThrow(/not a room id/);
  });

  it('PeerServer URLs map onto PeerJS options (path defaults to /peerjs)', () => {
    expect(parseServerUrl('http://10.0.0.2:5173')).toMatchObject({ host: '10.0.0.2', port: 5173, path: '/peerjs/', secure: false, key: 'peerjs', url: 'http://10.0.0.2:5173/peerjs' });
    expect(parseServerUrl('https://s.example/sig/')).toMatchObject({ host: 's.example', port: 443, path: '/sig/', secure: true, url: 'https://s.example/sig' });
    expect(peerListUrl(sameOriginServer('http://localhost:5173/?room=x'), 'd')).toBe('http://localhost:5173/peerjs/peerjs/rooms/d');
    expect(() => parseServerUrl('ws://h:1/')).toThrow(/http\(s\)/);
  });
});

describe('member ids and the room key', () => {
  it('member ids carry the room tag and a mark only the link makes, not the room id, and pass PeerJS id rules', () => {
    const room = createRoomId();
    const d = roomDiscoveryKey(room);
    const tag = roomTag(room);
    expect(tag).toMatch(/^[a-z2-7]{16}$/);
    expect(roomTag(room)).toBe(tag);
    expect(roomTag(createRoomId())).not.toBe(tag);
    const keys = newKeyPair();
    const id = memberId(d, keys.publicKey);
    expect(id).not.toContain(room);
    expect(id).not.toContain(d);
    expect(id).toMatch(/^[A-Za-z0-9]+(?:[ _-][A-Za-z0-9]+)*$/); // PeerJS validateId
    expect(tagOfMemberId(id)).toBe(tag);
    expect(isMemberId(id, d)).toBe(true);
    expect(memberId(d, newKeyPair().publicKey)).not.toBe(id);
    // The id commits to its signing key: another key does not bind it.
    expect(memberIdBindsKey(id, keys.publicKey)).toBe(true);
    expect(memberIdBindsKey(id, newKeyPair().publicKey)).toBe(false);
    expect(memberIdBindsKey('p0', keys.publicKey)).toBe(false);
    expect(isMemberId(id, roomDiscoveryKey(createRoomId()))).toBe(false);
    // A stranger who knows the tag (from one id) cannot make another id that passes.
    const [t, r, mark] = id.split('-');
    expect(isMemberId(`${t}-${r.split('').reverse().join('')}-${mark}`, d)).toBe(false);
    expect(isMemberId(`${t}-${r}-${'a'.repeat(16)}`, d)).toBe(false);
    expect(tagOfMemberId('nope')).toBeNull();
    expect(tagOfMemberId(`${tag}-x`)).toBeNull();
  });

  it('the PAKE admits the same room and passphrase only, in this session and direction', async () => {
    const room = createRoomId();
    const [key, same, otherPass, noPass, otherRoom] = await Promise.all([
      deriveRoomKey(room, 'correct horse'),
      deriveRoomKey(room, 'correct horse'),
      deriveRoomKey(room, 'correct hors'),
      deriveRoomKey(room, ''),
      deriveRoomKey(createRoomId(), 'correct horse'),
    ]);
    const [na, nb] = [randomBytes(32), randomBytes(32)];
    const run = (kb: Uint8Array) => {
      const a = new PakeSession(key, 'alice', 'bob', na, nb);
      const b = new PakeSession(kb, 'bob', 'alice', nb, na);
      const ia = a.sessionKey(b.share)!;
      const ib = b.sessionKey(a.share)!;
      return { a, b, ia, ib, ok: b.verify(ib, a.confirm(ia)) && a.verify(ia, b.confirm(ib)) };
    };
    const good = run(same);
    expect(good.ok).toBe(true);
    expect(good.a.confirm(good.ia).length).toBe(64);
    for (const k of [otherPass, noPass, otherRoom]) expect(run(k).ok).toBe(false);
    expect(good.a.verify(good.ia, good.a.confirm(good.ia))).toBe(false); // reflected back
    const flipped = good.b.confirm(good.ib).slice();
    flipped[5] ^= 1;
    expect(good.a.verify(good.ia, flipped)).toBe(false);
    expect(good.a.verify(good.ia, good.b.confirm(good.ib).subarray(0, 63))).toBe(false);
    // A session with other nonces gives another key: confirmations don't replay.
    const again = new PakeSession(key, 'alice', 'bob', randomBytes(32), nb);
    const b2 = new PakeSession(same, 'bob', 'alice', nb, na);
    expect(again.verify(again.sessionKey(b2.share)!, good.b.confirm(good.ib))).toBe(false);
    // The identity and non-points are refused as shares.
    expect(good.a.sessionKey(new Uint8Array(32))).toBeNull();
    expect(good.a.sessionKey(new Uint8Array(32).fill(255))).toBeNull();
    expect(good.a.sessionKey(new Uint8Array(31))).toBeNull();
  });

  it('base64 round-trips and refuses garbage', () => {
    const b = randomBytes(33);
    expect(fromBase64(toBase64(b))).toEqual(b);
    expect(fromBase64('*not base64*')).toBeNull();
  });
});

describe('roster', () => {
  it('ranks match PeerGroup (sorted ids) and RTT is smoothed', () => {
    expect([...ranksOf(['c', 'a', 'b', 'a'])]).toEqual([['a', 0], ['b', 1], ['c', 2]]);
    const r = new RttEstimator();
    expect(r.ms).toBeNull();
    r.sample(10);
    r.sample(90);
    expect(r.ms).toBe(20);
    r.sample(Number.NaN);
    r.sample(-1);
    expect(r.ms).toBe(20);
  });

  it('formats one line per member, ranked first', () => {
    const e = (id: string, rank: number, extra: Partial<RosterEntry> = {}): RosterEntry => ({
      id, self: false, role: 'peer', rank, state: 'admitted', rttMs: null, bytesSent: 0, bytesReceived: 0, rejected: 0, lastSeen: null, ...extra,
    });
    const text = formatRoster([e('zz', -1, { state: 'authenticating', role: null }), e('bb', 1, { rttMs: 2.25, bytesSent: 3 << 20, lastSeen: 500 }), e('aa', 0, { self: true, role: 'host' })], 2000);
    const lines = text.split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[1]).toMatch(/^0\s+aa \(me\)\s+host\s+admitted/);
    expect(lines[2]).toMatch(/^1\s+bb\s+peer\s+admitted\s+2\.3 ms\s+3\.0 MiB\s+0 B\s+1\.5 s ago$/);
    expect(lines[3]).toMatch(/^-\s+zz\s+\?\s+authenticating/);
  });
});
