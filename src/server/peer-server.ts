/**
 * The PeerJS signalling server (the `peer` package) on an existing Node http server, at
 * PEER_SERVER_PATH on the page's own origin: the Vite dev and preview servers (vite.config.ts) and
 * `npm start` (src/server/serve.ts) all use this, so a LAN group needs nothing outside.
 *
 * Hardened against whoever can reach it: the global peer listing is off; members find their room
 * through GET <path>/peerjs/rooms/<discovery key>, which lists only ids of that room with a valid
 * mark (src/peers/room/room.ts), so the listing proves the link and enumerates nobody to a stranger.
 * Registrations are refused (before the websocket opens) for ids that are not member ids, bad
 * tokens or keys, a foreign page's Origin, more sockets than the per-address limit, or more ids
 * than the per-room limit; signalling messages are capped in size; no CORS headers are sent, so
 * only the page's own origin reads the API.
 *
 * The websocket server is created `noServer` and fed only upgrades for its own path, because a `ws`
 * server bound to the http server answers every other upgrade with 400 — Vite's HMR socket included.
 */
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ExpressPeerServer } from 'peer';
import { WebSocketServer } from 'ws';
import { isMemberId, MAX_PEER_ID_LENGTH, PEER_SERVER_KEY, PEER_SERVER_PATH, tagOfMemberId } from '../peers/room/room';

/** Defaults of the per-address and per-room registration limits. */
export const MAX_SOCKETS_PER_ADDRESS = 32;
export const MAX_IDS_PER_ROOM = 64;
/** Largest signalling message (an SDP offer is a few KiB). */
const MAX_SIGNAL_BYTES = 64 * 1024;
const TOKEN_RE = /^[A-Za-z0-9]{1,32}$/;
const DISCOVERY_RE = /^[a-z2-7]{32}$/;

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
  /** Signalling sockets one remote address may hold (default MAX_SOCKETS_PER_ADDRESS). */
  maxSocketsPerAddress?: number;
  /** Ids one room (tag) may register (default MAX_IDS_PER_ROOM). */
  maxIdsPerRoom?: number;
}

/** Why a signalling registration is refused, or null to let it through. */
function refusal(req: IncomingMessage, ids: ReadonlySet<string>, reserved: ReadonlySet<string>, perAddress: number, o: Required<Pick<EmbeddedPeerServerOptions, 'maxSocketsPerAddress' | 'maxIdsPerRoom'>>): string | null {
  const q = new URL(req.url ?? '', 'http://x').searchParams;
  const id = q.get('id') ?? '';
  if (id.length > MAX_PEER_ID_LENGTH || tagOfMemberId(id) === null) return 'the id is not a member id';
  if (!TOKEN_RE.test(q.get('token') ?? '')) return 'malformed token';
  if (q.get('key') !== PEER_SERVER_KEY) return 'unknown key';
  const origin = req.headers.origin;
  if (origin !== undefined) {
    let host: string | null = null;
    try {
      host = new URL(origin).host;
    } catch {
      // refused below
    }
    if (host !== req.headers.host) return 'a page of another origin';
  }
  if (perAddress >= o.maxSocketsPerAddress) return 'too many sockets from this address';
  if (!ids.has(id)) {
    const tag = tagOfMemberId(id);
    let inRoom = 0;
    for (const other of [...ids, ...reserved]) if (tagOfMemberId(other) === tag) inRoom++;
    if (inRoom >= o.maxIdsPerRoom) return 'the room is full';
  }
  return null;
}

export function attachPeerServer(server: HttpServer, opts: EmbeddedPeerServerOptions = {}): EmbeddedPeerServer {
  const path = opts.path ?? PEER_SERVER_PATH;
  const limits = { maxSocketsPerAddress: opts.maxSocketsPerAddress ?? MAX_SOCKETS_PER_ADDRESS, maxIdsPerRoom: opts.maxIdsPerRoom ?? MAX_IDS_PER_ROOM };
  let wss: WebSocketServer | null = null;
  const api = ExpressPeerServer(server, {
    path,
    allow_discovery: false,
    alive_timeout: (opts.aliveTimeoutS ?? 60) * 1000,
    corsOptions: { origin: false },
    createWebSocketServer: (o) => (wss = new WebSocketServer({ noServer: true, path: o.path, maxPayload: MAX_SIGNAL_BYTES })),
  });
  // The `peer` package re-emits a client's non-JSON message as an 'error' on this app; unheard, it
  // would throw and stop the whole server. Such a message means nothing: it is dropped.
  api.on('error', () => {});
  // The registered ids, for the room listing and the per-room limit.
  const ids = new Set<string>();
  // Ids let through the upgrade and not yet registered: counted too, so that concurrent upgrades can't overfill a room.
  const reserved = new Set<string>();
  api.on('connection', (c: { getId(): string }) => {
    reserved.delete(c.getId());
    ids.add(c.getId());
  });
  api.on('disconnect', (c: { getId(): string }) => ids.delete(c.getId()));
  const sockets = new Map<string, number>();
  // ExpressPeerServer starts its server when mounted in a parent Express app; a second
  // ExpressPeerServer app (never mounted itself, so it starts nothing) is that parent, which spares
  // a direct dependency on express.
  const root = ExpressPeerServer(server, {});
  root.use(api);
  const socketServer = wss as WebSocketServer | null;
  if (!socketServer) throw new Error('peer: ExpressPeerServer did not create its websocket server on mount');

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!socketServer.shouldHandle(req)) return; // someone else's upgrade (e.g. Vite HMR)
    const address = req.socket.remoteAddress ?? '?';
    const why = refusal(req, ids, reserved, sockets.get(address) ?? 0, limits);
    if (why) {
      socket.end(`HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n${why}\n`);
      return;
    }
    sockets.set(address, (sockets.get(address) ?? 0) + 1);
    const id = new URL(req.url ?? '', 'http://x').searchParams.get('id')!;
    if (!ids.has(id)) reserved.add(id);
    socketServer.handleUpgrade(req, socket, head, (ws) => {
      ws.on('close', () => {
        reserved.delete(id);
        const n = (sockets.get(address) ?? 1) - 1;
        if (n > 0) sockets.set(address, n);
        else sockets.delete(address);
      });
      socketServer.emit('connection', ws, req);
    });
  };
  server.on('upgrade', onUpgrade);

  // An Express app is a plain (req, res, next) handler; its typings only admit Express's own request type.
  const serve = root as unknown as (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  const prefix = `${path}/`;
  const rooms = `${path}/${PEER_SERVER_KEY}/rooms/`;
  return {
    path,
    handle(req, res, next) {
      const url = req.url ?? '';
      if (url.startsWith(rooms) && req.method === 'GET') {
        const discovery = url.slice(rooms.length).split('?')[0];
        if (!DISCOVERY_RE.test(discovery)) return void res.writeHead(400, { 'Content-Type': 'text/plain' }).end('not a discovery key\n');
        const members = [...ids].filter((id) => isMemberId(id, discovery));
        return void res.writeHead(200, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }).end(JSON.stringify(members));
      }
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
