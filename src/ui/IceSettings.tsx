/**
 * The group's network settings: STUN/TURN servers for members on different networks (src/peers/transport/ice.ts
 * spec), prefilled from the page link (?ice=, ?relay=1) or the server (npm start --ice). Collapsed:
 * on one machine or a LAN nothing is needed, and nothing outside is contacted unless set here.
 */
import { useMemo } from 'react';
import { useStore } from 'zustand';
import { iceCheck } from '../state/group/group';
import { pageGroupLab } from '../state/group/page';

export function IceSettings() {
  const { store } = pageGroupLab();
  const ice = useStore(store, (s) => s.ice);
  const { problem, summary } = useMemo(() => iceCheck(ice), [ice]);
  const set = (patch: Partial<typeof ice>) => store.getState().setIce({ ...ice, ...patch, from: 'panel' });
  const from = ice.from === 'link' ? ' (from the page link)' : ice.from === 'server' ? ' (from the server)' : '';
  return (
    <details className="group-ice" data-testid="group-ice" open={ice.spec !== '' || problem !== null}>
      <summary>Network: {summary}{from}</summary>
      <label className="group-row">
        <span>ICE servers</span>
        <input type="text" value={ice.spec} onChange={(e) => set({ spec: e.target.value })} data-testid="group-ice-servers"
          placeholder="stun:host:3478,USER:SECRET@turn:host:3478" spellCheck={false} autoComplete="off"
          aria-invalid={problem !== null} aria-describedby="group-ice-help" />
      </label>
      <label className="group-row">
        <input type="checkbox" checked={ice.relayOnly} onChange={(e) => set({ relayOnly: e.target.checked })} data-testid="group-ice-relay" />
        <span>relay only (every link through the TURN server)</span>
      </label>
      <p id="group-ice-help" className="muted small">
        Members on different networks need a STUN server, and behind strict NATs a TURN server; comma-separated,
        credentials before the URL. Used for the next create or join; never put into the group's link.
      </p>
      {problem && <div className="error" role="alert" data-testid="group-ice-problem">{problem}</div>}
    </details>
  );
}

