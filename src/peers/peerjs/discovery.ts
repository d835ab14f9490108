/**
 * Finding a room on the PeerServer (src/peers/peerjs/peerjs.ts): registering this member's id, and reading
 * the room's listing (GET <path>/peerjs/rooms/<discovery key>). The transport dials what it returns.
 */
import type { Peer } from 'peerjs';
import { z } from 'zod';
import { rtcConfiguration } from '../transport/ice';
import type { PeerJsTransportOptions } from './options';
import { isMemberId, type PeerServerAddress, peerListUrl } from '../room/room';
import type { PeerId } from '../transport/transport';

/** A PeerJS peer for member `id` on the options' server (not yet registered). */
export function newPeer(PeerClass: typeof Peer, id: PeerId, opts: PeerJsTransportOptions): Peer {
  const s = opts.server;
  return new PeerClass(id, {
    host: s.host,
    port: s.port,
    path: s.path,
    secure: s.secure,
    key: s.key,
    config: rtcConfiguration(opts.ice),
    debug: opts.debug ?? 0,
  });
}

/** Resolves once the PeerServer accepted `peer`'s id; rejects on its error or after waitMs. */
export function registered(peer: Peer, s: PeerServerAddress, waitMs: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const settle = (e: Error | null) => {
      clearTimeout(timer);
      peer.off('open', opened);
      peer.off('error', failed);
      if (e) reject(e);
      else resolve();
    };
    const opened = () => settle(null);
    const failed = (e: Error) => settle(new Error(`could not register with the PeerServer at ${s.url}: ${e.message}`));
    const timer = setTimeout(() => settle(new Error(`no answer from the PeerServer at ${s.url} within ${waitMs / 1000} s`)), waitMs);
    peer.on('open', opened);
    peer.on('error', failed);
  });
}

/** The member ids of the room (discovery key) that the server lists, `self` left out. */
export async function listedMembers(server: PeerServerAddress, discovery: string, self: PeerId): Promise<PeerId[]> {
  const url = peerListUrl(server, discovery);
  let res: Response;
  try {
    res = await fetch(url);
  } catch (e) {
    throw new Error(`could not read the peer listing at ${url}: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (res.status === 404) throw new Error(`the PeerServer at ${server.url} has no room listing (it must be this lab's embedded server, or one with its /rooms/ route)`);
  if (!res.ok) throw new Error(`the peer listing at ${url} answered HTTP ${res.status}`);
  const ids = z.array(z.unknown()).max(10_000).safeParse(await res.json().catch(() => null));
  if (!ids.success) throw new Error(`the peer listing at ${url} is not a list`);
  // Entries that are not member ids of this room are skipped one by one: one bad id blocks nobody.
  return ids.data.filter((id): id is PeerId => typeof id === 'string' && id !== self && isMemberId(id, discovery));
}
