/**
 * The verifiable all-reduce: no single member decides what the others sum. Every member all-gathers
 * every member's whole contribution (fp32, AGoQ's INT8 codes and scales, or DiLoCo's INT4) with its
 * sender's Ed25519 signature over its digest (signed-echo.ts: the digest is SHA-256 of the
 * SHA-256s of its buckets), then all-gathers an echo: per sender, the signed digest it holds. From
 * its own view and the echoes (one relay round of Dolev–Strong) every honest member, with at most
 * one faulty member, decides alike:
 *  - a sender with two validly signed digests (different contributions to different members), or
 *    none, is a fault: left out and removed on every member;
 *  - a lie in an echo (a signature that does not verify) changes nothing; it is named, not removed
 *    (only its receiver saw it);
 *  - a member lacking a contribution the others vouch for — withheld from it, garbled, or still
 *    on its way a grace after the others had it — gets it relayed (relay.ts) and checks it against
 *    the signed digest, so a withholding sender stalls nobody past the grace; it is named.
 * Then each member reduces the agreed contributions itself, in rank order, with the same
 * arithmetic, so all end bit-identical; before summing, contributions are checked (length, scales:
 * malformed is a fault) and screened (dp-screen.ts: non-finite, too large, pointing away).
 * Limits: PeerGroup's full mesh (at most 8 members); every member sends N−1 copies of its whole
 * contribution (gatherWireBytes); with two or more colluding members agreement needs more relay
 * rounds than the one built.
 *
 * The protocol is apart from what holds the numbers (contributions.ts): the JS backend
 * (js-contributions.ts) over a Float32Array, or the GPU one (gpu-contributions.ts) over the model's
 * gradient storage. Both send the same bytes; their screening figures and means are each the same
 * on every member using that backend (the data-parallel fingerprint names it).
 */
import { AGOQ_BLOCK, echoWireBytes, gatherWireBytes, type WireFormat } from '../../engine/scheme/wire';
import type { Contributions } from './contributions';
import { digestOfParts, sameBytes } from './digest';
import { type Exclusion, screen, type ScreenOptions } from './screen';
import { CollectiveError, type PeerGroup, Skips } from './group';
import { JsContributions } from './js-contributions';
import { decodeRelay, encodeRelay, relays } from './relay';
import { decide, decodeRow, encodeRow, SLOT_BYTES, exchangeContext, signedMessage, type Slot, slotVerifies } from './signed-echo';
import type { PeerId } from '../transport/transport';

export type { Contributions, OpenedContributions } from './contributions';

export interface VerifiedOptions {
  /** Floats per all-gather message (default: all of x in one): bounds message sizes. */
  bucketFloats?: number;
  /** Screening before the sum; null: only non-finite contributions are left out. */
  screen?: ScreenOptions | null;
  /**
   * Least wait (ms, default 2000) before a member stops waiting for a contribution the others
   * already vouch for (it is relayed), or for the last echo row; longer when the exchange itself
   * has taken longer (half of it for a contribution, all of it for a row).
   */
  graceMs?: number;
  /** Called as bucket b's all-gather is issued (its bytes exist): how early the exchange started. */
  onBucketSent?: (b: number) => void;
  /** The signed header (this member's commitment to its buckets) waits for it; a rejection fails the call. */
  commitAfter?: Promise<unknown>;
}

export interface VerifiedResult<R = Float32Array> {
  /** The backend's mean of the kept contributions; bit-identical on every member that received the same bytes. */
  out: R;
  /** Ranks whose contributions were summed (ascending), and the others with why. */
  kept: number[];
  excluded: Exclusion[];
  /** What this member saw go wrong but cannot prove to the others (named, not removed): a lie in an echo, a withheld contribution. */
  notices: { peer: PeerId; rank: number; why: string }[];
  /** Bytes of the group's frames this rank sent / received during the call (no heartbeats); and what fp32 would have sent. */
  bytesSent: number;
  bytesReceived: number;
  fp32Bytes: number;
}

/** The buckets of a vector of n floats (at least one): every member cuts the same. */
export function bucketSpans(n: number, bucket: number): [number, number][] {
  const spans: [number, number][] = [];
  for (let a = 0; a < n || spans.length === 0; a += bucket) spans.push([a, Math.min(n, a + bucket)]);
  return spans;
}

/**
 * Waits out the last missing sender of a round: once at most one other member has not delivered,
 * it is waited for `factor` times as long as the exchange has taken since t0 (at least `factor`
 * graces), then skipped. A member that withholds from everyone so stalls nobody for long; an
 * honest member up to factor + 1 times slower than the others is still waited for.
 */
function lastOne(skips: Skips, missing: () => number[], grace: number, t0: number, factor: number): { check: () => void; stop: () => void } {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const check = () => {
    if (timer !== undefined || missing().length > 1) return;
    timer = setTimeout(() => missing().forEach((r) => skips.add(r)), factor * Math.max(grace, performance.now() - t0));
  };
  return { check, stop: () => clearTimeout(timer) };
}

/** Mean of `x` over the group, verified and screened; every rank must call it with the same length and options. */
export async function reduceVerified(g: PeerGroup, x: Float32Array, o: VerifiedOptions & { mode: WireFormat; blockSize?: number }): Promise<VerifiedResult> {
  return reduceContributions(g, new JsContributions(x, o.mode, o.blockSize ?? AGOQ_BLOCK), o);
}

/** The verified all-reduce over any backend; every rank must call it with the same length, mode and options. */
export async function reduceContributions<R>(g: PeerGroup, c: Contributions<R>, o: VerifiedOptions): Promise<VerifiedResult<R>> {
  const id = g.transport.identity;
  if (!id) throw new Error('verified all-reduce: the transport has no signing identity');
  const bucket = Math.max(1, o.bucketFloats ?? c.length);
  const grace = o.graceMs ?? 2000;
  const N = g.size;
  const me = g.rank;
  const t0 = performance.now();
  const t = g.traffic;
  const sent0 = t.sent;
  const recv0 = t.received;
  const spans = bucketSpans(c.length, bucket);
  const notices: VerifiedResult['notices'] = [];
  const notice = (r: number, why: string) => notices.push({ peer: g.members[r], rank: r, why });

  // Tags: the commitment at `base`, the commitment row at base + 1, bucket b at base + 2 + b, the
  // echo after them; reserved up front, since commitments and rows may arrive before their collective.
  // Each tag's largest message: a slot, two rows, the buckets (at most 8 B an element in any
  // format: fp32 is 4, the quantized ones less plus their scales). A larger one names its sender.
  const slots = N * SLOT_BYTES;
  const base = g.reserveTags(spans.length + 3, (i) => (i === 0 ? SLOT_BYTES : i === 1 || i === spans.length + 2 ? slots : 8 * (spans[i - 2][1] - spans[i - 2][0]) + 64));
  const context = exchangeContext(g.runId, g.step, base, g.members);
  const mineP = c.encode(spans);
  if (mineP.length !== spans.length) throw new Error(`verified all-reduce: the backend encoded ${mineP.length} buckets for ${spans.length} spans`);
  // The order the buckets' bytes came to exist in (backward's, when streamed): they go out in it.
  const ready: number[] = [];
  mineP.forEach((p, b) => p.then(() => ready.push(b), () => {})); // awaited below
  const rowTag = base + 1;
  const echoTag = base + 2 + spans.length;

  // Round 1: commit. Each member signs the digest of its whole contribution and all-gathers that
  // commitment; nobody reveals a byte of its contribution before it holds every member's
  // commitment, so none can be shaped after seeing the others'. A commitment withheld from this
  // member is taken from another member's commitment row (it is signed: whoever forwards it cannot
  // alter it).
  const commits: (Slot | null)[] = new Array<Slot | null>(N).fill(null);
  const skipC = new Skips();
  const takeCommit = (r: number, s: Slot | null | undefined, from: number) => {
    if (!s || r === me || commits[r]) return;
    if (!slotVerifies(id, g.members[r], context, s)) {
      if (from === r) notice(r, 'its commitment does not verify');
      return;
    }
    commits[r] = { publicKey: s.publicKey.slice(), digest: s.digest.slice(), signature: s.signature.slice() };
    skipC.add(r);
  };
  const takeRow = (from: number, payload: Uint8Array) => decodeRow(payload, N)?.forEach((s, r) => r !== from && takeCommit(r, s, from));
  const skip1 = new Skips();
  const arrived = new Array<number>(N).fill(0);
  const timers: ReturnType<typeof setTimeout>[] = [];
  // A sender the others already vouch for in their echo rows (its reveal reached them whole) is
  // waited for a grace longer, then relayed instead.
  const watch = (tag: number, from: number, payload: Uint8Array) => {
    if (from === me) return;
    if (tag === rowTag) return takeRow(from, payload);
    if (tag !== echoTag) return;
    decodeRow(payload, N)?.forEach((s, r) => {
      if (!s || r === me || r === from || arrived[r] === spans.length + 1 || !slotVerifies(id, g.members[r], context, s)) return;
      timers.push(setTimeout(() => skip1.add(r), Math.max(grace, 0.5 * (performance.now() - t0))));
    });
  };
  const unwatch = g.onBuffered(watch);
  const count = (r: number) => void arrived[r]++;
  let pieces: (Uint8Array | null)[][];
  let commitRows: ((Slot | null)[] | null)[];
  let own: Slot;
  let waitR: ReturnType<typeof lastOne> | undefined;
  try {
    const mine = await Promise.all(mineP);
    await o.commitAfter;
    own = { publicKey: id.publicKey, digest: await digestOfParts(mine), signature: new Uint8Array(0) };
    own.signature = id.sign(signedMessage(context, own.digest));
    commits[me] = own;
    const waitC = lastOne(skipC, () => g.members.map((_, r) => r).filter((r) => !commits[r]), grace, t0, 4);
    try {
      waitC.check();
      await g.allGatherSomeAt(base, encodeRow([own]), skipC, (from, b) => (takeCommit(from, decodeRow(b, 1)?.[0], from), waitC.check()));
    } finally {
      waitC.stop();
    }

    // Round 2: reveal, once every commitment is held: the commitment row (what this member holds,
    // so a member lacking one gets it), then the buckets.
    waitR = lastOne(skip1, () => g.members.map((_, r) => r).filter((r) => r !== me && arrived[r] < spans.length + 1 && !skip1.has(r)), grace, performance.now(), 2);
    const got = (r: number) => (count(r), waitR!.check());
    const rowsP = g.allGatherSomeAt(rowTag, encodeRow(commits), skip1, (from, b) => (takeRow(from, b), got(from)));
    const gathers: Promise<(Uint8Array | null)[]>[] = new Array(spans.length);
    for (const b of ready) {
      o.onBucketSent?.(b);
      gathers[b] = g.allGatherSomeAt(base + 2 + b, mine[b], skip1, got);
    }
    waitR.check();
    gathers.forEach((p) => p.catch(() => {})); // awaited below; an earlier failure must not leave them unhandled
    commitRows = (await rowsP).map((b, k) => (k === me || !b ? null : decodeRow(b, N)));
    pieces = await Promise.all(gathers);
  } finally {
    unwatch();
    timers.forEach(clearTimeout);
    waitR?.stop();
  }

  // What this member holds of each sender: a whole contribution matching the sender's commitment.
  const view: (Slot | null)[] = await Promise.all(g.members.map(async (_, r) => {
    if (r === me) return own;
    if (!commits[r] || pieces.some((p) => !p[r])) return null;
    const digest = await digestOfParts(pieces.map((p) => p[r]!));
    if (!sameBytes(digest, commits[r]!.digest)) {
      notice(r, 'its reveal does not match its commitment');
      return null;
    }
    return commits[r];
  }));

  // Round 3: the echo. The last row is waited for twice as long as the exchange has taken (at least
  // twice the grace): longer than a member waiting out a withheld contribution takes to send its row.
  const skip2 = new Skips();
  let rowsIn = 0;
  let lastRow: ReturnType<typeof setTimeout> | undefined;
  const armLast = () => {
    if (lastRow === undefined && N - 1 - rowsIn <= 1) lastRow = setTimeout(() => g.members.forEach((_, r) => skip2.add(r)), 2 * Math.max(grace, performance.now() - t0));
  };
  armLast();
  let rawRows: (Uint8Array | null)[];
  try {
    rawRows = await g.allGatherSomeAt(echoTag, encodeRow(view), skip2, () => (rowsIn++, armLast()));
  } finally {
    clearTimeout(lastRow);
  }
  const rows = rawRows.map((b, k) => {
    if (k === me || !b) return null;
    const row = decodeRow(b, N);
    if (!row) notice(k, `malformed echo (${b.length} B, expected ${N} slots)`);
    return row;
  });
  const unrevealed: number[] = [];
  const d = decide(id, g.members, me, context, view, rows, commitRows, commits);
  for (const r of d.absent) if (r !== me) unrevealed.push(r);
  for (const [k, why] of d.notices) notice(k, why);

  // A committed contribution that reached no member whole (its reveal matched its commitment
  // nowhere: withheld from all, or garbled for all) is its sender's fault, decided alike by every
  // honest member from the same echo rows; the sender's own claim to hold it counts for nothing.
  for (let r = 0; r < N; r++) {
    const a = d.agreed[r];
    if (!a || r === me) continue;
    const mineOk = !!view[r] && sameBytes(view[r]!.digest, a);
    if (mineOk || rows.some((row, k) => k !== r && !!row?.[r] && sameBytes(row[r]!.digest, a))) continue;
    d.agreed[r] = null;
    unrevealed.push(r);
  }

  // Round 4: relays. Each member sends a lacking member what it lacks, if among its two lowest holders.
  const holds = (r: number) => (h: number) => (h === me ? view[r] : rows[h]?.[r]);
  const sends = new Map<number, Uint8Array>();
  for (let j = 0; j < N; j++) {
    if (j === me || !rows[j]) continue;
    const give = g.members.map((_, r) => r).filter((r) => {
      const a = d.agreed[r];
      const theirs = rows[j]![r];
      return a && !(theirs && sameBytes(theirs.digest, a)) && relays(me, j, r, a, holds(r));
    });
    if (give.length) sends.set(j, encodeRelay(give.map((r) => ({ rank: r, pieces: pieces.map((p) => p[r]!) }))));
  }
  const need = new Set(g.members.map((_, r) => r).filter((r) => d.agreed[r] && !(view[r] && sameBytes(view[r]!.digest, d.agreed[r]!))));
  const skip3 = new Skips();
  const relayed = new Map<number, number>();
  const takeRelay = async (from: number, m: Uint8Array) => {
    const entries = decodeRelay(m, N, spans.length);
    if (typeof entries === 'string') return void notice(from, `malformed relay: ${entries}`);
    for (const e of entries) {
      if (!need.has(e.rank) || !sameBytes(await digestOfParts(e.pieces), d.agreed[e.rank]!)) continue;
      e.pieces.forEach((p, b) => (pieces[b][e.rank] = p));
      need.delete(e.rank);
      relayed.set(e.rank, from);
    }
    if (need.size === 0) g.members.forEach((_, r) => skip3.add(r));
  };
  const pending: Promise<void>[] = [];
  await g.sendSome(sends, need.size ? g.members.map((_, r) => r).filter((r) => r !== me) : [], skip3, (from, m) => pending.push(takeRelay(from, m)));
  await Promise.all(pending);
  if (need.size) throw new CollectiveError('invalid-payload', `no member relayed ${[...need].map((r) => g.members[r]).join(', ')}'s contribution`);
  for (const [r, from] of relayed) notice(r, `its contribution did not reach ${g.members[me]} whole and signed; ${g.members[from]} relayed it`);

  const excluded: Exclusion[] = d.faults.map(([r, why]) => ({ peer: g.members[r], rank: r, why, fault: true }));
  // Withheld from everyone (or garbled for everyone, or too slow for everyone): left out and counted
  // as a strike, so withholding repeated past the bound removes the member; once is no proof.
  for (const r of unrevealed) excluded.push({ peer: g.members[r], rank: r, why: 'no member holds its contribution whole and matching its commitment (withheld, garbled or too late for everyone)', fault: false });
  let cand = g.members.map((_, r) => r).filter((r) => d.agreed[r]);
  const opened = await c.open(pieces as Uint8Array[][], spans, cand, g.members, !!o.screen && o.screen.minCosine !== null && cand.length >= 3);
  for (const [r, why] of opened.faults) {
    excluded.push({ peer: g.members[r], rank: r, why: `malformed contribution: ${why}`, fault: true });
    cand = cand.filter((q) => q !== r);
  }
  let kept: number[];
  if (o.screen) {
    const sc = screen(g.members, cand, opened, o.screen);
    kept = sc.kept;
    excluded.push(...sc.excluded);
  } else {
    kept = cand.filter((r) => opened.finite[r]);
    for (const r of cand) if (!opened.finite[r]) excluded.push({ peer: g.members[r], rank: r, why: 'non-finite values', fault: false });
  }
  if (kept.length === 0) throw new CollectiveError('invalid-payload', `no contribution passed the checks: ${excluded.map((e) => `${e.peer}: ${e.why}`).join('; ')}`);

  const out = await c.reduce(kept);
  const cp = g.chunkPayload;
  const fp32Bytes = spans.reduce((s, [a, b]) => s + gatherWireBytes(b - a, N, 'fp32', { chunkPayload: cp }), 0) + echoWireBytes(N, cp);
  excluded.sort((a, b) => a.rank - b.rank);
  return { out, kept, excluded, notices, bytesSent: t.sent - sent0, bytesReceived: t.received - recv0, fp32Bytes };
}
