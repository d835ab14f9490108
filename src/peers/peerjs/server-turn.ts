/**
 * TURN credentials from the PeerServer (src/server/peer-server.ts's TURN route): a member that
 * registered asks GET <path>/peerjs/turn/<discovery key>?id=<its id>&token=<its token>, which proves
 * the link, and gets TURN servers with credentials of its own (short-lived ones with a TURN REST
 * secret, renewed here before they expire). They go into the PeerJS peer's RTCConfiguration, which
 * PeerJS reads for every new connection; links already up keep the relay they have.
 */
import type { Peer } from 'peerjs';
import { type IceConfig, parseIce, rtcConfiguration } from '../transport/ice';
import type { PeerServerAddress } from '../room/room';

/** Renew this long before a credential expires (or at 4/5 of its life when that is shorter). */
const RENEW_BEFORE_S = 600;

function turnUrl(a: PeerServerAddress, discovery: string, id: string, token: string): string {
  return `${a.secure ? 'https' : 'http'}://${a.host}:${a.port}${a.path}${a.key}/turn/${discovery}?id=${encodeURIComponent(id)}&token=${encodeURIComponent(token)}`;
}

/** The server's grant, checked as any ICE setting; null when the server has no TURN (404). */
async function fetchGrant(a: PeerServerAddress, discovery: string, id: string, token: string): Promise<{ ice: IceConfig; expires: number | null } | null> {
  const res = await fetch(turnUrl(a, discovery, id, token), { cache: 'no-store' });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`the PeerServer at ${a.url} refused TURN credentials: HTTP ${res.status}`);
  const g = (await res.json().catch(() => null)) as { iceServers?: unknown; relayOnly?: unknown; expires?: unknown } | null;
  if (!g || !Array.isArray(g.iceServers)) throw new Error(`the PeerServer at ${a.url} sent no TURN servers`);
  const ice = parseIce(JSON.stringify(g.iceServers), g.relayOnly === true);
  return { ice, expires: typeof g.expires === 'number' ? g.expires : null };
}

/**
 * Adds the server's TURN to `peer`'s configuration (beside `base`, the STUN entries) once it is
 * registered as `id`, and keeps it fresh until the peer is destroyed. Throws when the server has
 * TURN but refuses or garbles it; a server without TURN leaves `base` as it is.
 */
export async function useServerTurn(peer: Peer, server: PeerServerAddress, discovery: string, id: string, base: IceConfig | undefined): Promise<void> {
  const token = peer.options.token ?? '';
  let timer: ReturnType<typeof setTimeout> | null = null;
  const apply = async (): Promise<void> => {
    const g = await fetchGrant(server, discovery, id, token);
    if (!g) return;
    peer.options.config = rtcConfiguration({ servers: [...(base?.servers ?? []), ...g.ice.servers], relayOnly: (base?.relayOnly ?? false) || g.ice.relayOnly });
    if (g.expires === null || peer.destroyed) return;
    const life = g.expires - Date.now() / 1000;
    const renewIn = Math.max(30, Math.min(life - RENEW_BEFORE_S, life * 0.8));
    timer = setTimeout(renew, renewIn * 1000);
  };
  // A failed renewal leaves the old credential; the next try is a minute later.
  const renew = () => void apply().catch(() => !peer.destroyed && (timer = setTimeout(renew, 60_000)));
  peer.on('close', () => timer !== null && clearTimeout(timer));
  await apply();
}
