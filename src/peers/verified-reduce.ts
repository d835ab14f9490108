/**
 * The verifiable all-reduce: no single member decides what the others sum. Every member all-gathers
 * every member's whole contribution (fp32, AGoQ's INT8 codes and scales, or DiLoCo's INT4), then all-gathers a
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
 *
 * The protocol (gather, echo, faults, screen) is apart from what holds the numbers (Contributions):
 * the JS backend here, over a Float32Array, or the GPU one (gpu-contributions.ts), over the model's
 * gradient storage. Both send the same bytes; their screening figures and means are each the same
 * on every member using that backend (the data-parallel fingerprint names it).
 */
import { AGOQ_BLOCK, DIGEST_BYTES, echoWireBytes, gatherWireBytes, type WireFormat } from '../engine/scheme/wire';
import { decodeF32, decodeInt8Chunk, encodeF32, encodeInt8Chunk } from './chunk-codec';
import { decodeInt4Chunk, encodeInt4Chunk } from './int4-chunk';
import { digestOfParts, sameBytes } from './digest';
import { type Exclusion, screen, type ScreenData, type ScreenOptions } from './dp-screen';
import { CollectiveError, type PeerGroup } from './group';
import type { PeerId } from './transport';

export interface VerifiedOptions {
  /** Floats per all-gather message (default: all of x in one): bounds message sizes. */
  bucketFloats?: number;
  /** Screening before the sum; null: only non-finite contributions are left out. */
  screen?: ScreenOptions | null;
}

export interface VerifiedResult<R = Float32Array> {
  /** The backend's mean of the kept contributions; bit-identical on every member that received the same bytes. */
  out: R;
  /** Ranks whose contributions were summed (ascending), and the others with why. */
  kept: number[];
  excluded: Exclusion[];
  /** Bytes of the group's frames this rank sent / received during the call (no heartbeats); and what fp32 would have sent. */
  bytesSent: number;
  bytesReceived: number;
  fp32Bytes: number;
}

/** The gathered contributions, as the screen sees them; `faults`: malformed ones (rank, why). */
export interface OpenedContributions extends ScreenData {
  faults: [number, string][];
}

/**
 * What holds the numbers of one verified all-reduce, one call at a time: this member's
 * contribution cut into the buckets' wire bytes, the gathered buckets' screening figures, and the
 * mean of the kept ranks (R: where it goes).
 */
export interface Contributions<R> {
  /** Floats in the exchanged vector. */
  readonly length: number;
  readonly mode: WireFormat;
  encode(spans: [number, number][]): Promise<Uint8Array[]>;
  /**
   * pieces[b][r]: bucket b of rank r; only the `cand` ranks are looked at. `needDots`: whether the
   * screen may ask for dots (a backend may then prepare them; without, it may refuse them).
   */
  open(pieces: Uint8Array[][], spans: [number, number][], cand: number[], members: readonly PeerId[], needDots: boolean): Promise<OpenedContributions>;
  /** The mean of the kept ranks (ascending), in rank order. */
  reduce(kept: number[]): Promise<R>;
}

/** Mean of `x` over the group, verified and screened; every rank must call it with the same length and options. */
export async function reduceVerified(g: PeerGroup, x: Float32Array, o: VerifiedOptions & { mode: WireFormat; blockSize?: number }): Promise<VerifiedResult> {
  return reduceContributions(g, new JsContributions(x, o.mode, o.blockSize ?? AGOQ_BLOCK), o);
}

/** The verified all-reduce over any backend; every rank must call it with the same length, mode and options. */
export async function reduceContributions<R>(g: PeerGroup, c: Contributions<R>, o: VerifiedOptions): Promise<VerifiedResult<R>> {
  const bucket = Math.max(1, o.bucketFloats ?? c.length);
  const N = g.size;
  const t = g.traffic;
  const sent0 = t.sent;
  const recv0 = t.received;
  const spans: [number, number][] = [];
  for (let a = 0; a < c.length || spans.length === 0; a += bucket) spans.push([a, Math.min(c.length, a + bucket)]);

  const mine = await c.encode(spans);
  const pieces: Uint8Array[][] = [];
  for (const p of mine) pieces.push(await g.allGather(p));
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

  let cand = g.members.map((_, r) => r).filter((r) => !faulted.has(r));
  const d = await c.open(pieces, spans, cand, g.members, !!o.screen && o.screen.minCosine !== null && cand.length >= 3);
  for (const [r, why] of d.faults) {
    fault(r, `malformed contribution: ${why}`);
    cand = cand.filter((q) => q !== r);
  }
  let kept: number[];
  if (o.screen) {
    const sc = screen(g.members, cand, d, o.screen);
    kept = sc.kept;
    excluded.push(...sc.excluded);
  } else {
    kept = cand.filter((r) => d.finite[r]);
    for (const r of cand) if (!d.finite[r]) excluded.push({ peer: g.members[r], rank: r, why: 'non-finite values', fault: false });
  }
  if (kept.length === 0) throw new CollectiveError('invalid-payload', `no contribution passed the checks: ${excluded.map((e) => `${e.peer}: ${e.why}`).join('; ')}`);

  const out = await c.reduce(kept);
  const cp = g.chunkPayload;
  const fp32Bytes = spans.reduce((s, [a, b]) => s + gatherWireBytes(b - a, N, 'fp32', { chunkPayload: cp }), 0) + echoWireBytes(N, cp);
  excluded.sort((a, b) => a.rank - b.rank);
  return { out, kept, excluded, bytesSent: t.sent - sent0, bytesReceived: t.received - recv0, fp32Bytes };
}

/**
 * The JS backend: x's buckets encoded on the host (encodeInt8Chunk / fp32 LE), decoded per bucket;
 * norms and dots in fp64, the mean summed in rank order: fp32 accumulation for INT8 (as AGoQ
 * specifies), fp64 for fp32 (the mean rounded once).
 */
class JsContributions implements Contributions<Float32Array> {
  readonly length: number;
  private pieces: Uint8Array[][] = [];
  private spans: [number, number][] = [];
  private members: readonly PeerId[] = [];

  constructor(private readonly x: Float32Array, readonly mode: WireFormat, private readonly block: number) {
    if (!Number.isInteger(block) || block < 1) throw new Error(`allReduceMean: bad block size ${block}`);
    for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) throw new Error(`allReduceMean: non-finite input at ${i}`);
    this.length = x.length;
  }

  encode(spans: [number, number][]): Promise<Uint8Array[]> {
    const { x } = this;
    const enc = (v: Float32Array) => (this.mode === 'int4' ? encodeInt4Chunk(v, this.block) : this.mode === 'int8' ? encodeInt8Chunk(v, this.block) : encodeF32(v));
    return Promise.resolve(spans.map(([a, b]) => enc(x.subarray(a, b))));
  }

  private dec(b: number, r: number): Float32Array {
    const [lo, hi] = this.spans[b];
    const p = this.pieces[b][r];
    const who = this.members[r];
    return this.mode === 'int4' ? decodeInt4Chunk(p, hi - lo, this.block, who) : this.mode === 'int8' ? decodeInt8Chunk(p, hi - lo, this.block, who) : decodeF32(p, hi - lo, who);
  }

  open(pieces: Uint8Array[][], spans: [number, number][], cand: number[], members: readonly PeerId[]): Promise<OpenedContributions> {
    Object.assign(this, { pieces, spans, members });
    const N = members.length;
    const faults: [number, string][] = [];
    const finite = new Array<boolean>(N).fill(true);
    const norm2 = new Array<number>(N).fill(0);
    let live = [...cand];
    for (let b = 0; b < spans.length; b++) {
      for (const r of [...live]) {
        let v: Float32Array;
        try {
          v = this.dec(b, r);
        } catch (e) {
          faults.push([r, (e as Error).message]);
          live = live.filter((q) => q !== r);
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
        const vs = set.map((r) => this.dec(b, r));
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
    return Promise.resolve({ faults, finite, norm2, dots });
  }

  reduce(kept: number[]): Promise<Float32Array> {
    const out = new Float32Array(this.length);
    for (let b = 0; b < this.spans.length; b++) {
      const [lo, hi] = this.spans[b];
      // The quantized formats (INT8, DiLoCo's INT4) are summed in fp32 (as AGoQ specifies), fp32 in fp64.
      const acc = this.mode !== 'fp32' ? new Float32Array(hi - lo) : new Float64Array(hi - lo);
      for (const r of kept) {
        const v = this.dec(b, r);
        for (let i = 0; i < acc.length; i++) acc[i] += v[i];
      }
      for (let i = 0; i < acc.length; i++) out[lo + i] = acc[i] / kept.length;
    }
    return Promise.resolve(out);
  }
}
