/**
 * The verified all-reduce's relay round (verified-reduce.ts): contributions a member lacks, sent by
 * members that hold them. A relayed contribution is taken only when its digest is the one every
 * honest member agreed on (signed by its sender), so a relayer cannot alter it.
 *
 * Message: u8 count, then per contribution: u8 rank, u8 buckets, buckets × u32 LE length, the
 * buckets' bytes in order.
 */
import type { Slot } from './signed-echo';
import { sameBytes } from './digest';

export function encodeRelay(entries: { rank: number; pieces: Uint8Array[] }[]): Uint8Array {
  const size = 1 + entries.reduce((s, e) => s + 2 + 4 * e.pieces.length + e.pieces.reduce((a, p) => a + p.length, 0), 0);
  const out = new Uint8Array(size);
  const dv = new DataView(out.buffer);
  out[0] = entries.length;
  let o = 1;
  for (const e of entries) {
    out[o++] = e.rank;
    out[o++] = e.pieces.length;
    for (const p of e.pieces) {
      dv.setUint32(o, p.length, true);
      o += 4;
    }
    for (const p of e.pieces) {
      out.set(p, o);
      o += p.length;
    }
  }
  return out;
}

/** The contributions in a relay message, or why it is malformed (ranks < n, `buckets` each). */
export function decodeRelay(m: Uint8Array, n: number, buckets: number): { rank: number; pieces: Uint8Array[] }[] | string {
  if (m.length < 1) return 'empty relay';
  const dv = new DataView(m.buffer, m.byteOffset, m.byteLength);
  const out: { rank: number; pieces: Uint8Array[] }[] = [];
  let o = 1;
  for (let i = 0; i < m[0]; i++) {
    if (o + 2 > m.length) return 'relay ends inside an entry';
    const rank = m[o++];
    const count = m[o++];
    if (rank >= n || count !== buckets) return `relay entry for rank ${rank} with ${count} buckets`;
    if (o + 4 * count > m.length) return 'relay ends inside the bucket lengths';
    const lens = Array.from({ length: count }, (_, b) => dv.getUint32(o + 4 * b, true));
    o += 4 * count;
    const pieces: Uint8Array[] = [];
    for (const len of lens) {
      if (o + len > m.length) return 'relay ends inside a bucket';
      pieces.push(m.slice(o, o + len));
      o += len;
    }
    out.push({ rank, pieces });
  }
  return o === m.length ? out : 'trailing bytes after the relay';
}

/**
 * Whether this member (`me`) relays rank r's contribution to `j`: it holds it and fewer than two
 * lower ranks (j aside) hold it, so of any two holders one is honest, and the lowest honest holder
 * always sends; `holds(h)`: rank h's slot for r, as this member sees it, carries the agreed digest.
 */
export function relays(me: number, j: number, r: number, agreed: Uint8Array, holds: (h: number) => Slot | null | undefined): boolean {
  const has = (h: number) => {
    const s = holds(h);
    return !!s && sameBytes(s.digest, agreed);
  };
  if (j === me || r === j || !has(me)) return false;
  let lower = 0;
  for (let h = 0; h < me; h++) if (h !== j && has(h)) lower++;
  return lower < 2;
}
