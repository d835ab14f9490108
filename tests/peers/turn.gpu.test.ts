/**
 * Across networks: a TURN server from npm (node-turn, long-term credentials) on loopback, two headless
 * members that may use relayed candidates only (iceTransportPolicy 'relay'), the embedded PeerServer,
 * real WebRTC (@roamhq/wrtc): the group forms through the relay and trains data-parallel with equal
 * weights. A member with wrong TURN credentials gets no link at all.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { DataParallel } from '../../src/parallel/dp/dp';
import { weightsHash } from '../../src/parallel/dp/wire';
import { parseIce } from '../../src/peers/transport/ice';
import { installNodeWebRtc } from '../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl, type PeerServerAddress } from '../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../src/server/peer-server';
import { testRuntime } from '../helpers/gpu';
import { type LocalTurn, startTurn, TURN_SECRET } from '../helpers/turn';

installNodeWebRtc();

let http: Server;
let signalling: EmbeddedPeerServer;
let address: PeerServerAddress;
let turn: LocalTurn;
const opened: PeerJsTransport[] = [];

beforeAll(async () => {
  http = createServer();
  signalling = attachPeerServer(http);
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  address = parseServerUrl(`http://127.0.0.1:${(http.address() as { port: number }).port}/peerjs`);
  turn = await startTurn();
});

afterAll(async () => {
  for (const t of opened.splice(0)) t.close();
  await turn?.stop();
  signalling.close();
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
});

describe('peer group through a TURN relay', () => {
  it('forms with relay-only ICE and trains data-parallel with equal weights; wrong credentials get no link', async () => {
    // Trainers first: compiling on SwiftShader blocks the event loop longer than a link's silence timeout.
    const text = readFileSync('public/data/tinyshakespeare.txt', 'utf8').slice(0, 50_000);
    const tokenizer = CharTokenizer.fromText(text);
    const opts = defaultTrainOptions('micro', { steps: 10, warmup: 1, batch: 2, seq: 16, model: { vocab_size: tokenizer.vocabSize } });
    const rt = await testRuntime();
    const trainers = await Promise.all([0, 1].map(() => Trainer.create(rt, opts, text, { tokenizer })));
    const ice = parseIce(turn.spec(), true);
    expect(ice.servers[0]).toMatchObject({ username: 'lab', credential: TURN_SECRET });
    const room = createRoomId();
    const [a, b] = await Promise.all([0, 1].map((i) => PeerJsTransport.open({ room, server: address, ice, role: i ? 'peer' : 'host', heartbeatMs: 200 })));
    opened.push(a, b);
    await b.whenAdmitted(20_000);
    for (const end = Date.now() + 10_000; a.peers().length === 0 && Date.now() < end;) await new Promise((r) => setTimeout(r, 20));
    expect(a.peers()).toEqual([b.id]);
    // Relay-only: the only candidates were the TURN server's allocations, so it holds some now.
    expect(turn.allocations()).toBeGreaterThanOrEqual(2);

    try {
      const members = [a.id, b.id].sort();
      const dps = [new DataParallel(trainers[0], a, { run: 'turn', mode: 'int8', members }), new DataParallel(trainers[1], b, { run: 'turn', mode: 'int8', members })];
      for (let s = 0; s < 2; s++) {
        const stats = await Promise.all(dps.map((d) => d.step()));
        expect(stats.map((x) => x.world)).toEqual([2, 2]);
      }
      const [wa, wb] = await Promise.all(trainers.map((t) => t.trainingState()));
      expect(weightsHash(wa.weights)).toBe(weightsHash(wb.weights));
      dps.forEach((d) => d.stop());
    } finally {
      trainers.forEach((t) => t.destroy());
    }

    // Wrong secret: the TURN server refuses the allocation, relay-only leaves no candidate, no link.
    const room2 = createRoomId();
    const bad = parseIce(turn.spec('wrong'), true);
    const [c, d] = await Promise.all([0, 1].map((i) => PeerJsTransport.open({ room: room2, server: address, ice: bad, role: i ? 'peer' : 'host', heartbeatMs: 200, handshakeTimeoutMs: 3000 })));
    opened.push(c, d);
    // The timeout names where each link stands and how many were set up.
    await expect(d.whenAdmitted(6000)).rejects.toThrow(/not admitted.*none completed the handshake \((links .*: connecting for [\d.]+ s|no link open); [1-9]\d* set up since opening\)/);
    expect(c.peers()).toEqual([]);
  }, 120_000);
});
