/**
 * Admission without anything to guess offline: a balanced PAKE in the manner of CPace
 * (draft-irtf-cfrg-cpace) on ristretto255 from @noble/curves. Both sides hash the room key
 * (PBKDF2 of room id and passphrase), both ids and both challenge nonces to a generator G, send
 * Y = y·G for a fresh secret y, and derive the session key from y·Y_other. The key confirmation
 * each side then sends is an HMAC under that session key: an attacker who sent its own share
 * under a guessed generator learns whether that one guess was right, and nothing it can test
 * further guesses against, so every guess costs a live attempt (which members rate-limit).
 */
import { ristretto255, ristretto255_hasher } from '@noble/curves/ed25519.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha512 } from '@noble/hashes/sha2.js';

const Point = ristretto255.Point;
/** Bytes of an encoded share (a ristretto255 point) and of a key confirmation (HMAC-SHA512). */
export const SHARE_BYTES = 32;
export const CONFIRM_BYTES = 64;

const encoder = new TextEncoder();

function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let o = 0;
  for (const p of parts) {
    out.set(p, o);
    o += p.length;
  }
  return out;
}

/** Length-prefixed, so that no two different tuples of fields encode alike. */
function fields(...parts: (Uint8Array | string)[]): Uint8Array {
  const bytes = parts.map((p) => (typeof p === 'string' ? encoder.encode(p) : p));
  return concat(...bytes.flatMap((b) => [Uint8Array.of(b.length >>> 8, b.length & 255), b]));
}

/** One side's state in one handshake with one peer. */
export class PakeSession {
  private readonly secret: bigint;
  /** This side's share, sent to the peer. */
  readonly share: Uint8Array;
  private readonly sid: Uint8Array;

  /**
   * `prs` is the room key's bytes; ids and nonces are both sides' (order does not matter: they are
   * sorted by id so that both sides hash the same transcript).
   */
  constructor(
    prs: Uint8Array,
    private readonly self: string,
    private readonly peer: string,
    selfNonce: Uint8Array,
    peerNonce: Uint8Array,
  ) {
    const [lo, hi] = self < peer ? [[self, selfNonce], [peer, peerNonce]] as const : [[peer, peerNonce], [self, selfNonce]] as const;
    this.sid = sha512(fields('wgpg-cpace-sid-v1', lo[0], hi[0], lo[1], hi[1]));
    const g = ristretto255_hasher.hashToCurve(fields(prs, this.sid), { DST: 'wgpg-cpace-generator-v1' });
    this.secret = ristretto255_hasher.hashToScalar(crypto.getRandomValues(new Uint8Array(64)));
    this.share = g.multiply(this.secret).toBytes();
  }

  /**
   * The session key from the peer's share, or null for a share that is not a valid point or is the
   * identity (which would make the key independent of the room key).
   */
  sessionKey(peerShare: Uint8Array): Uint8Array | null {
    if (peerShare.length !== SHARE_BYTES) return null;
    let y;
    try {
      y = Point.fromBytes(peerShare);
    } catch {
      return null;
    }
    if (y.is0()) return null;
    const k = y.multiply(this.secret);
    if (k.is0()) return null;
    const [a, b] = this.self < this.peer ? [this.share, peerShare] : [peerShare, this.share];
    return sha512(fields('wgpg-cpace-isk-v1', this.sid, k.toBytes(), a, b));
  }

  /** This side's key confirmation (sent once the peer's share is in). */
  confirm(isk: Uint8Array): Uint8Array {
    return hmac(sha512, isk, fields('wgpg-cpace-confirm-v1', this.self, this.peer));
  }

  /** Checks the peer's key confirmation (constant time). */
  verify(isk: Uint8Array, mac: Uint8Array): boolean {
    if (mac.length !== CONFIRM_BYTES) return false;
    const want = hmac(sha512, isk, fields('wgpg-cpace-confirm-v1', this.peer, this.self));
    let diff = 0;
    for (let i = 0; i < want.length; i++) diff |= want[i] ^ mac[i];
    return diff === 0;
  }
}
