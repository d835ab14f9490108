import { digestOfParts } from '../../src/peers/collectives/digest';
import { PeerGroup, type PeerGroupOptions, Skips } from '../../src/peers/collectives/group';
import { decodeRow, encodeRow, exchangeContext, signedMessage, type Slot } from '../../src/peers/collectives/signed-echo';
import { LoopbackHub, type LoopbackOptions } from '../../src/peers/transport/loopback';
import type { Transport } from '../../src/peers/transport/transport';

export interface TestGroup {
  hub: LoopbackHub;
  groups: PeerGroup[];
  rejects: { peer: string; reason: string; at: number }[][];
}

/** n loopback peers p0..p{n-1}, each with a PeerGroup; rejects are recorded per receiving rank. */
export function makeGroups(
  n: number,
  opts: Partial<PeerGroupOptions> = {},
  hubOpts: LoopbackOptions = {},
  wrap: (t: Transport, i: number) => Transport = (t) => t,
): TestGroup {
  const { hub, transports } = LoopbackHub.group(n, hubOpts);
  const rejects: TestGroup['rejects'] = transports.map(() => []);
  const groups = transports.map(
    (t, i) =>
      new PeerGroup(wrap(t, i), {
        runId: 7,
        timeoutMs: 2000,
        ...opts,
        onReject: (peer, reason) => rejects[i].push({ peer, reason, at: i }),
      }),
  );
  return { hub, groups, rejects };
}

export function bytesOf(...v: number[]): Uint8Array {
  return Uint8Array.from(v);
}

/** Lets queued microtasks and zero-delay timers run. */
export function settle(): Promise<void> {
  return new Promise((r) => setTimeout(r, 0));
}

/**
 * One member's side of a verified all-reduce (one bucket) with a contribution of its choosing,
 * committed (signed), revealed to all, and an honest echo: what a faulty but protocol-following
 * member does. Tags in order: commitment, commitment row, the bucket, the echo, the relay round.
 */
export async function misbehave(g: PeerGroup, contribution: Uint8Array): Promise<void> {
  const id = g.transport.identity!;
  const context = exchangeContext(g.runId, g.step, g.tag, g.members);
  const digest = await digestOfParts([contribution]);
  const own: Slot = { publicKey: id.publicKey, digest, signature: id.sign(signedMessage(context, digest)) };
  const commits = (await g.allGather(encodeRow([own]))).map((b, r) => (r === g.rank ? own : decodeRow(b, 1)![0]));
  await g.allGather(encodeRow(commits));
  await g.allGather(contribution);
  await g.allGather(encodeRow(commits));
  await g.sendSome(new Map(), [], new Skips());
}
