/**
 * Admission to a PeerJS room (src/peers/peerjs/peerjs.ts): on open, each side sends a hello with a fresh
 * nonce; once it has the other's, it sends its PAKE share (src/peers/room/pake.ts, on the room key: room
 * id + optional passphrase, never sent), then its key confirmation. A side that verifies the other's
 * confirmation sends 'admit' (with its role: nothing about a member leaves before the other side
 * proved the room key); a link is admitted once both sides have admitted each other, and only then
 * does it carry data or count among peers(). A failed proof gets a 'deny', both sides report it
 * (onProblem), and the connection is closed. Failed handshakes are rate-limited, and links not yet
 * admitted are capped.
 *
 * Here: the handler of every control message (the handshake's, and liveness's ping, pong and bye)
 * and those limits; the transport keeps the link table and acts on what the handler asks of it.
 */
import type { ControlMessage, DenyReason, Link } from './link';
import { MAX_AUTH_FAILURES_PER_MINUTE, MAX_UNADMITTED_LINKS, PEERJS_PROTOCOL_VERSION } from './options';
import { PakeSession } from '../room/pake';
import { fromBase64, NONCE_BYTES, toBase64 } from '../room/room';
import type { PeerRole } from '../room/roster';
import type { PeerId } from '../transport/transport';

/** What the control handler needs of the transport (closures over its private state). */
export interface ControlHost {
  /** This member's id, the room key, and the role it tells peers that proved the key. */
  readonly self: PeerId;
  readonly key: Uint8Array;
  readonly role: PeerRole;
  send(link: Link, m: ControlMessage): void;
  /** Counts and reports a bad message; the link stays. */
  reject(link: Link, reason: string): void;
  /** Tells the peer why it is refused, then closes the link. */
  deny(link: Link, reason: DenyReason, detail: string): void;
  /** The peer's proof of the room key did not verify (counted against the handshake rate, reported). */
  authFailed(link: Link, message: string): void;
  /** The peer refused this member. */
  refused(link: Link, reason: DenyReason, message: string): void;
  /** Admits the link if both sides have admitted each other. */
  maybeAdmit(link: Link): void;
  /** The peer said goodbye. */
  bye(link: Link): void;
}

/** Handles one control message from `link` (called one at a time per link: Link.controlChain). */
export async function handleControl(h: ControlHost, link: Link, m: ControlMessage): Promise<void> {
  switch (m.t) {
    case 'hello': {
      if (link.pake !== null) return h.reject(link, 'second hello');
      if (m.v !== PEERJS_PROTOCOL_VERSION) return h.deny(link, 'protocol', `protocol version ${m.v}; this peer speaks ${PEERJS_PROTOCOL_VERSION}`);
      const nonce = fromBase64(m.nonce);
      if (!nonce || nonce.length !== NONCE_BYTES) return h.deny(link, 'protocol', 'malformed challenge');
      link.pake = new PakeSession(h.key, h.self, link.peer, link.nonce, nonce);
      return h.send(link, { t: 'share', y: toBase64(link.pake.share) });
    }
    case 'share': {
      if (!link.pake) return h.deny(link, 'protocol', 'PAKE share before hello');
      if (link.isk) return h.reject(link, 'second share');
      const y = fromBase64(m.y);
      const isk = y && link.pake.sessionKey(y);
      if (!isk) return h.deny(link, 'protocol', 'malformed PAKE share');
      link.isk = isk;
      return h.send(link, { t: 'proof', mac: toBase64(link.pake.confirm(isk)) });
    }
    case 'proof': {
      if (!link.pake || !link.isk) return h.deny(link, 'protocol', 'key confirmation before the PAKE share');
      if (link.proofSeen) return h.reject(link, 'second proof');
      link.proofSeen = true;
      const mac = fromBase64(m.mac);
      if (mac === null || !link.pake.verify(link.isk, mac)) {
        h.authFailed(link, authFailureText(link));
        return h.deny(link, 'passphrase', 'its proof of the room key did not verify');
      }
      link.verified = true;
      // The role goes only to a peer that proved the room key.
      h.send(link, { t: 'admit', role: h.role });
      return h.maybeAdmit(link);
    }
    case 'admit':
      if (!link.verified) return h.deny(link, 'protocol', 'admit before its proof of the room key');
      link.role = m.role;
      link.admittedUs = true;
      return h.maybeAdmit(link);
    case 'deny': {
      const message =
        m.reason === 'passphrase'
          ? `wrong passphrase: peer ${link.peer} refused this peer's proof of the room key`
          : `peer ${link.peer} refused this peer (${m.reason}): ${m.detail}`;
      return h.refused(link, m.reason, message);
    }
    case 'ping':
      return h.send(link, { t: 'pong', n: m.n, ts: m.ts });
    case 'pong': {
      const rtt = performance.now() - m.ts;
      if (rtt >= 0 && rtt < 600_000) link.rtt.sample(rtt);
      return;
    }
    case 'busy':
      // Only an admitted peer's word counts: a stranger must not hold a half-open link.
      if (link.state === 'admitted') link.quietUntil = Date.now() + m.ms;
      return;
    case 'bye':
      return h.bye(link);
  }
}

/**
 * Why a peer's proof failed, in the words a user can act on. (Whether either side has a passphrase
 * is not told before the proof, so it can't be said which side lacks one.)
 */
function authFailureText(link: Link): string {
  return `wrong passphrase: peer ${link.peer} proved a different room key (a different passphrase, or none where the other side has one)`;
}

/** The caps on links not yet admitted: how many at once, and how many failed handshakes a minute. */
export class AdmissionLimits {
  /** When recent handshakes failed (MAX_AUTH_FAILURES_PER_MINUTE). */
  private failures: number[] = [];

  failed(): void {
    this.failures.push(Date.now());
  }

  /**
   * Whether another link not yet admitted may start now beside `links`, in one direction: our dials
   * (`outgoing`) and peers' offers are capped apart, so dials to listed ids that never answer (a link
   * holder can list 8) cannot keep every offer out, nor offers every dial.
   */
  roomForLink(links: Iterable<Link>, outgoing: boolean): boolean {
    const now = Date.now();
    this.failures = this.failures.filter((t) => now - t < 60_000);
    if (this.failures.length >= MAX_AUTH_FAILURES_PER_MINUTE) return false;
    let pending = 0;
    for (const l of links) if (l.state !== 'admitted' && l.outgoing === outgoing) pending++;
    return pending < MAX_UNADMITTED_LINKS;
  }
}
