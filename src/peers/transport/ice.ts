/**
 * ICE servers (STUN, TURN with credentials) for peers on different networks, written as one line so
 * that a URL parameter, a panel field, `npm start --ice` and `npm run peer --ice` all take the same:
 *
 *   stun:stun.example.org:3478,USER:SECRET@turn:turn.example.org:3478?transport=udp
 *
 * Credentials go before the URL (percent-encoded where they hold ':' '@' ','). Or a JSON array of
 * RTCIceServer objects. Default none: nothing outside is contacted unless asked.
 */
import { z } from 'zod';

/** What the transport needs: the servers, and whether to use relayed candidates only. */
export interface IceConfig {
  servers: RTCIceServer[];
  /** iceTransportPolicy 'relay': every link goes through a TURN server (hides addresses; tests the relay). */
  relayOnly: boolean;
}

const MAX_SERVERS = 8;
const MAX_URL = 512;
const URL_RE = /^(stuns?|turns?):[^\s,@]+$/;

const UrlSchema = z.string().max(MAX_URL).regex(URL_RE, 'expected a stun:, stuns:, turn: or turns: URL');
const ServerSchema = z.object({
  urls: z.union([UrlSchema, z.array(UrlSchema).min(1).max(4)]),
  username: z.string().max(256).optional(),
  credential: z.string().max(256).optional(),
}).strict();
const ServersSchema = z.array(ServerSchema).max(MAX_SERVERS);

const isTurn = (url: string) => /^turns?:/.test(url);

function check(servers: RTCIceServer[], relayOnly: boolean): IceConfig {
  for (const s of servers) {
    const urls = Array.isArray(s.urls) ? s.urls : [s.urls];
    if (urls.some(isTurn) && (s.username === undefined || s.credential === undefined)) {
      throw new Error(`ICE server ${urls.join(' ')}: a TURN server needs a user name and a credential (USER:SECRET@turn:host:port)`);
    }
  }
  if (relayOnly && !servers.some((s) => (Array.isArray(s.urls) ? s.urls : [s.urls]).some(isTurn))) {
    throw new Error('relay-only ICE needs a TURN server: with none, no link could ever connect');
  }
  return { servers, relayOnly };
}

function decode(part: string, what: string, entry: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new Error(`ICE server '${entry}': the ${what} is not valid percent-encoding`);
  }
}

/** Parses an ICE spec (the comma list above or a JSON array); '' is none. Throws with the entry at fault. */
export function parseIce(spec: string, relayOnly = false): IceConfig {
  const text = spec.trim();
  if (text === '') return check([], relayOnly);
  if (text.length > MAX_SERVERS * (MAX_URL + 600)) throw new Error('ICE servers: the list is too long');
  if (text.startsWith('[')) {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (e) {
      throw new Error(`ICE servers: not valid JSON (${(e as Error).message})`);
    }
    const r = ServersSchema.safeParse(raw);
    if (!r.success) {
      const i = r.error.issues[0];
      throw new Error(`ICE servers: ${i.path.length ? `at ${i.path.join('.')}: ` : ''}${i.message}`);
    }
    return check(r.data, relayOnly);
  }
  const entries = text.split(',').map((e) => e.trim()).filter((e) => e !== '');
  if (entries.length > MAX_SERVERS) throw new Error(`ICE servers: at most ${MAX_SERVERS}, got ${entries.length}`);
  const servers = entries.map((entry): RTCIceServer => {
    const at = entry.lastIndexOf('@');
    const url = at < 0 ? entry : entry.slice(at + 1);
    if (url.length > MAX_URL || !URL_RE.test(url)) {
      throw new Error(`ICE server '${entry}': expected [USER:SECRET@]stun:|turn:|turns:HOST[:PORT][?transport=udp|tcp]`);
    }
    if (at < 0) return { urls: url };
    const cred = entry.slice(0, at);
    const colon = cred.indexOf(':');
    if (colon < 1) throw new Error(`ICE server '${entry}': credentials are USER:SECRET before the '@'`);
    return { urls: url, username: decode(cred.slice(0, colon), 'user name', url), credential: decode(cred.slice(colon + 1), 'secret', url) };
  });
  return check(servers, relayOnly);
}

/** The transport's RTCConfiguration for a config (none: host candidates only). */
export function rtcConfiguration(ice: IceConfig | undefined): RTCConfiguration {
  return { iceServers: ice?.servers ?? [], ...(ice?.relayOnly ? { iceTransportPolicy: 'relay' as const } : {}) };
}

/** The servers' URLs without credentials, for logs and the panel. */
export function describeIce(ice: IceConfig | undefined): string {
  if (!ice || ice.servers.length === 0) return 'none (host candidates only)';
  const urls = ice.servers.flatMap((s) => (Array.isArray(s.urls) ? s.urls : [s.urls]));
  return `${urls.join(', ')}${ice.relayOnly ? ' (relay only)' : ''}`;
}
