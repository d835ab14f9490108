/**
 * `npm start`: serves the built page (dist/) and the PeerJS signalling server from one Node process
 * (plain node:http + the `peer` package), on all interfaces so that other machines of the LAN can
 * open a room link. `npm run dev` stays the Vite dev server, which embeds the same PeerServer.
 *
 *   node scripts/run-node.mjs src/server/serve.ts [--port 5173] [--host 0.0.0.0] [--dir dist]
 */
import { existsSync } from 'node:fs';
import { createServer } from 'node:http';
import { networkInterfaces } from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { fail, num, UsageError } from '../cli/common';
import { checkLabConfig, labConfigHandler, turnIssuer } from './lab-config';
import { attachPeerServer } from './peer-server';
import { serveStatic } from './static';

const USAGE = `usage: npm start [-- --port 5173 --host 0.0.0.0 --dir dist --ice SPEC --ice-relay-only --turn URL --turn-secret S]
  --ice SPEC          ICE servers the pages use for their groups: [USER:SECRET@]stun:|turn:HOST:PORT[,...]
                      or a JSON array of RTCIceServer (default none: nothing outside is contacted);
                      TURN entries are handed only to registered members of a room, never in /lab-config.json
  --ice-relay-only    the pages use relayed candidates only (through the TURN server of --ice or --turn)
  --turn URL[,URL]    a TURN server with REST credentials (coturn use-auth-secret): each member gets
                      its own, derived from --turn-secret, valid --turn-ttl seconds (default 43200)
  --turn-secret S     that TURN server's static-auth-secret (or LAB_TURN_SECRET; never sent anywhere)`;

function lanUrls(port: number): string[] {
  const urls: string[] = [];
  for (const addrs of Object.values(networkInterfaces())) {
    for (const a of addrs ?? []) if (a.family === 'IPv4' && !a.internal) urls.push(`http://${a.address}:${port}/`);
  }
  return urls;
}

async function main(): Promise<void> {
  let a;
  try {
    a = parseArgs({ options: { port: { type: 'string' }, host: { type: 'string' }, dir: { type: 'string' }, ice: { type: 'string' }, 'ice-relay-only': { type: 'boolean' }, turn: { type: 'string' }, 'turn-secret': { type: 'string' }, 'turn-ttl': { type: 'string' }, help: { type: 'boolean', short: 'h' } }, strict: true }).values;
  } catch (e) {
    throw new UsageError(`${(e as Error).message}\n${USAGE}`);
  }
  if (a.help) {
    console.log(USAGE);
    return;
  }
  const port = num('port', a.port, { int: true, min: 0 }) ?? 5173;
  const host = a.host ?? '0.0.0.0';
  const root = path.resolve(a.dir ?? 'dist');
  if (!existsSync(path.join(root, 'index.html'))) throw new UsageError(`${path.join(root, 'index.html')} not found: build the page first (npx vite build)`);

  let config;
  try {
    const ttl = num('turn-ttl', a['turn-ttl'], { int: true, min: 60 });
    const secret = a['turn-secret'] ?? process.env.LAB_TURN_SECRET;
    config = checkLabConfig({ ice: a.ice ?? '', relayOnly: a['ice-relay-only'] ?? false, ...(a.turn ? { turn: a.turn } : {}), ...(secret ? { turnSecret: secret } : {}), ...(ttl ? { turnTtlS: ttl } : {}) });
  } catch (e) {
    if (e instanceof UsageError) throw e;
    throw new UsageError(`--ice: ${(e as Error).message}`);
  }
  const server = createServer();
  const labConfig = labConfigHandler(config);
  const peers = attachPeerServer(server, { turn: turnIssuer(config) });
  const files = serveStatic(root);
  server.on('request', (req, res) => peers.handle(req, res, () => labConfig(req, res, () => files(req, res))));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const bound = (server.address() as { port: number }).port;
  console.log(`lab: serving ${root} and the PeerServer (${peers.path}) at http://localhost:${bound}/`);
  for (const u of host === '0.0.0.0' ? lanUrls(bound) : []) console.log(`     on the LAN: ${u}`);
  const stop = () => {
    peers.close();
    server.close();
    process.exit(0);
  };
  process.on('SIGINT', stop);
  process.on('SIGTERM', stop);
}

main().catch(fail);
