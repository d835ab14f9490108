/**
 * Whom the PeerJS transport (src/peers/peerjs/peerjs.ts) connects to: which listed members it dials, whose
 * offers it takes, and what the end of a link means for the next dial. A member that was admitted
 * and left is not taken back (a returning member joins under a new id); one that refused us or that
 * we refused (passphrase, protocol), or that the PeerServer no longer has, is not dialled again and
 * its offers are refused; one whose connection failed or timed out is dialled again with backoff.
 * Links not yet admitted are capped (AdmissionLimits, src/peers/peerjs/admission.ts).
 */
import type { AdmissionLimits } from './admission';
import type { Link } from './link';
import { isMemberId } from '../room/room';
import type { PeerId } from '../transport/transport';

/** Failed connections to a listed member are retried this many times, after 2, 4, 8... s. */
const MAX_DIAL_ATTEMPTS = 5;

export class DialPolicy {
  /** Peers that were admitted and then left. */
  private readonly departed = new Set<PeerId>();
  /** Ids that refused us or that we refused, or gone: not dialled again, their offers refused. */
  private readonly noRedial = new Set<PeerId>();
  /**
   * Ids whose connection failed or timed out, with when they may be dialled again: a peer that was
   * busy (e.g. compiling GPU pipelines, which blocks its event loop) gets more chances, with backoff.
   */
  private readonly redial = new Map<PeerId, { at: number; attempts: number }>();

  /** `links`: the transport's link table (read only); `discovery`: the room's discovery key, which checks member ids. */
  constructor(
    private readonly links: ReadonlyMap<PeerId, Link>,
    private readonly discovery: string,
    private readonly limits: AdmissionLimits,
  ) {}

  /** Whether listed member `id` is to be dialled now: no link with it, not refused or departed, no backoff pending. */
  shouldDial(id: PeerId): boolean {
    if (this.links.has(id) || this.departed.has(id) || this.noRedial.has(id)) return false;
    return (this.redial.get(id)?.at ?? 0) <= Date.now();
  }

  /** Whether another link not yet admitted, dialled by us (`outgoing`) or offered, may start now (capacity, failed-handshake rate). */
  roomForLink(outgoing: boolean): boolean {
    return this.limits.roomForLink(this.links.values(), outgoing);
  }

  /** The signalling guard's question: may an offer from `src` set up a connection now? */
  acceptOffer(src: string): boolean {
    if (!isMemberId(src, this.discovery) || this.departed.has(src) || this.noRedial.has(src)) return false;
    const existing = this.links.get(src);
    if (existing?.state === 'admitted') return true; // a re-dial of a live link: the transport's incoming() decides
    return existing !== undefined || this.roomForLink(false);
  }

  /** Whether `peer` was admitted once and left. */
  hasLeft(peer: PeerId): boolean {
    return this.departed.has(peer);
  }

  /** Not to be dialled again, its offers refused. */
  refuse(peer: PeerId): void {
    this.noRedial.add(peer);
  }

  /** `peer` was admitted: its failed attempts are forgotten. */
  admitted(peer: PeerId): void {
    this.redial.delete(peer);
  }

  /** A link with `peer` ended: a peer that `left` (it had admitted us) is gone for good; another is dialled again later, unless refused. */
  ended(peer: PeerId, left: boolean): void {
    if (left) this.departed.add(peer);
    else if (!this.noRedial.has(peer)) this.scheduleRedial(peer);
  }

  /** How many listed ids this one gave up on (refused, refusing, or gone from the PeerServer). */
  givenUp(): number {
    return this.noRedial.size;
  }

  /** How many members this one has a link with or will dial again. */
  found(): number {
    return new Set([...this.links.keys(), ...this.redial.keys()]).size;
  }

  private scheduleRedial(peer: PeerId): void {
    const attempts = (this.redial.get(peer)?.attempts ?? 0) + 1;
    if (attempts >= MAX_DIAL_ATTEMPTS) {
      this.redial.delete(peer);
      this.noRedial.add(peer);
    } else {
      this.redial.set(peer, { at: Date.now() + 1000 * 2 ** attempts, attempts });
    }
  }
}
