/**
 * A link holder without the passphrase against a headless member's admission, speaking raw PeerJS
 * (peerjs + @roamhq/wrtc, none of the project's client code) and the PAKE from its description:
 * what leaves the member before the link holder proved the room key gives nothing to test
 * passphrase guesses against offline; the member's role and passphrase flag are not told; failed
 * attempts are rate-limited.
 */
import { createServer, type Server } from 'node:http';
import type { DataConnection, Peer } from 'peerjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../../src/peers/transport/node-webrtc';
import { MAX_AUTH_FAILURES_PER_MINUTE, type PeerProblem, PeerJsTransport } from '../../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl } from '../../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../../src/server/peer-server';
import { discoveryOf, linkHolderId, PakeAttacker, sleep, until } from './stranger';

installNodeWebRtc();

const PASS = 'tr0ub4dor';
let http: Server;
let signalling: EmbeddedPeerServer;
let port: number;
let victim: PeerJsTransport;
const problems: PeerProblem[] = [];
const room = createRoomId();
let PeerClass: typeof Peer;

beforeAll(async () => {
  http = createServer();
  signalling = attachPeerServer(http);
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  port = (http.address() as { port: number }).port;
  victim = await PeerJsTransport.open({ room, passphrase: PASS, role: 'host', server: parseServerUrl(`http://127.0.0.1:${port}/peerjs`), handshakeTimeoutMs: 4000 });
  victim.onProblem((p) => problems.push(p));
  const mod: { Peer?: typeof Peer; default?: unknown } = await import('peerjs');
  PeerClass = mod.Peer ?? (mod.default as { Peer: typeof Peer }).Peer;
});

afterAll(async () => {
  victim.close();
  signalling.close();
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
});

const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');
const unb64 = (s: string) => new Uint8Array(Buffer.from(s, 'base64'));
const control = (m: unknown) => Uint8Array.from([1, ...Buffer.from(JSON.stringify(m))]);
type Ctl = Record<string, unknown> & { t: string };

interface Attempt {
  /** Control messages from the member, in order, until it closed (or the attempt gave up). */
  got: Ctl[];
  opened: boolean;
  attacker: PakeAttacker | null;
  selfId: string;
  nonce: Uint8Array;
}

/** One admission attempt with `guess` as the passphrase, by a fresh link-holder id. */
async function attempt(guess: string, waitMs = 6000): Promise<Attempt> {
  const selfId = linkHolderId(discoveryOf(room));
  const peer = new PeerClass(selfId, { host: '127.0.0.1', port, path: '/peerjs/', key: 'peerjs', secure: false, config: { iceServers: [] } });
  peer.on('error', () => {});
  const nonce = new Uint8Array(32).map(() => Math.floor(Math.random() * 256));
  const out: Attempt = { got: [], opened: false, attacker: null, selfId, nonce };
  try {
    await new Promise((resolve) => peer.once('open', resolve));
    const conn: DataConnection = peer.connect(victim.id, { serialization: 'raw', reliable: true })!;
    let closed = false;
    conn.on('close', () => (closed = true));
    conn.on('data', (d) => {
      const bytes = new Uint8Array(d as ArrayBuffer);
      if (bytes[0] !== 1) return;
      const m = JSON.parse(Buffer.from(bytes.subarray(1)).toString()) as Ctl;
      out.got.push(m);
      if (m.t === 'hello') {
        out.attacker = new PakeAttacker(room, guess, selfId, victim.id, nonce, unb64(m.nonce as string));
        conn.send(control({ t: 'share', y: b64(out.attacker.share) }));
      } else if (m.t === 'share' && out.attacker) {
        const isk = out.attacker.isk(unb64(m.y as string));
        conn.send(control({ t: 'proof', mac: b64(out.attacker.confirm(isk, selfId, victim.id)) }));
      }
    });
    conn.on('open', () => {
      out.opened = true;
      conn.send(control({ t: 'hello', v: 2, nonce: b64(nonce) }));
    });
    const end = Date.now() + waitMs;
    while (!closed && !out.got.some((m) => m.t === 'admit') && Date.now() < end) await sleep(20);
    return out;
  } finally {
    peer.destroy();
  }
}

describe('adversary: admission against a link holder without the passphrase', () => {
  it('the attacker speaks the protocol right: with the passphrase it is admitted, and only then learns the role', async () => {
    const r = await attempt(PASS);
    expect(r.got.map((m) => m.t)).toEqual(['hello', 'share', 'proof', 'admit']);
    expect(r.got[3]).toMatchObject({ role: 'host' });
  }, 20_000);

  it('nothing verifiable offline leaves the member before the other side proved the room key', async () => {
    const r = await attempt('wrong guess');
    const [hello, share, proof, deny] = r.got;
    expect(r.got.map((m) => m.t)).toEqual(['hello', 'share', 'proof', 'deny']);
    // No role, no passphrase flag: only a nonce, a curve point and a key confirmation.
    expect(Object.keys(hello).sort()).toEqual(['nonce', 't', 'v']);
    expect(Object.keys(share).sort()).toEqual(['t', 'y']);
    expect(Object.keys(proof).sort()).toEqual(['mac', 't']);
    expect(deny).toMatchObject({ reason: 'passphrase' });
    // Offline: the attacker's only computable session key (from its own secret) checks the member's
    // confirmation for no guess, the true passphrase included; the transcript does not single it out.
    const mac = unb64(proof.mac as string);
    const isk = r.attacker!.isk(unb64(share.y as string));
    const expected = r.attacker!.confirm(isk, victim.id, r.selfId);
    expect(Buffer.from(expected).equals(Buffer.from(mac))).toBe(false);
    for (const guess of ['wrong guess', 'password', PASS, '']) {
      const fresh = new PakeAttacker(room, guess, r.selfId, victim.id, r.nonce, unb64(hello.nonce as string));
      const k = fresh.isk(unb64(share.y as string));
      expect(Buffer.from(fresh.confirm(k, victim.id, r.selfId)).equals(Buffer.from(mac)), guess).toBe(false);
    }
    await until(() => problems.some((p) => p.kind === 'auth-failed' && p.peer === r.selfId), 3000, 'the member to report the failed proof');
  }, 20_000);

  it(`after ${MAX_AUTH_FAILURES_PER_MINUTE} failed attempts in a minute, no new connection is set up`, async () => {
    let failed = problems.filter((p) => p.kind === 'auth-failed').length;
    while (failed < MAX_AUTH_FAILURES_PER_MINUTE) {
      const r = await attempt(`guess ${failed}`);
      expect(r.got.at(-1)?.t).toBe('deny');
      failed++;
    }
    const blocked = await attempt('one more', 3000);
    expect(blocked.opened).toBe(false);
    expect(blocked.got).toEqual([]);
  }, 60_000);
});
