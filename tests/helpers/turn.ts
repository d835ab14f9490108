/**
 * A TURN server from npm (node-turn, long-term credentials) on loopback for the relay tests: a free
 * UDP port, relay ports beside it, the spec members pass as ICE (src/peers/transport/ice.ts).
 */
import { createSocket } from 'node:dgram';
import TurnServer from 'node-turn';

export interface LocalTurn {
  port: number;
  /** The ICE spec for user `lab` with `secret` (percent-encoded). */
  spec(secret?: string): string;
  /** Adds a long-term user (as coturn, given a TURN REST credential, checks its HMAC: the same check). */
  addUser(name: string, secret: string): void;
  /** Allocations the server holds (one per member that got a relayed candidate). */
  allocations(): number;
  /** Stops it once relayed traffic has settled: node-turn answers in a callback and throws on a closed socket. */
  stop(): Promise<void>;
}

export const TURN_SECRET = 'relay:secret@1';

function freeUdpPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createSocket('udp4');
    s.once('error', reject);
    s.bind(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export async function startTurn(): Promise<LocalTurn> {
  const port = await freeUdpPort();
  const relayBase = 20_000 + (port % 20_000);
  const turn = new TurnServer({
    listeningPort: port, listeningIps: ['127.0.0.1'], relayIps: ['127.0.0.1'], externalIps: { '127.0.0.1': '127.0.0.1' },
    minPort: relayBase, maxPort: relayBase + 200, authMech: 'long-term', credentials: { lab: TURN_SECRET }, debugLevel: 'OFF',
  });
  turn.start();
  return {
    port,
    spec: (secret = TURN_SECRET) => `lab:${encodeURIComponent(secret)}@turn:127.0.0.1:${port}?transport=udp`,
    addUser: (name, secret) => (turn as unknown as { addUser(u: string, p: string): void }).addUser(name, secret),
    allocations: () => Object.keys((turn as unknown as { allocations: Record<string, unknown> }).allocations).length,
    stop: async () => {
      await new Promise((r) => setTimeout(r, 1500));
      turn.stop();
    },
  };
}
