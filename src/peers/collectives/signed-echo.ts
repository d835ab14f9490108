/**
 * The signed parts of the verified all-reduce (verified-reduce.ts), as bytes on the wire and as the
 * decision they lead to. A member signs "this is my contribution to this exchange" once:
 *   signed message = "wgpg-contrib-v1\0" ‖ runId u32 ‖ step u32 ‖ tag u32 ‖ SHA-256(members, '\n'-joined) ‖ digest
 * (u32 little-endian; tag: the exchange's first collective tag, the same on every member; digest:
 * SHA-256 of the SHA-256s of its buckets' wire bytes). It sends its header (public key 32 B ‖
 * signature 64 B) with its buckets; in the echo every member relays, per rank, the slot it holds
 * (public key ‖ digest ‖ signature; 128 zero bytes: it holds none). That is Dolev–Strong with one
 * relay round: with at most one faulty member, every honest member ends with the same set of
 * validly signed digests per sender, so they agree on which contributions are summed, and a lie
 * in an echo (a signature that does not verify) changes nothing.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { DIGEST_BYTES, ECHO_SLOT_BYTES, SIGNED_HEADER_BYTES } from '../../engine/scheme/wire';
import { sameBytes } from './digest';
import { type Identity, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, verifySignature } from '../room/identity';
import type { PeerId } from '../transport/transport';

/** public key ‖ signature; public key ‖ digest ‖ signature (the wire formulas count them: wire.ts). */
export const HEADER_BYTES = SIGNED_HEADER_BYTES;
export const SLOT_BYTES = ECHO_SLOT_BYTES;
if (HEADER_BYTES !== PUBLIC_KEY_BYTES + SIGNATURE_BYTES || SLOT_BYTES !== PUBLIC_KEY_BYTES + DIGEST_BYTES + SIGNATURE_BYTES) throw new Error('signed-echo: sizes disagree with wire.ts');

export interface Slot {
  publicKey: Uint8Array;
  digest: Uint8Array;
  signature: Uint8Array;
}

const PREFIX = new TextEncoder().encode('wgpg-contrib-v1\0');

/** What every member's signature in one exchange is over, but the digest. */
export function exchangeContext(runId: number, step: number, tag: number, members: readonly PeerId[]): Uint8Array {
  const out = new Uint8Array(PREFIX.length + 12 + 32);
  out.set(PREFIX);
  const dv = new DataView(out.buffer);
  [runId, step, tag].forEach((v, i) => dv.setUint32(PREFIX.length + 4 * i, v >>> 0, true));
  out.set(sha256(new TextEncoder().encode(members.join('\n'))), PREFIX.length + 12);
  return out;
}

export function signedMessage(context: Uint8Array, digest: Uint8Array): Uint8Array {
  const m = new Uint8Array(context.length + digest.length);
  m.set(context);
  m.set(digest, context.length);
  return m;
}

/** Whether `slot` is member `peer`'s own signature over `digest` in this exchange. */
export function slotVerifies(id: Identity, peer: PeerId, context: Uint8Array, slot: Slot): boolean {
  return id.binds(peer, slot.publicKey) && verifySignature(slot.signature, signedMessage(context, slot.digest), slot.publicKey);
}

export function encodeRow(slots: readonly (Slot | null)[]): Uint8Array {
  const row = new Uint8Array(slots.length * SLOT_BYTES);
  slots.forEach((s, r) => {
    if (!s) return;
    row.set(s.publicKey, r * SLOT_BYTES);
    row.set(s.digest, r * SLOT_BYTES + PUBLIC_KEY_BYTES);
    row.set(s.signature, r * SLOT_BYTES + PUBLIC_KEY_BYTES + DIGEST_BYTES);
  });
  return row;
}

/** An echo row as received: its slots (null: the sender holds none), or null when malformed. */
export function decodeRow(row: Uint8Array, n: number): (Slot | null)[] | null {
  if (row.length !== n * SLOT_BYTES) return null;
  return Array.from({ length: n }, (_, r) => {
    const b = row.subarray(r * SLOT_BYTES, (r + 1) * SLOT_BYTES);
    if (b.every((x) => x === 0)) return null;
    return { publicKey: b.subarray(0, PUBLIC_KEY_BYTES), digest: b.subarray(PUBLIC_KEY_BYTES, PUBLIC_KEY_BYTES + DIGEST_BYTES), signature: b.subarray(PUBLIC_KEY_BYTES + DIGEST_BYTES) };
  });
}

export interface Decision {
  /** Per rank: the one digest every honest member holds signed (null: none, or the sender signed two). */
  agreed: (Uint8Array | null)[];
  /** Ranks left out and removed, with why (the same on every honest member): two signed digests. */
  faults: [number, string][];
  /** Ranks of which no member holds a signed digest (no commitment in time): left out, not proof. */
  absent: number[];
  /** What this member saw go wrong but cannot prove to the others: named, not removed. */
  notices: [number, string][];
}

/**
 * The decision of one member from its own view (the slot it verified per sender, null where it has
 * none), the echo rows it received (null: not received or malformed) and, with commit-then-reveal,
 * the commitments it holds and the commitment rows it received. A sender's own slot in its rows is
 * no relay, so it cannot add a second digest of its own.
 */
export function decide(
  id: Identity, members: readonly PeerId[], me: number, context: Uint8Array, view: readonly (Slot | null)[], rows: readonly ((Slot | null)[] | null)[],
  commitRows: readonly ((Slot | null)[] | null)[] = [], commits: readonly (Slot | null)[] = [],
): Decision {
  const faults: [number, string][] = [];
  const notices: [number, string][] = [];
  const absent: number[] = [];
  const agreed = members.map((peer, r) => {
    const mine = [view[r], commits[r]].filter((s): s is Slot => !!s); // verified by this member already
    const held: Uint8Array[] = [];
    for (const s of mine) if (!held.some((d) => sameBytes(d, s.digest))) held.push(s.digest);
    for (const set of [rows, commitRows]) {
      set.forEach((row, k) => {
        const s = row?.[r];
        if (!s || k === r || k === me) return;
        if (held.some((d) => sameBytes(d, s.digest)) && mine.length) return; // what this member verified itself
        if (!slotVerifies(id, peer, context, s)) {
          notices.push([k, `echoed a signature for ${peer}'s contribution that does not verify (ignored)`]);
          return;
        }
        if (!held.some((d) => sameBytes(d, s.digest))) held.push(s.digest);
      });
    }
    if (held.length === 1) return held[0];
    if (held.length === 0) absent.push(r);
    else faults.push([r, 'signed two different contributions for the same exchange (sent different ones to different members)']);
    return null;
  });
  return { agreed, faults, absent, notices };
}
