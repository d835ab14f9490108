/**
 * TURN from the PeerServer, as a page gets it from `npm start --turn URL --turn-secret S`: two
 * headless members that ask for credentials once registered (turnFromServer), relay-only, through a
 * TURN server from npm (node-turn) on loopback. node-turn has no TURN REST (use-auth-secret) mode, so
 * each credential the PeerServer issues is given to it as a long-term user — the very check coturn
 * makes (HMAC-SHA1 of the username under the shared secret). A credential the TURN server never
 * learnt gets no relay: no link.
 */
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl, type PeerServerAddress } from '../../src/peers/room/room';
import { checkLabConfig, turnIssuer } from '../../src/server/lab-config';
import { attachPeerServer, type EmbeddedPeerServer } from '../../src/server/peer-server';
import { type LocalTurn, startTurn } from '../helpers/turn';

installNodeWebRtc();

const SECRET = 'static-auth-secret';
let turn: LocalTurn;
let http: Server;
let signalling: EmbeddedPeerServer;
let address: PeerServerAddress;
/** Whether the TURN server learns the credentials the PeerServer issues. */
let tellTurn = true;
const issued: string[] = [];
const opened: PeerJsTransport[] = [];

beforeAll(async () => {
  turn = await startTurn();
  const issue = turnIssuer(checkLabConfig({ ice: '', relayOnly: true, turn: `turn:127.0.0.1:${turn.port}?transport=udp`, turnSecret: SECRET, turnTtlS: 600 }))!;
  http = createServer();
  signalling = attachPeerServer(http, {
    turn: (id) => {
      const g = issue(id);
      const s = g.iceServers[0];
      issued.push(s.username!);
      if (tellTurn) turn.addUser(s.username!, s.credential as string);
      return g;
    },
  });
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  address = parseServerUrl(`http://127.0.0.1:${(http.address() as { port: number }).port}/peerjs`);
});

afterAll(async () => {
  for (const t of opened.splice(0)) t.close();
  await turn?.stop();
  signalling?.close();
  http?.closeAllConnections();
  await new Promise((resolve) => http?.close(resolve));
});

describe('TURN credentials from the PeerServer', () => {
  it('members that prove their room get their own short-lived TURN credential and link through the relay; an unknown credential gets no link', async () => {
    const room = createRoomId();
    const [a, b] = await Promise.all([0, 1].map((i) => PeerJsTransport.open({ room, server: address, role: i ? 'peer' : 'host', heartbeatMs: 200, turnFromServer: true })));
    opened.push(a, b);
    await b.whenAdmitted(20_000);
    expect(b.peers()).toEqual([a.id]);
    // One credential per member, naming it; relay-only came with them, so the TURN server relays.
    expect(issued.map((u) => u.slice(u.indexOf(':') + 1)).sort()).toEqual([a.id, b.id].sort());
    expect(turn.allocations()).toBeGreaterThanOrEqual(2);

    tellTurn = false;
    const room2 = createRoomId();
    const [c, d] = await Promise.all([0, 1].map((i) => PeerJsTransport.open({ room: room2, server: address, role: i ? 'peer' : 'host', heartbeatMs: 200, handshakeTimeoutMs: 3000, turnFromServer: true })));
    opened.push(c, d);
    await expect(d.whenAdmitted(5000)).rejects.toThrow(/not admitted/);
    expect(c.peers()).toEqual([]);
  }, 60_000);
});
