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
import { checkLabConfig, labConfigHandler } from './lab-config';
import { attachPeerServer } from './peer-server';
import { serveStatic } from './static';

const USAGE = `usage: npm start [-- --port 5173 --host 0.0.0.0 --dir dist --ice SPEC --ice-relay-only]
  --ice SPEC        ICE servers the pages use for their groups: [USER:SECRET@]stun:|turn:HOST:PORT[,...]
                    or a JSON array of RTCIceServer (default none: nothing outside is contacted)
  --ice-relay-only  the pages use relayed candidates only (through the TURN server of --ice)`;

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
    a = parseArgs({ options: { port: { type: 'string' }, host: { type: 'string' }, dir: { type: 'string' }, ice: { type: 'string' }, 'ice-relay-only': { type: 'boolean' }, help: { type: 'boolean', short: 'h' } }, strict: true }).values;
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
    config = checkLabConfig({ ice: a.ice ?? '', relayOnly: a['ice-relay-only'] ?? false });
  } catch (e) {
    throw new UsageError(`--ice: ${(e as Error).message}`);
  }
  const server = createServer();
  const labConfig = labConfigHandler(config);
  const peers = attachPeerServer(server);
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
