/**
 * A stranger against the embedded PeerServer itself: hostile ids, enumeration of rooms, limits per
 * address and per room, CORS and foreign origins, garbage on the socket. Honest members must still
 * find each other and join.
 */
import { createServer, request, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl, type PeerServerAddress } from '../../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../../src/server/peer-server';
import { discoveryOf, linkHolderId, RawSignal, sleep, strangerId } from './stranger';

installNodeWebRtc();

interface Running {
  http: Server;
  sig: EmbeddedPeerServer;
  port: number;
  address: PeerServerAddress;
}
const running: Running[] = [];
const raws: RawSignal[] = [];

async function serve(opts: Parameters<typeof attachPeerServer>[1] = {}, listing?: (url: string) => unknown[] | null): Promise<Running> {
  const http = createServer();
  const sig = attachPeerServer(http, opts);
  http.on('request', (req, res) => {
    const fake = listing?.(req.url ?? '');
    if (fake) return void res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify(fake));
    sig.handle(req, res, () => res.writeHead(404).end());
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const port = (http.address() as { port: number }).port;
  const r = { http, sig, port, address: parseServerUrl(`http://127.0.0.1:${port}/peerjs`) };
  running.push(r);
  return r;
}

let main: Running;
beforeAll(async () => {
  main = await serve({ maxSocketsPerAddress: 10, maxIdsPerRoom: 4 });
});

afterAll(async () => {
  for (const r of raws) r.close();
  for (const { sig, http } of running) {
    sig.close();
    http.closeAllConnections();
    await new Promise((resolve) => http.close(resolve));
  }
});

function get(port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function registers(port: number, id: string, headers: Record<string, string> = {}): Promise<boolean> {
  try {
    raws.push(await RawSignal.connect(port, id, headers));
    return true;
  } catch {
    return false;
  }
}

async function open(r: Running, room: string, role: 'host' | 'peer' = 'peer'): Promise<PeerJsTransport> {
  return PeerJsTransport.open({ room, server: r.address, role, heartbeatMs: 500 });
}

describe('adversary: the embedded PeerServer', () => {
  it('refuses hostile ids (5,000 chars, 200 chars, ../../etc, <script>), bad tokens and keys; honest members still join', async () => {
    const hostile = ['x'.repeat(5000), 'a'.repeat(200), '../../etc/passwd', '<script>alert(1)</script>', 'abc', `${strangerId()}-extra`, ''];
    for (const id of hostile) expect(await registers(main.port, id), id.slice(0, 40)).toBe(false);
    expect(await registers(main.port, strangerId())).toBe(true); // well-formed ids register (the server can't tell rooms apart)
    const room = createRoomId();
    const a = await open(main, room, 'host');
    const b = await open(main, room);
    try {
      await b.whenAdmitted(15_000);
      expect(b.peers()).toEqual([a.id]);
    } finally {
      a.close();
      b.close();
    }
  }, 40_000);

  it('lists a room only to its discovery key, never the whole server; Sybil ids under a tag are not listed', async () => {
    const room = createRoomId();
    const d = discoveryOf(room);
    const member = linkHolderId(d);
    expect(await registers(main.port, member)).toBe(true);
    const tag = member.split('-')[0];
    expect(await registers(main.port, strangerId(tag))).toBe(true); // a Sybil under the room's tag
    expect((await get(main.port, '/peerjs/peerjs/peers')).status).toBe(401);
    expect(JSON.parse((await get(main.port, `/peerjs/peerjs/rooms/${d}`)).body)).toEqual([member]);
    // The tag (all a stranger can read from an id) lists nothing, nor do other keys.
    expect((await get(main.port, `/peerjs/peerjs/rooms/${tag}`)).status).toBe(400);
    expect(JSON.parse((await get(main.port, `/peerjs/peerjs/rooms/${discoveryOf(createRoomId())}`)).body)).toEqual([]);
    expect((await get(main.port, '/peerjs/peerjs/rooms/..%2f..%2fetc')).status).toBe(400);
  });

  it('limits sockets per address and ids per room', async () => {
    const r = await serve({ maxSocketsPerAddress: 5, maxIdsPerRoom: 3 });
    const d = discoveryOf(createRoomId());
    // At once: registrations still in flight count against the room too.
    const inRoom = await Promise.all(Array.from({ length: 5 }, () => registers(r.port, linkHolderId(d))));
    expect(inRoom.filter(Boolean)).toHaveLength(3);
    const more = await Promise.all(Array.from({ length: 3 }, () => registers(r.port, strangerId())));
    expect(more.filter(Boolean)).toHaveLength(2); // 5 sockets from 127.0.0.1 in all
  });

  it('sends no CORS headers and refuses sockets from a foreign page', async () => {
    const d = discoveryOf(createRoomId());
    for (const path of ['/peerjs', `/peerjs/peerjs/rooms/${d}`, '/peerjs/peerjs/id']) {
      const res = await get(main.port, path, { Origin: 'http://evil.example' });
      expect(res.headers['access-control-allow-origin'], path).toBeUndefined();
    }
    const host = `127.0.0.1:${main.port}`;
    expect(await registers(main.port, strangerId(), { Origin: 'http://evil.example' })).toBe(false);
    expect(await registers(main.port, strangerId(), { Origin: `http://${host}` })).toBe(true);
  });

  it('survives garbage and oversized messages on the signalling socket', async () => {
    const s = await RawSignal.connect(main.port, strangerId());
    raws.push(s);
    for (const m of ['not json', '5', 'null', '[]', '{"type":"OFFER","dst":5}', JSON.stringify({ type: 'OFFER', dst: 'x', payload: 'y'.repeat(200_000) })]) s.send(m);
    await sleep(300);
    expect(JSON.parse((await get(main.port, '/peerjs')).body)).toMatchObject({ name: 'PeerJS Server' });
    expect(await registers(main.port, strangerId())).toBe(true);
  });

  it('a member skips malformed listing entries (a 200-character id among them) and still joins', async () => {
    const room = createRoomId();
    let hostId = '';
    const r = await serve({}, (url) => (url.startsWith('/peerjs/peerjs/rooms/') && hostId ? ['a'.repeat(200), 42, null, { id: 1 }, '<script>', hostId] : null));
    const a = await open(r, room, 'host');
    hostId = a.id;
    const b = await open(r, room);
    try {
      await b.whenAdmitted(15_000);
      expect(b.peers()).toEqual([a.id]);
    } finally {
      a.close();
      b.close();
    }
  }, 30_000);
});
