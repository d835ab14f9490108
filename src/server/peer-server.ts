/**
 * The PeerJS signalling server (the `peer` package) on an existing Node http server, at
 * PEER_SERVER_PATH on the page's own origin: the Vite dev and preview servers (vite.config.ts) and
 * `npm start` (src/server/serve.ts) all use this, so a LAN group needs nothing outside.
 *
 * Peer listing is on (`allow_discovery`): members find their room through it (src/peers/peerjs.ts).
 * The websocket server is created `noServer` and fed only upgrades for its own path, because a `ws`
 * server bound to the http server answers every other upgrade with 400 — Vite's HMR socket included.
 */
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ExpressPeerServer } from 'peer';
import { WebSocketServer } from 'ws';
import { PEER_SERVER_PATH } from '../peers/room';

export interface EmbeddedPeerServer {
  /** Mount path (PEER_SERVER_PATH unless overridden). */
  readonly path: string;
  /** Connect/Express-style middleware: answers requests under `path`, passes the rest to `next`. */
  handle(req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  /**
   * Closes the signalling websockets and stops taking upgrades. (The `peer` package keeps two
   * housekeeping timers for the life of the process; it has no way to stop them.)
   */
  close(): void;
}

export interface EmbeddedPeerServerOptions {
  path?: string;
  /** Seconds without a heartbeat before the server forgets a peer (PeerJS clients beat every 5 s). Default 60. */
  aliveTimeoutS?: number;
}

export function attachPeerServer(server: HttpServer, opts: EmbeddedPeerServerOptions = {}): EmbeddedPeerServer {
  const path = opts.path ?? PEER_SERVER_PATH;
  let wss: WebSocketServer | null = null;
  const api = ExpressPeerServer(server, {
    path,
    allow_discovery: true,
    alive_timeout: (opts.aliveTimeoutS ?? 60) * 1000,
    createWebSocketServer: (o) => (wss = new WebSocketServer({ noServer: true, path: o.path })),
  });
  // ExpressPeerServer starts its server when mounted in a parent Express app; a second
  // ExpressPeerServer app (never mounted itself, so it starts nothing) is that parent, which spares
  // a direct dependency on express.
  const root = ExpressPeerServer(server, {});
  root.use(api);
  const socketServer = wss as WebSocketServer | null;
  if (!socketServer) throw new Error('peer: ExpressPeerServer did not create its websocket server on mount');

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!socketServer.shouldHandle(req)) return; // someone else's upgrade (e.g. Vite HMR)
    socketServer.handleUpgrade(req, socket, head, (ws) => socketServer.emit('connection', ws, req));
  };
  server.on('upgrade', onUpgrade);

  // An Express app is a plain (req, res, next) handler; its typings only admit Express's own request type.
  const serve = root as unknown as (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  const prefix = `${path}/`;
  return {
    path,
    handle(req, res, next) {
      const url = req.url ?? '';
      if (url === path || url.startsWith(prefix) || url.startsWith(`${path}?`)) serve(req, res, next);
      else next();
    },
    close() {
      server.off('upgrade', onUpgrade);
      for (const c of socketServer.clients) c.terminate();
      socketServer.close();
    },
  };
}
