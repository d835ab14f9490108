import { PeerGroup, type PeerGroupOptions } from '../../src/peers/group';
import { LoopbackHub, type LoopbackOptions } from '../../src/peers/loopback';
import type { Transport } from '../../src/peers/transport';

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
