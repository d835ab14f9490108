/**
 * What the full mesh costs as the group grows: N in-process members on a loopback hub, each
 * endpoint behind a LimitedTransport, run one DiLoCo outer exchange — the verified all-reduce of a
 * pseudo-gradient — and report per N the bytes a member sends (measured, and the wire formula),
 * the exchange's wall time, and one member's own host work in it (signatures, digests, codec),
 * timed apart. The group is limited to 8 members (PeerGroup); this simulation lifts the limit to
 * show why (bench/mesh-scaling.ts runs it).
 *
 * All members share one JS thread, so the wall time holds every member's host work in turn: it
 * grows with N × (one member's work) even where separate machines would overlap it.
 */
import { median } from '../src/engine/gpu/timer';
import { Rng } from '../src/engine/util/rng';
import { AGOQ_BLOCK, allReduceWireBytes, gatherWireBytes, echoWireBytes, type WireFormat } from '../src/engine/scheme/wire';
import { digestOfParts } from '../src/peers/collectives/digest';
import { PeerGroup } from '../src/peers/collectives/group';
import { identityOf, newKeyPair, verifySignature } from '../src/peers/room/identity';
import { JsContributions } from '../src/peers/collectives/js-contributions';
import { type LinkLimits, limitTransport } from '../src/peers/transport/limiter';
import { LoopbackHub } from '../src/peers/transport/loopback';
import { exchangeContext, signedMessage } from '../src/peers/collectives/signed-echo';
import { reduceVerified } from '../src/peers/collectives/verified-reduce';

export interface MeshBenchOptions {
  /** Group sizes, each run as its own group (≥ 2). */
  sizes: number[];
  /** Floats in the pseudo-gradient (the model's parameter count). */
  floats: number;
  wire: WireFormat;
  /** Every member's uplink (limiter.ts: one token bucket per endpoint, shared by its N−1 links). */
  link: LinkLimits;
  /** Longest a size may take (ms); past it the size is stopped and reported, and larger sizes skipped. */
  deadlineMs: number;
  /** The verified all-reduce's grace before relaying a contribution the others vouch for (verified-reduce.ts). */
  graceMs?: number;
  seed?: number;
  /** Called after each size. */
  onRow?: (row: MeshRow) => void;
}

export interface MeshRow {
  members: number;
  /** Directed links in the mesh: N·(N−1). */
  links: number;
  status: 'ok' | 'timed-out' | 'skipped' | 'failed';
  /** Why a size did not complete. */
  reason?: string;
  /** Transport bytes one member sent in the exchange (group frames): least and most over members. */
  bytesSentMin?: number;
  bytesSentMax?: number;
  /** allReduceWireBytes: the contribution's N−1 copies plus the signed header and echo. */
  formulaBytes: number;
  /** Of which the contribution's copies (gatherWireBytes) and the header and echo (echoWireBytes). */
  gatherBytes: number;
  echoBytes: number;
  /** What the same exchange would send in fp32. */
  fp32Bytes: number;
  /** formulaBytes at the uplink's rate: the least time a member's sends take. */
  uplinkMs: number;
  /** From the first member's call to the last member's result; and to the first member's result. */
  wallMs?: number;
  firstMs?: number;
  /** Members that saw something go wrong (a relay, a lie) — none in an honest run that kept pace. */
  notices?: number;
  /** One member's host work in the exchange, timed alone: N−1 signature checks, N digests and one signature; the codec (encode once, decode and sum N). */
  memberCryptoMs: number;
  memberCodecMs: number;
  /**
   * Not measured: the exchange's time were each member on its own machine, from the measured parts —
   * uplinkMs, two one-way latencies (contributions, then echo) and one member's host work (the
   * downlink taken as fast as the uplink, which it at least is on home links).
   */
  separateMs: number;
}

export interface MeshBenchResult {
  floats: number;
  wire: WireFormat;
  link: LinkLimits;
  deadlineMs: number;
  rows: MeshRow[];
}

/** A member's pseudo-gradient: random, of the scale DiLoCo's are (θ_start − θ_local after H steps). */
function pseudoGradient(n: number, seed: number): Float32Array {
  return new Rng(seed).normalArray(n, 1e-3);
}

/** One member's host work in an exchange of N, timed alone (not interleaved with the other members'). */
async function memberWork(n: number, floats: number, wire: WireFormat, seed: number): Promise<{ cryptoMs: number; codecMs: number }> {
  const x = pseudoGradient(floats, seed);
  const own = new JsContributions(x, wire, AGOQ_BLOCK);
  const spans: [number, number][] = [[0, floats]];
  const keys = newKeyPair();
  const id = identityOf(keys, () => true);
  const members = Array.from({ length: n }, (_, r) => `p${r}`);
  const context = exchangeContext(19, 0, 0, members);
  const t0 = performance.now();
  const piece = await own.encode(spans)[0];
  const tEnc = performance.now();
  // Own: digest and sign; each received contribution: its digest, then its signature over it.
  const signature = id.sign(signedMessage(context, await digestOfParts([piece])));
  for (let r = 1; r < n; r++) {
    const d = await digestOfParts([piece]);
    if (!verifySignature(signature, signedMessage(context, d), keys.publicKey)) throw new Error('mesh bench: signature check failed');
  }
  const tCrypto = performance.now();
  const all = members.map((_, r) => r);
  const opened = await own.open([all.map(() => piece)], spans, all, members);
  if (opened.faults.length) throw new Error(`mesh bench: ${opened.faults[0][1]}`);
  await own.reduce(all);
  const tEnd = performance.now();
  return { cryptoMs: tCrypto - tEnc, codecMs: tEnc - t0 + (tEnd - tCrypto) };
}

async function runSize(n: number, o: MeshBenchOptions): Promise<Pick<MeshRow, 'status' | 'reason' | 'bytesSentMin' | 'bytesSentMax' | 'wallMs' | 'firstMs' | 'notices'>> {
  const hub = new LoopbackHub();
  const transports = Array.from({ length: n }, (_, i) => limitTransport(hub.endpoint(`m${String(i).padStart(3, '0')}`), o.link));
  const groups = transports.map((t) => new PeerGroup(t, { runId: 19, maxMembers: n, timeoutMs: o.deadlineMs }));
  const xs = groups.map((g) => pseudoGradient(o.floats, (o.seed ?? 1) * 1000 + g.rank));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<'timed-out'>((resolve) => (timer = setTimeout(() => resolve('timed-out'), o.deadlineMs)));
  const t0 = performance.now();
  const done: number[] = [];
  const runs = Promise.all(groups.map(async (g, i) => {
    const r = await reduceVerified(g, xs[i], { mode: o.wire, screen: null, graceMs: o.graceMs });
    done.push(performance.now() - t0);
    return r;
  }));
  runs.catch(() => {}); // raced below; a failure after the deadline must not go unhandled
  try {
    const r = await Promise.race([runs, deadline]);
    if (r === 'timed-out') return { status: 'timed-out', reason: `not done after ${o.deadlineMs} ms (${done.length} of ${n} members finished)` };
    const sent = r.map((x) => x.bytesSent);
    return {
      status: 'ok', bytesSentMin: Math.min(...sent), bytesSentMax: Math.max(...sent),
      wallMs: Math.max(...done), firstMs: Math.min(...done), notices: r.filter((x) => x.notices.length > 0).length,
    };
  } catch (e) {
    return { status: 'failed', reason: (e as Error).message };
  } finally {
    clearTimeout(timer);
    groups.forEach((g) => g.close());
    transports.forEach((t) => t.close());
  }
}

/** Runs the sizes in order; once one times out, the larger ones are reported as skipped. */
export async function benchMesh(o: MeshBenchOptions): Promise<MeshBenchResult> {
  if (!(o.floats >= 1) || !Number.isInteger(o.floats)) throw new Error(`mesh bench: floats ${o.floats} is not a positive integer`);
  for (const n of o.sizes) if (!Number.isInteger(n) || n < 2) throw new Error(`mesh bench: group size ${n} is not an integer ≥ 2`);
  // Warm-up (JIT, the signature library's tables): one small exchange and one member's work, untimed.
  await memberWork(2, o.floats, o.wire, o.seed ?? 1);
  const warm = await runSize(2, { ...o, deadlineMs: Math.max(o.deadlineMs, 60_000) });
  if (warm.status !== 'ok') throw new Error(`mesh bench: the 2-member warm-up ${warm.status}: ${warm.reason ?? ''}`);
  const rows: MeshRow[] = [];
  let stopped: string | null = null;
  for (const n of o.sizes) {
    const gatherBytes = gatherWireBytes(o.floats, n, o.wire);
    const echoBytes = echoWireBytes(n);
    const formulaBytes = allReduceWireBytes(o.floats, n, 0, o.wire);
    if (formulaBytes !== gatherBytes + echoBytes) throw new Error('mesh bench: the wire formula does not add up');
    const reps = [];
    for (let i = 0; i < 3; i++) reps.push(await memberWork(n, o.floats, o.wire, o.seed ?? 1));
    const work = { cryptoMs: median(reps.map((w) => w.cryptoMs)), codecMs: median(reps.map((w) => w.codecMs)) };
    const base: MeshRow = {
      members: n, links: n * (n - 1), status: 'skipped', formulaBytes, gatherBytes, echoBytes,
      fp32Bytes: allReduceWireBytes(o.floats, n, 0, 'fp32'), uplinkMs: (1000 * formulaBytes) / o.link.bytesPerSecond,
      memberCryptoMs: work.cryptoMs, memberCodecMs: work.codecMs,
      separateMs: (1000 * formulaBytes) / o.link.bytesPerSecond + 2 * (o.link.latencyMs ?? 0) + work.cryptoMs + work.codecMs,
    };
    const row: MeshRow = stopped ? { ...base, reason: stopped } : { ...base, ...(await runSize(n, o)) };
    if (row.status === 'timed-out' && !stopped) stopped = `a smaller group (${n}) did not finish within ${o.deadlineMs} ms`;
    rows.push(row);
    o.onRow?.(row);
  }
  return { floats: o.floats, wire: o.wire, link: o.link, deadlineMs: o.deadlineMs, rows };
}
