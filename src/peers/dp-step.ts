/**
 * The data-parallel step's core (dp.ts): the bucketed gradient all-reduce, the weights-hash verdict
 * over the step reports, and the step's stats. Free functions of what they are given, so the driver
 * keeps only the group's life cycle.
 */
import { allReduceMean, allReduceWireBytes, type AllReduceMode } from './allreduce';
import type { StepReport } from './dp-wire';
import { type Applied, DpError, type DpEvent, type DpStepStats, type Reported, type StepBegin } from './dp-types';
import type { PeerGroup } from './group';
import type { PeerId, Transport } from './transport';

/** Mean of `x` over the group, bucket by bucket; bytes as sent, and as fp32 would have sent them. */
export async function exchangeMean(
  g: PeerGroup, x: Float32Array, bucketFloats: number, mode: AllReduceMode,
): Promise<{ out: Float32Array; sent: number; received: number; fp32Bytes: number }> {
  const out = new Float32Array(x.length);
  let sent = 0;
  let received = 0;
  let fp32Bytes = 0;
  for (let a = 0; a < x.length; a += bucketFloats) {
    const b = Math.min(x.length, a + bucketFloats);
    const r = await allReduceMean(g, x.subarray(a, b), { mode });
    out.set(r.out, a);
    sent += r.bytesSent;
    received += r.bytesReceived;
    fp32Bytes += allReduceWireBytes(b - a, g.size, g.rank, 'fp32', { chunkPayload: g.chunkPayload });
  }
  return { out, sent, received, fp32Bytes };
}

/** Every member got the same reports, so every member reaches the same verdict. */
export function checkHashes(g: PeerGroup, reports: StepReport[], s: number): void {
  const byHash = new Map<number, PeerId[]>();
  reports.forEach((r, i) => {
    const h = r.weightsHash ?? -1;
    byHash.set(h, [...(byHash.get(h) ?? []), g.members[i]]);
  });
  if (byHash.size === 1) return;
  // The largest set (ties: the one holding the lowest id) is the reference; the others diverged.
  const sets = [...byHash.entries()].sort((a, b) => b[1].length - a[1].length || (a[1][0] < b[1][0] ? -1 : 1));
  const odd = sets.slice(1).flatMap(([, p]) => p);
  const show = sets.map(([h, p]) => `${h < 0 ? 'no hash' : `crc32 0x${h.toString(16).padStart(8, '0')}`} on ${p.join(', ')}`).join('; ');
  throw new DpError('diverged', `weights differ after step ${s} (${s + 1} steps taken): ${show}. Diverged: ${odd.join(', ')}. The run stops on every peer.`, s, odd);
}

/** Where the peer stands when a step ends: what its stats are measured against. */
export interface StepContext {
  id: PeerId;
  members: readonly PeerId[];
  epoch: number;
  mode: AllReduceMode;
  transport: Transport;
  events: DpEvent[];
}

export function stepStats(c: StepContext, s: number, begin: StepBegin, a: Applied | null, report: Reported | null): DpStepStats {
  const stepMs = performance.now() - begin.t0;
  const busy = a ? a.computeMs + a.applyMs : 0;
  return {
    step: s,
    loss: a?.loss ?? null,
    groupLoss: report?.groupLoss ?? null,
    lr: a?.lr ?? null,
    gradNorm: a?.gradNorm ?? null,
    rank: c.members.indexOf(c.id),
    world: c.members.length,
    members: [...c.members],
    epoch: c.epoch,
    mode: c.mode,
    bytesSent: c.transport.stats.bytesSent - begin.sent,
    bytesReceived: c.transport.stats.bytesReceived - begin.received,
    exchangeBytesSent: a?.exchangeBytesSent ?? 0,
    exchangeBytesReceived: a?.exchangeBytesReceived ?? 0,
    fp32ExchangeBytes: a?.fp32ExchangeBytes ?? 0,
    wireRatio: a && a.fp32ExchangeBytes > 0 ? a.exchangeBytesSent / a.fp32ExchangeBytes : 0,
    computeMs: a?.computeMs ?? 0,
    applyMs: a?.applyMs ?? 0,
    exchangeMs: a?.exchangeMs ?? 0,
    syncMs: stepMs - busy - (a?.exchangeMs ?? 0),
    busyMs: busy,
    commMs: stepMs - busy,
    stepMs,
    weightsHash: report?.weightsHash ?? a?.weightsHash ?? null,
    recovered: a === null || report === null,
    events: c.events,
  };
}
