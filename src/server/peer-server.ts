/**
 * The PeerJS signalling server (the `peer` package) on an existing Node http server, at
 * PEER_SERVER_PATH on the page's own origin: the Vite dev and preview servers (vite.config.ts) and
 * `npm start` (src/server/serve.ts) all use this, so a LAN group needs nothing outside.
 *
 * Hardened against whoever can reach it: the global peer listing is off; members find their room
 * through GET <path>/peerjs/rooms/<discovery key>, which lists only ids of that room with a valid
 * mark (src/peers/room/room.ts), so the listing proves the link and enumerates nobody to a stranger.
 * Registrations are refused (before the websocket opens) for ids that are not member ids, bad
 * tokens or keys, a foreign page's Origin, or more ids than the per-room limit; once a room has been
 * listed the server knows its discovery key, and refuses (and closes) ids of its tag whose mark does
 * not check out. Limits per address, per (address, room), in all, on what a socket sends and on
 * what the server buffers for it: src/server/socket-limits.ts. Signalling messages are capped in
 * size; no CORS headers are sent, so only the page's own origin reads the API.
 *
 * TURN credentials (src/server/lab-config.ts) are handed out only at
 * GET <path>/peerjs/turn/<discovery key>?id=<member id>&token=<its token>: the id must be registered
 * by that token on this server and be a member id of that room, which proves the link.
 *
 * The websocket server is created `noServer` and fed only upgrades for its own path, because a `ws`
 * server bound to the http server answers every other upgrade with 400 — Vite's HMR socket included.
 */
import type { IncomingMessage, Server as HttpServer, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import { ExpressPeerServer } from 'peer';
import { WebSocketServer } from 'ws';
import { isMemberId, MAX_PEER_ID_LENGTH, PEER_SERVER_KEY, PEER_SERVER_PATH, tagOfDiscoveryKey, tagOfMemberId } from '../peers/room/room';
import type { TurnGrant } from './lab-config';
import { DEFAULT_SOCKET_LIMITS, type SocketEntry, type SocketLimits, type SocketStats, SocketTable } from './socket-limits';

/** Defaults of the per-address and per-room registration limits. */
export const MAX_SOCKETS_PER_ADDRESS = DEFAULT_SOCKET_LIMITS.maxSocketsPerAddress;
export const MAX_IDS_PER_ROOM = DEFAULT_SOCKET_LIMITS.maxIdsPerRoom;
/** Largest signalling message (an SDP offer is a few KiB). */
const MAX_SIGNAL_BYTES = 64 * 1024;
const TOKEN_RE = /^[A-Za-z0-9]{1,32}$/;
const DISCOVERY_RE = /^[a-z2-7]{32}$/;

export interface EmbeddedPeerServer {
  /** Mount path (PEER_SERVER_PATH unless overridden). */
  readonly path: string;
  /** Connect/Express-style middleware: answers requests under `path`, passes the rest to `next`. */
  handle(req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void): void;
  /** The server's own accounting of its sockets (unsent bytes now, sockets cut off). */
  stats(): SocketStats;
  /**
   * Closes the signalling websockets and stops taking upgrades. (The `peer` package keeps two
   * housekeeping timers for the life of the process; it has no way to stop them.)
   */
  close(): void;
}

export interface EmbeddedPeerServerOptions extends Partial<SocketLimits> {
  path?: string;
  /** Seconds without a heartbeat before the server forgets a peer (PeerJS clients beat every 5 s). Default 60. */
  aliveTimeoutS?: number;
  /**
   * Refuse and close ids under a listed room's tag whose mark does not check out (default true;
   * false lets such Sybils through, for tests of the members' own defences).
   */
  checkMarks?: boolean;
  /** TURN credentials for a proven member id (lab-config.ts turnIssuer), or none: the route answers 404. */
  turn?: ((id: string) => TurnGrant) | null;
}

/** Why a signalling registration is refused before the limits are asked, or null. */
function refusal(req: IncomingMessage, id: string): string | null {
  const q = new URL(req.url ?? '', 'http://x').searchParams;
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
  return null;
}

const json = (res: ServerResponse, status: number, body: unknown) =>
  void res.writeHead(status, { 'Content-Type': 'application/json', 'Cache-Control': 'no-store' }).end(JSON.stringify(body));

export function attachPeerServer(server: HttpServer, opts: EmbeddedPeerServerOptions = {}): EmbeddedPeerServer {
  const path = opts.path ?? PEER_SERVER_PATH;
  const limits: SocketLimits = { ...DEFAULT_SOCKET_LIMITS };
  for (const k of Object.keys(DEFAULT_SOCKET_LIMITS) as (keyof SocketLimits)[]) if (opts[k] !== undefined) limits[k] = opts[k];
  const table = new SocketTable(limits);
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
  // The registered ids and their tokens, for the room listing, the per-room limit and the TURN route.
  const tokens = new Map<string, string>();
  api.on('connection', (c: { getId(): string; getToken(): string }) => tokens.set(c.getId(), c.getToken()));
  api.on('disconnect', (c: { getId(): string }) => tokens.delete(c.getId()));
  // Discovery keys of rooms that were listed (by tag, while the room has sockets): a room's ids must then carry a valid mark.
  const known = new Map<string, string>();
  const learn = (discovery: string) => {
    if (opts.checkMarks === false) return;
    const tag = tagOfDiscoveryKey(discovery);
    const inRoom = table.inRoom(tag);
    if (inRoom.size === 0 || known.has(tag)) return;
    known.set(tag, discovery);
    for (const e of [...inRoom]) {
      if (isMemberId(e.id, discovery)) continue;
      table.remove(e);
      e.ws?.terminate();
    }
  };
  // ExpressPeerServer starts its server when mounted in a parent Express app; a second
  // ExpressPeerServer app (never mounted itself, so it starts nothing) is that parent, which spares
  // a direct dependency on express.
  const root = ExpressPeerServer(server, {});
  root.use(api);
  const socketServer = wss as WebSocketServer | null;
  if (!socketServer) throw new Error('peer: ExpressPeerServer did not create its websocket server on mount');

  const admit = (req: IncomingMessage, id: string, address: string): string | SocketEntry => {
    const why = refusal(req, id);
    if (why) return why;
    const tag = tagOfMemberId(id)!;
    const discovery = known.get(tag);
    if (discovery !== undefined && !isMemberId(id, discovery)) return 'the id is not a member id of its room';
    if (!tokens.has(id)) {
      let inRoom = 0;
      for (const e of table.inRoom(tag)) if (e.id !== id) inRoom++;
      if (inRoom >= limits.maxIdsPerRoom) return 'the room is full';
    }
    const r = table.admit(address, tag);
    if ('why' in r) return r.why;
    for (const e of r.evict) e.ws?.terminate();
    return table.add(id, tag, address);
  };

  const onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (!socketServer.shouldHandle(req)) return; // someone else's upgrade (e.g. Vite HMR)
    const id = new URL(req.url ?? '', 'http://x').searchParams.get('id') ?? '';
    const entry = admit(req, id, req.socket.remoteAddress ?? '?');
    if (typeof entry === 'string') {
      socket.end(`HTTP/1.1 403 Forbidden\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\n${entry}\n`);
      return;
    }
    socketServer.handleUpgrade(req, socket, head, (ws) => {
      ws.on('close', () => {
        table.remove(entry);
        if (table.inRoom(entry.tag).size === 0) known.delete(entry.tag);
      });
      // Closed for an older room while the upgrade completed.
      if (!table.inRoom(entry.tag).has(entry)) return void ws.terminate();
      table.guard(entry, ws, (dst) => tokens.has(dst));
      socketServer.emit('connection', ws, req);
    });
  };
  server.on('upgrade', onUpgrade);

  // An Express app is a plain (req, res, next) handler; its typings only admit Express's own request type.
  const serve = root as unknown as (req: IncomingMessage, res: ServerResponse, next: (err?: unknown) => void) => void;
  const prefix = `${path}/`;
  const rooms = `${path}/${PEER_SERVER_KEY}/rooms/`;
  const turnRoute = `${path}/${PEER_SERVER_KEY}/turn/`;
  return {
    path,
    handle(req, res, next) {
      const url = req.url ?? '';
      if (url.startsWith(rooms) && req.method === 'GET') {
        const discovery = url.slice(rooms.length).split('?')[0];
        if (!DISCOVERY_RE.test(discovery)) return void res.writeHead(400, { 'Content-Type': 'text/plain' }).end('not a discovery key\n');
        learn(discovery);
        return json(res, 200, [...tokens.keys()].filter((id) => isMemberId(id, discovery)));
      }
      if (url.startsWith(turnRoute) && req.method === 'GET') {
        if (!opts.turn) return void res.writeHead(404, { 'Content-Type': 'text/plain' }).end('this server hands out no TURN credentials\n');
        const u = new URL(url, 'http://x');
        const discovery = u.pathname.slice(turnRoute.length);
        const id = u.searchParams.get('id') ?? '';
        const token = u.searchParams.get('token') ?? '';
        // One answer for every failed proof, so that it tells a stranger nothing about ids or rooms.
        if (!DISCOVERY_RE.test(discovery) || !isMemberId(id, discovery) || tokens.get(id) !== token || !TOKEN_RE.test(token)) {
          return void res.writeHead(403, { 'Content-Type': 'text/plain' }).end('a registered member id of the room and its token are needed\n');
        }
        learn(discovery);
        return json(res, 200, opts.turn(id));
      }
      if (url === path || url.startsWith(prefix) || url.startsWith(`${path}?`)) serve(req, res, next);
      else next();
    },
    stats() {
      table.bufferedBytes();
      return { ...table.stats };
    },
    close() {
      server.off('upgrade', onUpgrade);
      for (const c of socketServer.clients) c.terminate();
      socketServer.close();
    },
  };
}
