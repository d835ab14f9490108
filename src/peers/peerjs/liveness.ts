/**
 * The transport's liveness rule (peerjs.ts runs it every heartbeatMs) and what its Peer-level errors mean: ping each admitted peer, drop
 * one silent for peerTimeoutMs (unless it announced it is busy), time out a handshake. A tick that
 * comes late means this thread was blocked: the peers' messages are still queued behind it, so their
 * silence is ours and is counted from now instead.
 */
import type { Link } from './link';
import type { PeerJsTunables } from './options';

export type LivenessAction =
  | { link: Link; act: 'ping' }
  | { link: Link; act: 'silent'; message: string }
  | { link: Link; act: 'handshake-timeout'; message: string };

export class Liveness {
  private lastTick = Date.now();

  constructor(private readonly t: Pick<PeerJsTunables, 'heartbeatMs' | 'peerTimeoutMs' | 'handshakeTimeoutMs'>) {}

  tick(links: readonly Link[], now = Date.now()): LivenessAction[] {
    const { heartbeatMs, peerTimeoutMs, handshakeTimeoutMs } = this.t;
    const late = now - this.lastTick > Math.max(4 * heartbeatMs, peerTimeoutMs / 2);
    this.lastTick = now;
    const out: LivenessAction[] = [];
    for (const link of links) {
      if (late && link.lastSeen !== null) link.lastSeen = now;
      if (link.state === 'admitted') {
        const silent = now - (link.lastSeen ?? now);
        if (silent > peerTimeoutMs && now > link.quietUntil) out.push({ link, act: 'silent', message: `peer ${link.peer} silent for ${(silent / 1000).toFixed(1)} s: dropped` });
        else out.push({ link, act: 'ping' });
      } else if (now - link.createdAt > handshakeTimeoutMs) {
        out.push({ link, act: 'handshake-timeout', message: `no ${link.state === 'connecting' ? 'connection' : 'admission'} with ${link.peer} within ${handshakeTimeoutMs / 1000} s` });
      }
    }
    return out;
  }
}

/**
 * What a PeerJS Peer-level error means: 'peer-unavailable' names a listed member that is gone (the
 * server expires ids a little later); 'webrtc' is reported through the failing link itself (and a
 * duplicate dial closed mid-negotiation raises it harmlessly); anything else is the server's.
 */
export function peerErrorMeaning(type: string, message: string): { kind: 'gone'; peer: string } | { kind: 'ignore' } | { kind: 'server' } {
  if (type === 'peer-unavailable') {
    const id = /Could not connect to peer (\S+)/.exec(message)?.[1];
    return id ? { kind: 'gone', peer: id } : { kind: 'ignore' };
  }
  return type === 'webrtc' ? { kind: 'ignore' } : { kind: 'server' };
}
