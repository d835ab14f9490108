/**
 * The admission race behind a split group: a peer whose handshake timer fires after it sent 'admit'
 * but before ours arrived denies the link ('timeout') while this member, holding its admit, already
 * counts it admitted. The peer then dials again under the same id (a timeout is retried); this
 * member must take that dial, not refuse it as a member that left. The peer is scripted over raw
 * PeerJS with the PAKE from its description (tests/peers/adversary/stranger.ts), so the messages
 * arrive in exactly the racing order.
 */
import { createServer, type Server } from 'node:http';
import type { DataConnection, Peer } from 'peerjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl } from '../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../src/server/peer-server';
import { discoveryOf, linkHolderId, PakeAttacker, sleep, until } from './adversary/stranger';

installNodeWebRtc();

const PASS = 'correct horse';
const room = createRoomId();
let http: Server;
let signalling: EmbeddedPeerServer;
let port: number;
let member: PeerJsTransport;
let PeerClass: typeof Peer;
const events: string[] = [];

beforeAll(async () => {
  http = createServer();
  signalling = attachPeerServer(http);
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  port = (http.address() as { port: number }).port;
  // Long discovery interval: the member does not dial the scripted peer itself, only takes its dials.
  member = await PeerJsTransport.open({ room, passphrase: PASS, server: parseServerUrl(`http://127.0.0.1:${port}/peerjs`), discoveryIntervalMs: 60_000 });
  member.onPeerJoin((p) => events.push(`join ${p}`));
  member.onPeerLeave((p) => events.push(`leave ${p}`));
  const mod: { Peer?: typeof Peer; default?: unknown } = await import('peerjs');
  PeerClass = mod.Peer ?? (mod.default as { Peer: typeof Peer }).Peer;
});

afterAll(async () => {
  member.close();
  signalling.close();
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
});

const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, 'base64'));
const control = (m: unknown) => Uint8Array.from([1, ...Buffer.from(JSON.stringify(m))]);
type Ctl = Record<string, unknown> & { t: string };

/**
 * One connection of the scripted peer: hello, share, then its proof and 'admit' at once; `onAdmit`
 * runs when the member's admit arrives. Resolves with the member's control messages once it admitted
 * us, closed, or `waitMs` passed.
 */
// Waits end as soon as their condition holds; their length is for a loaded 2-core CI machine.
async function handshake(peer: Peer, selfId: string, onAdmit: (conn: DataConnection) => void, waitMs = 20_000): Promise<Ctl[]> {
  const nonce = new Uint8Array(32).map(() => Math.floor(Math.random() * 256));
  const got: Ctl[] = [];
  const conn = peer.connect(member.id, { serialization: 'raw', reliable: true })!;
  let pake: PakeAttacker | null = null;
  let closed = false;
  conn.on('close', () => (closed = true));
  conn.on('open', () => conn.send(control({ t: 'hello', v: 2, nonce: b64(nonce) })));
  conn.on('data', (d) => {
    const bytes = new Uint8Array(d as ArrayBuffer);
    if (bytes[0] !== 1) return;
    const m = JSON.parse(Buffer.from(bytes.subarray(1)).toString()) as Ctl;
    got.push(m);
    if (m.t === 'hello') {
      pake = new PakeAttacker(room, PASS, selfId, member.id, nonce, unb64(m.nonce as string));
      conn.send(control({ t: 'share', y: b64(pake.share) }));
    } else if (m.t === 'share' && pake) {
      const isk = pake.isk(unb64(m.y as string));
      conn.send(control({ t: 'proof', mac: b64(pake.confirm(isk, selfId, member.id)) }));
      conn.send(control({ t: 'admit', role: 'peer' }));
    } else if (m.t === 'admit') {
      onAdmit(conn);
    }
  });
  const end = Date.now() + waitMs;
  while (!closed && !got.some((m) => m.t === 'admit') && Date.now() < end) await sleep(20);
  return got;
}

describe('PeerJsTransport: a peer that timed out our handshake after we admitted it', () => {
  it('is seen leaving, and its next dial under the same id is taken and admitted', async () => {
    const selfId = linkHolderId(discoveryOf(room));
    const peer = new PeerClass(selfId, { host: '127.0.0.1', port, path: '/peerjs/', key: 'peerjs', secure: false, config: { iceServers: [] } });
    peer.on('error', () => {});
    try {
      await new Promise((resolve) => peer.once('open', resolve));
      // First link: the member admits it, then our handshake timer "fires": deny('timeout'), close.
      const first = await handshake(peer, selfId, (conn) => {
        conn.send(control({ t: 'deny', reason: 'timeout', detail: `no admission with ${member.id} within 10 s` }));
        setTimeout(() => conn.close(), 250);
      });
      expect(first.map((m) => m.t)).toEqual(['hello', 'share', 'proof', 'admit']);
      await until(() => events.includes(`leave ${selfId}`), 15_000, 'the member to see the denied link end');
      expect(member.peers()).not.toContain(selfId);
      await sleep(300);

      // The retry, as a timed-out peer makes it: same id, a new connection.
      const second = await handshake(peer, selfId, () => {});
      expect(second.map((m) => m.t), 'the member refused the retry of a peer that never left').toEqual(['hello', 'share', 'proof', 'admit']);
      await until(() => member.peers().includes(selfId), 15_000, 'the member to admit the retry');
      expect(events).toEqual([`join ${selfId}`, `leave ${selfId}`, `join ${selfId}`]);
    } finally {
      peer.destroy();
    }
  }, 90_000);
});
