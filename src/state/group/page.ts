/**
 * The page's one peer group: its store and controller, wired to the browser — the PeerJS transport
 * (WebRTC) on the page's PeerServer, the page's own GPU device (training runs on the main thread:
 * group-controller.ts says why) and the bundled corpus. Created on first use; the group is left
 * when the page goes away, so the others see this member leave at once.
 */
import { PeerJsTransport } from '../../peers/peerjs/peerjs';
import { acquireGpu } from '../../engine/gpu/device';
import { Runtime } from '../../engine/gpu/runtime';
import { createGroupStore, type GroupStore, iceOf, inviteOf } from './group';
import { GroupController } from './controller';

export interface PageGroup {
  store: GroupStore;
  controller: GroupController;
}

let pageGroup: PageGroup | null = null;

/**
 * Whether the server said it has TURN: its credentials are never in /lab-config.json; the transport
 * asks the PeerServer for them once registered (src/peers/peerjs/server-turn.ts).
 */
let serverHasTurn = false;

/** The server's ICE setting (npm start --ice), unless the user typed one meanwhile; a server without one answers 404. */
async function serverIce(store: GroupStore, pageUrl: string): Promise<void> {
  let body: unknown;
  try {
    const res = await fetch(new URL(`${import.meta.env.BASE_URL}lab-config.json`, pageUrl), { cache: 'no-store' });
    if (!res.ok || !(res.headers.get('content-type') ?? '').includes('json')) return;
    body = await res.json();
  } catch {
    return;
  }
  const c = body as { ice?: unknown; relayOnly?: unknown; turn?: unknown };
  if (typeof c?.ice !== 'string' || c.ice.length > 8192) return;
  if (store.getState().ice.from !== null) return;
  serverHasTurn = c.turn === true;
  store.getState().setIce({ spec: c.ice, relayOnly: c.relayOnly === true, from: 'server' });
}

export function pageGroupLab(): PageGroup {
  if (pageGroup) return pageGroup;
  const pageUrl = location.href;
  const linkIce = iceOf(pageUrl);
  const store = createGroupStore({ ...inviteOf(pageUrl), ice: linkIce });
  if (!linkIce) void serverIce(store, pageUrl);
  const controller = new GroupController(store, {
    pageUrl,
    openTransport: (o) => PeerJsTransport.open({ ...o, turnFromServer: serverHasTurn && store.getState().ice.from === 'server' }),
    runtime: async () => new Runtime(await acquireGpu(navigator.gpu)),
    loadText: async () => {
      const url = new URL(`${import.meta.env.BASE_URL}data/tinyshakespeare.txt`, pageUrl).href;
      const res = await fetch(url);
      if (!res.ok) throw new Error(`could not load the training text ${url}: HTTP ${res.status}`);
      return res.text();
    },
  });
  window.addEventListener('pagehide', () => controller.dispose());
  pageGroup = { store, controller };
  return pageGroup;
}
