/**
 * The verifiable all-reduce: no single member decides what the others sum. Every member all-gathers
 * every member's whole contribution (fp32, or AGoQ's INT8 codes and scales), then all-gathers a
 * SHA-256 digest of each contribution as it received it (the echo), and reduces the contributions
 * itself, in rank order, with the same arithmetic (a contribution's digest: SHA-256 of the
 * concatenated SHA-256s of its buckets; the echo: the N digests in rank order): so every member that received the same bytes
 * ends with bit-identical values, and a member that sent different bytes to different members is
 * seen by the others' echoes. Before summing, each contribution is
 *  - a fault (left out, and its sender removed): it was malformed (length, scales), or its digest
 *    differs between this member and another's echo (an equivocating sender; a member that lies
 *    about two or more contributions, or about this member's own, is faulted itself). With one
 *    lie about one other member's contribution the echo cannot tell liar from framed: see
 *    docs/peer-groups.md for what then holds (the weights hash, judged by majority);
 *  - screened (dp-screen.ts): non-finite, too large, or pointing away from the others.
 * Limit: PeerGroup's full mesh (at most 8 members); every member sends N−1 copies of its whole
 * contribution (gatherWireBytes), against ≈ 2(N−1)/N of it for the two-shot scheme it replaces,
 * whose chunk owners could broadcast any "reduced" chunk they liked.
 */
import { AGOQ_BLOCK, DIGEST_BYTES, echoWireBytes, gatherWireBytes, type WireFormat } from '../engine/scheme/wire';
import { decodeF32, decodeInt8Chunk, encodeF32, encodeInt8Chunk } from './chunk-codec';
import { decodeInt4Chunk, encodeInt4Chunk } from './int4-chunk';
import { digestOfParts, sameBytes } from './digest';
import { type Exclusion, screen, type ScreenOptions } from './dp-screen';
import { CollectiveError, type PeerGroup } from './group';

export interface VerifiedOptions {
  mode: WireFormat;
  /** INT8 block size (default 256). */
  blockSize?: number;
  /** Floats per all-gather message (default: all of x in one): bounds message sizes. */
  bucketFloats?: number;
  /** Screening before the sum; null: only non-finite contributions are left out. */
  screen?: ScreenOptions | null;
}

export interface VerifiedResult {
  /** Mean of the kept contributions; bit-identical on every member that received the same bytes. */
  out: Float32Array;
  /** Ranks whose contributions were summed (ascending), and the others with why. */
  kept: number[];
  excluded: Exclusion[];
  /** Transport bytes this rank sent / received during the call; and what fp32 would have sent. */
  bytesSent: number;
  bytesReceived: number;
  fp32Bytes: number;
}

/** Mean of `x` over the group, verified and screened; every rank must call it with the same length and options. */
export async function reduceVerified(g: PeerGroup, x: Float32Array, o: VerifiedOptions): Promise<VerifiedResult> {
  const block = o.blockSize ?? AGOQ_BLOCK;
  if (!Number.isInteger(block) || block < 1) throw new Error(`allReduceMean: bad block size ${block}`);
  for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) throw new Error(`allReduceMean: non-finite input at ${i}`);
  const bucket = Math.max(1, o.bucketFloats ?? x.length);
  const N = g.size;
  const t = g.transport.stats;
  const sent0 = t.bytesSent;
  const recv0 = t.bytesReceived;
  // The quantized formats (INT8, DiLoCo's INT4) are summed alike, in fp32.
  const int8 = o.mode !== 'fp32';
  const enc = (v: Float32Array) => (o.mode === 'int4' ? encodeInt4Chunk(v, block) : int8 ? encodeInt8Chunk(v, block) : encodeF32(v));
  const spans: [number, number][] = [];
  for (let a = 0; a < x.length || spans.length === 0; a += bucket) spans.push([a, Math.min(x.length, a + bucket)]);

  const pieces: Uint8Array[][] = [];
  for (const [a, b] of spans) pieces.push(await g.allGather(enc(x.subarray(a, b))));
  const digests = await Promise.all(g.members.map((_, r) => digestOfParts(pieces.map((p) => p[r]))));
  const echo = new Uint8Array(N * DIGEST_BYTES);
  digests.forEach((d, r) => echo.set(d, r * DIGEST_BYTES));
  const rows = await g.allGather(echo);

  const excluded: Exclusion[] = [];
  const fault = (r: number, why: string) => excluded.push({ peer: g.members[r], rank: r, why, fault: true });
  const faulted = new Set<number>();
  rows.forEach((row, k) => {
    if (row.length === N * DIGEST_BYTES) return;
    fault(k, `malformed echo (${row.length} B, expected ${N * DIGEST_BYTES})`);
    faulted.add(k);
  });
  // Dissent: reporter k's digest of r's contribution differs from this member's. A reporter that
  // dissents on two or more slots, or on this member's own (it knows what it sent), is the liar;
  // otherwise the one slot's sender sent different contributions to different members.
  const slot = (k: number, r: number) => rows[k].subarray(r * DIGEST_BYTES, (r + 1) * DIGEST_BYTES);
  const me = g.rank;
  const dissents = (k: number) => g.members.map((_, r) => r).filter((r) => r !== k && k !== me && !faulted.has(k) && !sameBytes(slot(k, r), digests[r]));
  for (let k = 0; k < N; k++) {
    const d = dissents(k);
    if (d.length >= 2 || d.includes(me)) {
      fault(k, `misreported ${d.map((r) => g.members[r]).join(', ')}'s contribution in its echo`);
      faulted.add(k);
    }
  }
  for (let k = 0; k < N; k++) {
    for (const r of dissents(k)) {
      if (faulted.has(r)) continue;
      fault(r, `${g.members[k]} received another contribution from it than ${g.members[me]} did: it sent different contributions to different members (or ${g.members[k]} misreports)`);
      faulted.add(r);
    }
  }

  const dec = (b: number, r: number): Float32Array => {
    const [lo, hi] = spans[b];
    const who = g.members[r];
    return o.mode === 'int4' ? decodeInt4Chunk(pieces[b][r], hi - lo, block, who) : int8 ? decodeInt8Chunk(pieces[b][r], hi - lo, block, who) : decodeF32(pieces[b][r], hi - lo, who);
  };
  let cand = g.members.map((_, r) => r).filter((r) => !faulted.has(r));
  const finite = new Array<boolean>(N).fill(true);
  const norm2 = new Array<number>(N).fill(0);
  for (let b = 0; b < spans.length; b++) {
    for (const r of [...cand]) {
      let v: Float32Array;
      try {
        v = dec(b, r);
      } catch (e) {
        fault(r, `malformed contribution: ${(e as Error).message}`);
        cand = cand.filter((q) => q !== r);
        continue;
      }
      let s = 0;
      for (let i = 0; i < v.length; i++) s += v[i] * v[i];
      if (!Number.isFinite(s)) finite[r] = false;
      else norm2[r] += s;
    }
  }
  const dots = (set: number[]) => {
    const dot = set.map(() => 0);
    let sum2 = 0;
    for (let b = 0; b < spans.length; b++) {
      const vs = set.map((r) => dec(b, r));
      const S = new Float64Array(spans[b][1] - spans[b][0]);
      for (const v of vs) for (let i = 0; i < S.length; i++) S[i] += v[i];
      for (let i = 0; i < S.length; i++) sum2 += S[i] * S[i];
      vs.forEach((v, j) => {
        let d = 0;
        for (let i = 0; i < S.length; i++) d += v[i] * S[i];
        dot[j] += d;
      });
    }
    return { dot, sum2 };
  };
  let kept: number[];
  if (o.screen) {
    const sc = screen(g.members, cand, { finite, norm2, dots }, o.screen);
    kept = sc.kept;
    excluded.push(...sc.excluded);
  } else {
    kept = cand.filter((r) => finite[r]);
    for (const r of cand) if (!finite[r]) excluded.push({ peer: g.members[r], rank: r, why: 'non-finite values', fault: false });
  }
  if (kept.length === 0) throw new CollectiveError('invalid-payload', `no contribution passed the checks: ${excluded.map((e) => `${e.peer}: ${e.why}`).join('; ')}`);

  // Every member sums the same kept contributions in rank order: fp32 accumulation for INT8 (as
  // AGoQ specifies), fp64 for fp32 (the mean rounded once).
  const out = new Float32Array(x.length);
  for (let b = 0; b < spans.length; b++) {
    const [lo, hi] = spans[b];
    const acc = int8 ? new Float32Array(hi - lo) : new Float64Array(hi - lo);
    for (const r of kept) {
      const v = dec(b, r);
      for (let i = 0; i < acc.length; i++) acc[i] += v[i];
    }
    for (let i = 0; i < acc.length; i++) out[lo + i] = acc[i] / kept.length;
  }
  const cp = g.chunkPayload;
  const fp32Bytes = spans.reduce((s, [a, b]) => s + gatherWireBytes(b - a, N, 'fp32', { chunkPayload: cp }), 0) + echoWireBytes(N, cp);
  excluded.sort((a, b) => a.rank - b.rank);
  return { out, kept, excluded, bytesSent: t.bytesSent - sent0, bytesReceived: t.bytesReceived - recv0, fp32Bytes };
}
