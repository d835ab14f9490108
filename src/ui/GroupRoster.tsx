/**
 * The group's roster as this page sees it: every member with its role, its rank in the run (or in
 * the room between runs), the link's heartbeat round trip and bytes each way, and the member's last
 * step (time, communication share, weights hash) from its step reports.
 */
import { useStore } from 'zustand';
import type { RosterEntry } from '../peers/room/roster';
import { type GroupRun, hashHex, type PeerReport, shortPeer } from '../state/group/group';
import { pageGroupLab } from '../state/group/page';
import { formatBytes } from './format';

function stepCell(r: Pick<PeerReport, 'step' | 'stepMs' | 'commMs' | 'hash'> | null) {
  if (!r) return <td colSpan={3} className="muted">–</td>;
  const commPct = r.stepMs > 0 ? Math.round((100 * r.commMs) / r.stepMs) : 0;
  return (
    <>
      <td>{r.step + 1}</td>
      <td data-testid="group-peer-step-ms">{r.stepMs.toFixed(0)} ms <span className="muted">({commPct}% comm)</span></td>
      <td>{r.hash === null ? '–' : <code>{hashHex(r.hash)}</code>}</td>
    </>
  );
}

export function GroupRoster({ run }: { run: GroupRun | null }) {
  const { store } = pageGroupLab();
  const roster = useStore(store, (s) => s.roster);
  const reports = useStore(store, (s) => s.reports);
  const members = run?.members ?? null;
  const rankOf = (e: RosterEntry) => (members ? members.indexOf(e.id) : e.rank);
  const mine = run?.points.at(-1) ?? null;
  const rows = [...roster].sort((a, b) => (rankOf(a) < 0 ? 99 : rankOf(a)) - (rankOf(b) < 0 ? 99 : rankOf(b)) || a.id.localeCompare(b.id));
  return (
    <table className="group-roster" tabIndex={0} data-testid="group-roster" data-members={roster.filter((e) => e.state === 'admitted').length}>
      <caption>Members</caption>
      <thead>
        <tr>
          <th>peer</th><th>role</th><th>rank</th><th>link</th><th>sent</th><th>received</th><th>step</th><th>step time</th><th>weights</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((e) => {
          const report = e.self ? mine : reports[e.id] && reports[e.id].runId === run?.id ? reports[e.id] : null;
          const rank = rankOf(e);
          return (
            <tr key={e.id} data-testid="group-peer" data-peer={e.id} data-self={e.self} data-rank={rank} data-state={e.state}>
              <td title={e.id}><code>{shortPeer(e.id)}</code>{e.self && ' (this page)'}</td>
              <td>{e.role ?? '?'}</td>
              <td>{rank < 0 ? '–' : rank}</td>
              <td>{e.self ? '–' : e.state !== 'admitted' ? e.state : e.rttMs === null ? 'admitted' : `${e.rttMs.toFixed(1)} ms RTT`}</td>
              <td>{formatBytes(e.bytesSent)}</td>
              <td>{formatBytes(e.bytesReceived)}</td>
              {stepCell(report)}
            </tr>
          );
        })}
      </tbody>
    </table>
  );
}
