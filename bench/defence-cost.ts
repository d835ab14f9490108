/**
 * The cost of issue 38's defences, in one process (--defences): per step, the protocol rounds of a
 * data-parallel step — the gradient exchange and the end-of-step report — as the product runs them
 * (commit-then-reveal verified all-reduce with the pairwise screen, the signed and echoed REPORT)
 * against the undefended protocol (written here, bench only: AGoQ's two-shot all-reduce, a
 * reduce-scatter then an all-gather of the same wire format, and a plain all-gather of the report),
 * alternated step by step over the same vector of the model's size on the same links; then DiLoCo
 * with the held-out check on and off (src/parallel/diloco/bench.ts). Bytes are the group's frames
 * one member sent.
 */
import { chunkBounds, type WireFormat } from '../src/engine/scheme/wire';
import { decodeF32, decodeInt8Chunk, encodeF32, encodeInt8Chunk } from '../src/peers/collectives/chunk-codec';
import { PeerGroup } from '../src/peers/collectives/group';
import { DEFAULT_SCREEN } from '../src/peers/collectives/screen';
import { reduceVerified } from '../src/peers/collectives/verified-reduce';
import { agreeStatements } from '../src/parallel/dp/agreement';
import { encodeReport } from '../src/parallel/dp/wire';
import { type LinkLimits, limitTransport } from '../src/peers/transport/limiter';
import { LoopbackHub } from '../src/peers/transport/loopback';

export interface DefenceRow {
  protocol: 'undefended' | 'defended';
  peers: number;
  mode: WireFormat;
  floats: number;
  /** Median over the timed steps: the whole round (all members done), and one member's bytes sent. */
  msPerStep: number;
  bytesPerStep: number;
  exchangeMs: number;
  reportMs: number;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The undefended two-shot all-reduce: reduce-scatter (each member sums its chunk), then all-gather of the means. */
async function twoShot(g: PeerGroup, x: Float32Array, mode: WireFormat): Promise<Float32Array> {
  const enc = (v: Float32Array) => (mode === 'int8' ? encodeInt8Chunk(v) : encodeF32(v));
  const dec = (b: Uint8Array, n: number) => (mode === 'int8' ? decodeInt8Chunk(b, n) : decodeF32(b, n));
  const spans = chunkBounds(x.length, g.size);
  const got = await g.allToAll(spans.map(([a, b]) => enc(x.subarray(a, b))));
  const [a, b] = spans[g.rank];
  const sum = new Float32Array(b - a);
  for (const p of got) {
    const v = dec(p, b - a);
    for (let i = 0; i < v.length; i++) sum[i] += v[i] / g.size;
  }
  const all = await g.allGather(enc(sum));
  const out = new Float32Array(x.length);
  spans.forEach(([lo, hi], r) => out.set(dec(all[r], hi - lo), lo));
  return out;
}

export async function benchDefences(o: { floats: number; peers: number; mode: WireFormat; steps: number; warmup: number; link: LinkLimits; bucketFloats?: number }): Promise<DefenceRow[]> {
  const { transports } = LoopbackHub.group(o.peers);
  const links = transports.map((t) => limitTransport(t, o.link));
  const ids = links.map((t) => t.id);
  const groups = links.map((t) => new PeerGroup(t, { runId: 0x3800, members: ids, timeoutMs: 600_000 }));
  // Every member's own gradient-like vector (a fixed pseudo-random one per member: the screen keeps them all).
  const xs = groups.map((_, r) => {
    const x = new Float32Array(o.floats);
    let s = 0x9e3779b9 ^ r;
    for (let i = 0; i < x.length; i++) {
      s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
      x[i] = (s / 2 ** 32 - 0.5) * 1e-2 + 1e-3;
    }
    return x;
  });
  const rows: Record<'undefended' | 'defended', { ms: number[]; bytes: number[]; ex: number[]; rep: number[] }> = {
    undefended: { ms: [], bytes: [], ex: [], rep: [] }, defended: { ms: [], bytes: [], ex: [], rep: [] },
  };
  let step = 0;
  try {
    for (let i = 0; i < o.warmup + o.steps; i++) {
      // Alternated, in either order, so drift in the machine's load falls on both.
      const order: ('undefended' | 'defended')[] = i % 2 ? ['defended', 'undefended'] : ['undefended', 'defended'];
      for (const p of order) {
        step++;
        groups.forEach((g) => g.setStep(step));
        const sent0 = groups[0].traffic.sent;
        const t0 = performance.now();
        let te = 0;
        await Promise.all(groups.map(async (g, r) => {
          if (p === 'undefended') await twoShot(g, xs[r], o.mode);
          else await reduceVerified(g, xs[r], { mode: o.mode, bucketFloats: o.bucketFloats, screen: DEFAULT_SCREEN });
          te = Math.max(te, performance.now());
          const body = encodeReport({ step, weightsHash: 0x12345678, loss: 3.5, joiners: [], accused: [] });
          if (p === 'undefended') await g.allGather(body);
          else await agreeStatements(g, body, { domain: 'report' });
        }));
        const t1 = performance.now();
        if (i < o.warmup) continue;
        rows[p].ms.push(t1 - t0);
        rows[p].ex.push(te - t0);
        rows[p].rep.push(t1 - te);
        rows[p].bytes.push(groups[0].traffic.sent - sent0);
      }
    }
  } finally {
    groups.forEach((g) => g.close());
    links.forEach((t) => t.close());
  }
  return (['undefended', 'defended'] as const).map((p) => ({
    protocol: p, peers: o.peers, mode: o.mode, floats: o.floats,
    msPerStep: median(rows[p].ms), bytesPerStep: median(rows[p].bytes), exchangeMs: median(rows[p].ex), reportMs: median(rows[p].rep),
  }));
}
