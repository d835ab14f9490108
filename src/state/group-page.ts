/**
 * The page's one peer group: its store and controller, wired to the browser — the PeerJS transport
 * (WebRTC) on the page's PeerServer, the page's own GPU device (training runs on the main thread:
 * group-controller.ts says why) and the bundled corpus. Created on first use; the group is left
 * when the page goes away, so the others see this member leave at once.
 */
import { PeerJsTransport } from '../peers/peerjs';
import { acquireGpu } from '../engine/gpu/device';
import { Runtime } from '../engine/gpu/runtime';
import { createGroupStore, type GroupStore, inviteOf } from './group';
import { GroupController } from './group-controller';

export interface PageGroup {
  store: GroupStore;
  controller: GroupController;
}

let pageGroup: PageGroup | null = null;

export function pageGroupLab(): PageGroup {
  if (pageGroup) return pageGroup;
  const pageUrl = location.href;
  const store = createGroupStore(inviteOf(pageUrl));
  const controller = new GroupController(store, {
    pageUrl,
    openTransport: (o) => PeerJsTransport.open(o),
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
