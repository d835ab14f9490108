/**
 * GET /lab-config.json: what the server tells its pages before they join a group — the ICE servers
 * (`npm start -- --ice SPEC`, or LAB_ICE / LAB_ICE_RELAY_ONLY for the Vite servers). Checked when the
 * server starts, so a typo fails there and not in every page.
 *
 * TURN credentials are never in it: it is read by anyone who reaches the server. It serves the STUN
 * entries only, and `turn: true` when the server has TURN; a member asks the PeerServer for TURN
 * credentials once it registered (GET <path>/peerjs/turn/<discovery key>, src/server/peer-server.ts:
 * the request proves the link). What it gets (turnIssuer):
 * - with a TURN REST secret (`--turn URL --turn-secret SECRET`; LAB_TURN, LAB_TURN_SECRET): the
 *   coturn `use-auth-secret` scheme — username `<expiry unix s>:<member id>`, credential
 *   base64(HMAC-SHA1(secret, username)) — valid for --turn-ttl seconds (default 12 h), for that
 *   member; the secret never leaves the server;
 * - static `USER:SECRET@turn:` entries of --ice (long-term credentials): those, to proven link holders only.
 */
import { createHmac } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { parseIce } from '../peers/transport/ice';

export const LAB_CONFIG_PATH = '/lab-config.json';
/** Default lifetime of a TURN REST credential. */
export const TURN_TTL_S = 12 * 3600;

export interface LabServerConfig {
  /** An ICE spec (src/peers/transport/ice.ts), '' for none. */
  ice: string;
  relayOnly: boolean;
  /** TURN server URLs (comma-separated turn:/turns:) whose credentials are derived from turnSecret. */
  turn?: string;
  /** The TURN server's shared secret (coturn static-auth-secret). */
  turnSecret?: string;
  /** Lifetime of a derived credential in seconds (default TURN_TTL_S). */
  turnTtlS?: number;
}

/** What GET /lab-config.json answers. */
export interface PublicLabConfig {
  /** The STUN entries of the ICE setting (no credentials). */
  ice: string;
  /** Relay-only; only ever true together with `turn`, since the page's TURN comes from the PeerServer. */
  relayOnly: boolean;
  /** Present when the server has TURN: members ask the PeerServer for credentials after registering. */
  turn?: true;
}

/** TURN servers with credentials for one member, and until when they are valid. */
export interface TurnGrant {
  iceServers: RTCIceServer[];
  relayOnly: boolean;
  /** Unix seconds; null for static credentials. */
  expires: number | null;
}

const isTurnUrl = (u: string) => /^turns?:/.test(u);
const urlsOf = (s: RTCIceServer) => (Array.isArray(s.urls) ? s.urls : [s.urls]);

/** The config from the environment of a Vite server (LAB_ICE, LAB_ICE_RELAY_ONLY=1, LAB_TURN, LAB_TURN_SECRET, LAB_TURN_TTL). */
export function labConfigFromEnv(env: NodeJS.ProcessEnv = process.env): LabServerConfig {
  return checkLabConfig({
    ice: env.LAB_ICE ?? '',
    relayOnly: env.LAB_ICE_RELAY_ONLY === '1',
    ...(env.LAB_TURN ? { turn: env.LAB_TURN } : {}),
    ...(env.LAB_TURN_SECRET ? { turnSecret: env.LAB_TURN_SECRET } : {}),
    ...(env.LAB_TURN_TTL ? { turnTtlS: Number(env.LAB_TURN_TTL) } : {}),
  });
}

/** The TURN URLs of c.turn, checked. */
function restTurnUrls(c: LabServerConfig): string[] {
  const urls = (c.turn ?? '').split(',').map((u) => u.trim()).filter((u) => u !== '');
  for (const u of urls) {
    if (!isTurnUrl(u)) throw new Error(`--turn: '${u}' is not a turn: or turns: URL`);
    parseIce(`x:y@${u}`); // the URL's own syntax
  }
  if (urls.length > 4) throw new Error('--turn: at most 4 URLs (one TURN server\'s transports)');
  return urls;
}

export function checkLabConfig(c: LabServerConfig): LabServerConfig {
  const rest = restTurnUrls(c);
  if (rest.length > 0 && !c.turnSecret) throw new Error('--turn needs --turn-secret (the TURN server\'s static-auth-secret)');
  if (c.turnSecret && rest.length === 0) throw new Error('--turn-secret needs --turn URL (the TURN server it is the secret of)');
  if (c.turnTtlS !== undefined && !(Number.isSafeInteger(c.turnTtlS) && c.turnTtlS >= 60)) throw new Error(`the TURN credential lifetime must be whole seconds, at least 60, not ${c.turnTtlS}`);
  const ice = parseIce(c.ice, c.relayOnly && rest.length === 0);
  if (rest.length > 0 && ice.servers.length + 1 > 8) throw new Error('ICE servers: at most 7 besides --turn');
  return c;
}

/** What the page may read without proving anything: the ICE setting less every TURN entry. */
export function publicLabConfig(c: LabServerConfig): PublicLabConfig {
  const ice = parseIce(c.ice);
  const stun = ice.servers.filter((s) => !urlsOf(s).some(isTurnUrl));
  const turn = restTurnUrls(c).length > 0 || stun.length < ice.servers.length;
  const spec = stun.flatMap(urlsOf).join(',');
  return turn ? { ice: spec, relayOnly: false, turn: true } : { ice: spec, relayOnly: c.relayOnly };
}

/** The TURN REST credential (coturn use-auth-secret) for `id` until `expires` (unix seconds). */
export function turnRestCredential(secret: string, id: string, expires: number): { username: string; credential: string } {
  const username = `${expires}:${id}`;
  return { username, credential: createHmac('sha1', secret).update(username).digest('base64') };
}

/** Hands TURN credentials to a proven member (the PeerServer's TURN route), or null: this config has no TURN. */
export function turnIssuer(c: LabServerConfig, now: () => number = Date.now): ((id: string) => TurnGrant) | null {
  const staticTurn = parseIce(c.ice).servers.filter((s) => urlsOf(s).some(isTurnUrl));
  const rest = restTurnUrls(c);
  if (staticTurn.length === 0 && rest.length === 0) return null;
  const ttl = c.turnTtlS ?? TURN_TTL_S;
  return (id) => {
    if (rest.length === 0) return { iceServers: staticTurn, relayOnly: c.relayOnly, expires: null };
    const expires = Math.floor(now() / 1000) + ttl;
    return { iceServers: [...staticTurn, { urls: rest, ...turnRestCredential(c.turnSecret!, id, expires) }], relayOnly: c.relayOnly, expires };
  };
}

/** A request handler that answers LAB_CONFIG_PATH and passes everything else on. */
export function labConfigHandler(c: LabServerConfig) {
  const body = JSON.stringify(publicLabConfig(c));
  return (req: IncomingMessage, res: ServerResponse, next: () => void): void => {
    const url = (req.url ?? '').split('?')[0];
    if (url !== LAB_CONFIG_PATH || (req.method !== 'GET' && req.method !== 'HEAD')) return next();
    res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' });
    res.end(req.method === 'HEAD' ? undefined : body);
  };
}
