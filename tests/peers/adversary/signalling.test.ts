/**
 * A stranger and a link holder against a headless peer (the CLI, its own process) through the
 * embedded PeerServer, with raw PeerServer messages: one-message crashes, floods for unknown
 * connections, Sybil ids. The peer must stay up, stay within +50 MB, log a bounded number of lines,
 * and still admit an honest member.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../../src/peers/peerjs/peerjs';
import { parseServerUrl } from '../../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../../src/server/peer-server';
import { CliPeer, discoveryOf, linkHolderId, RawSignal, sleep, strangerId } from './stranger';

installNodeWebRtc();

let http: Server;
let signalling: EmbeddedPeerServer;
let port: number;
let victim: CliPeer;
let victimId: string;
let room: string;
const raws: RawSignal[] = [];

beforeAll(async () => {
  http = createServer();
  // Limits raised and Sybil ids let through so that the floods reach the peer: the peer's own defences are under test here.
  const unlimited = { burstMessages: 1e9, messagesPerS: 1e9, burstBytes: 1e12, bytesPerS: 1e12 };
  signalling = attachPeerServer(http, { maxSocketsPerAddress: 1000, maxSocketsPerAddressRoom: 1000, maxIdsPerRoom: 1000, checkMarks: false, ...unlimited });
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  port = (http.address() as { port: number }).port;
  victim = CliPeer.start(['--host', '--page', `http://127.0.0.1:${port}/`, '--timeout', '0']);
  const r = await victim.ready();
  victimId = r.id;
  room = new URL(r.link).searchParams.get('room')!;
}, 40_000);

afterAll(async () => {
  victim?.kill();
  for (const r of raws) r.close();
  signalling.close();
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
});

async function raw(id: string): Promise<RawSignal> {
  const r = await RawSignal.connect(port, id);
  raws.push(r);
  return r;
}

/** An honest member with the link joins the victim (proves the victim still works). */
async function honestJoin(): Promise<void> {
  const t = await PeerJsTransport.open({ room, server: parseServerUrl(`http://127.0.0.1:${port}/peerjs`), heartbeatMs: 500 });
  try {
    await t.whenAdmitted(20_000);
    expect(t.peers()).toContain(victimId);
  } finally {
    t.close();
  }
}

const offer = (payload: unknown) => ({ type: 'OFFER', dst: '', payload });
const goodOffer = (cid: string, sdp = 'v=0\r\n') => ({ connectionId: cid, type: 'data', serialization: 'raw', reliable: true, label: cid, sdp: { type: 'offer', sdp } });

describe('adversary: signalling against a headless peer', () => {
  it('survives the one-message OFFER crashes (no payload, null, unknown serialization) and other malformed messages', async () => {
    const stranger = await raw(strangerId(victimId.split('-')[0]));
    const holder = await raw(linkHolderId(discoveryOf(room)));
    const attacks: unknown[] = [
      { type: 'OFFER' },
      offer(null),
      offer({ ...goodOffer('dc_a'), serialization: 'bogus' }),
      offer({ ...goodOffer('dc_b'), serialization: undefined }),
      offer({}),
      offer({ type: 'media', connectionId: 'mc_c', sdp: { type: 'offer', sdp: 'v=0' } }),
      offer(goodOffer('dc_d', 'not an sdp at all')), // well-formed, hostile SDP
      offer({ ...goodOffer('dc_e'), connectionId: { toString: 1 } }),
      { type: 'ANSWER', payload: null },
      { type: 'CANDIDATE', payload: null },
      { type: 'CANDIDATE', payload: { connectionId: 'dc_f', type: 'data', candidate: null } },
      { type: 'ANSWER', payload: { connectionId: 'dc_d', type: 'data', sdp: 5 } },
      { type: 'ERROR', payload: null },
      { type: 'FOO', payload: 1 },
      { type: 'LEAVE' },
      { type: 'EXPIRE' },
      'not json',
    ];
    for (const attacker of [stranger, holder]) {
      for (const m of attacks) attacker.send(typeof m === 'object' && m !== null ? { ...m, dst: victimId } : m);
      await attacker.flushed();
    }
    await sleep(1500);
    expect(victim.exited, victim.out).toBeNull();
    await honestJoin();
    expect(victim.exited).toBeNull();
  }, 60_000);

  it('a CANDIDATE flood for unknown connection ids keeps the peer within +50 MB and its log short', async () => {
    const holder = await raw(linkHolderId(discoveryOf(room)));
    const stranger = await raw(strangerId());
    const before = victim.rssMb();
    const linesBefore = victim.out.split('\n').length;
    const cand = (cid: string, n: number) => ({ type: 'CANDIDATE', dst: victimId, payload: { connectionId: cid, type: 'data', candidate: { candidate: 'a'.repeat(n), sdpMid: '0', sdpMLineIndex: 0 } } });
    // Valid-looking candidates (1 KB) for unknown connections, and 4 KB ones from both: ≈ 2.5 KB a
    // message, which PeerJS alone would keep forever. A first part warms the peer up (parsing churn
    // and the backlog of a starved process raise RSS once, by more on a loaded machine); the bound
    // is on what the rest adds, 32,000 messages (≈ 80 MB).
    const flood = async (from: number, to: number) => {
      for (let i = from; i < to; i++) {
        holder.send(cand(`dc_${i}`, 1000));
        if (i % 2 === 0) {
          holder.send(cand(`dc_x${i}`, 4000));
          stranger.send(cand(`dc_y${i}`, 4000));
        }
        if (i % 250 === 249) {
          // Paced like a sender on a real link: the peer's backlog, not the flood, would set its RSS otherwise.
          await Promise.all([holder.flushed(), stranger.flushed()]);
          await sleep(20);
        }
      }
      await Promise.all([holder.flushed(), stranger.flushed()]);
      await sleep(2000);
    };
    await flood(0, 4000);
    const warm = victim.rssMb();
    await flood(4000, 20_000);
    const after = victim.rssMb();
    console.log(`adversary: CLI peer RSS ${before.toFixed(0)} (idle) → ${warm.toFixed(0)} (after 8,000 messages) → ${after.toFixed(0)} MB (after 40,000)`);
    expect(victim.exited, victim.out).toBeNull();
    expect(after - warm, `RSS ${warm.toFixed(0)} → ${after.toFixed(0)} MB`).toBeLessThan(50);
    // 40,000 dropped messages, a bounded number of log lines.
    expect(victim.out.split('\n').length - linesBefore).toBeLessThan(100);
    await honestJoin();
  }, 90_000);

  it('Sybil ids under the room tag are never dialled; link-holder ids are dialled within the cap only', async () => {
    const tag = victimId.split('-')[0];
    const sybils = await Promise.all(Array.from({ length: 30 }, () => raw(strangerId(tag))));
    const holders = await Promise.all(Array.from({ length: 12 }, () => raw(linkHolderId(discoveryOf(room)))));
    // Two discovery rounds of the victim (every 3 s).
    await sleep(7000);
    const offersTo = (r: RawSignal) => r.received.filter((m) => m.type === 'OFFER').length;
    expect(sybils.map(offersTo).reduce((a, b) => a + b, 0)).toBe(0);
    const dialled = holders.filter((h) => offersTo(h) > 0).length;
    expect(dialled).toBeGreaterThan(0);
    expect(dialled).toBeLessThanOrEqual(8); // MAX_UNADMITTED_LINKS
    // A Sybil's offer sets nothing up: no ANSWER ever comes back.
    sybils[0].send({ type: 'OFFER', dst: victimId, payload: goodOffer('dc_sybil') });
    await sleep(1000);
    expect(sybils[0].received.some((m) => m.type === 'ANSWER' || m.type === 'CANDIDATE')).toBe(false);
    expect(victim.exited).toBeNull();
    for (const r of [...sybils, ...holders]) r.close();
  }, 30_000);
});
