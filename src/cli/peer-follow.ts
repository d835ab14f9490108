/**
 * `npm run peer -- --join LINK --follow`: a headless member of a browser group. It runs the page's own
 * group controller (src/state/group/controller.ts) in Node — the same session protocol, so it takes
 * the group's Start, Stop and configuration from whichever panel presses them, joins a running run
 * late as a page does, and trains on this machine's GPU (Dawn; SwiftShader with --cpu or without a
 * GPU). The store's notices, run phases and steps are printed as lines; Ctrl-C leaves the group.
 */
import { readFileSync } from 'node:fs';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import type { IceConfig } from '../peers/transport/ice';
import { PeerJsTransport } from '../peers/peerjs/peerjs';
import { type ParsedRoomLink, type PeerServerAddress, sameOriginServer } from '../peers/room/room';
import { createGroupStore, type GroupRun, type GroupState, hashHex } from '../state/group/group';
import { GroupController } from '../state/group/controller';
import { defaultCorpusPath } from './common';

export interface FollowOptions {
  /** --join: the group's link (parseRoomLink); null with --host, which creates a room. */
  link: ParsedRoomLink | null;
  /** The page the links point to (the link's page, or --page with --host). */
  pageUrl: string;
  passphrase?: string;
  server: PeerServerAddress;
  ice: IceConfig;
  cpu: boolean;
  admitTimeoutMs: number;
  signal: AbortSignal;
}

const RUN_DONE = new Set(['done', 'stopped', 'error']);

/** Joins (or creates) the group and follows it until `signal` aborts; resolves with the exit status. */
export async function followGroup(o: FollowOptions): Promise<number> {
  // The controller reads the room and server from its store's invite; the transport gets o.ice itself.
  const store = createGroupStore(o.link ? { invite: { ...o.link, server: o.server.url } } : {});
  const held: { runtime: Promise<Runtime> | null } = { runtime: null };
  // Creating: the links point at the page; a --server other than the page's own goes into them.
  const page = new URL(o.pageUrl);
  if (!o.link && o.server.url !== sameOriginServer(o.pageUrl).url) page.searchParams.set('server', o.server.url);
  const controller = new GroupController(store, {
    pageUrl: page.href,
    openTransport: (t) => PeerJsTransport.open({ ...t, ice: o.ice }),
    runtime: () => (held.runtime ??= acquireNodeGpu({ forceSwiftShader: o.cpu }).then((gpu) => {
      const a = gpu.adapterInfo;
      console.log(`follow: GPU ${[a.vendor, a.architecture, a.description].filter(Boolean).join(' / ')}`);
      return new Runtime(gpu);
    })),
    loadText: async () => readFileSync(defaultCorpusPath(), 'utf8'),
    admitTimeoutMs: o.admitTimeoutMs,
    // Dawn compiles on this thread; SwiftShader can take minutes for a model's pipelines.
    buildBlocksMs: 240_000,
  });
  const stopPrinting = printStore(store);
  try {
    if (!o.link) await controller.create(o.passphrase);
    else await controller.join(o.passphrase);
    const s = store.getState();
    if (s.phase !== 'joined' || !s.room) {
      console.error(`error: could not join the group: ${s.joinError ?? 'unknown reason'}`);
      return 1;
    }
    console.log(`follow: joined as ${s.room.selfId}${o.link ? '' : `; link: ${s.room.link}`}; waiting for the group's runs (Ctrl-C leaves)`);
    await new Promise<void>((resolve) => {
      if (o.signal.aborted) return resolve();
      o.signal.addEventListener('abort', () => resolve(), { once: true });
    });
    return 0;
  } finally {
    controller.dispose();
    stopPrinting();
    if (held.runtime) (await held.runtime).device.destroy();
  }
}

/** One line per notice, run phase change and completed step (with the weights hash the panel shows). */
function printStore(store: ReturnType<typeof createGroupStore>): () => void {
  let lastNotice = 0;
  const seen = new Map<string, RunSeen>();
  return store.subscribe((s: GroupState) => {
    for (const n of s.notices) {
      if (n.id <= lastNotice) continue;
      lastNotice = n.id;
      (n.level === 'error' ? console.error : console.log)(`group ${n.level}: ${n.text}`);
    }
    for (const r of s.runs) printRun(r, seen);
  });
}

interface RunSeen {
  status: string;
  phase: string;
  /** Last step printed (the store thins a long run's points, so counting them would repeat steps). */
  step: number;
}

function printRun(r: GroupRun, seen: Map<string, RunSeen>): void {
  const was = seen.get(r.id) ?? { status: '', phase: '', step: -1 };
  let step = was.step;
  if (r.status !== was.status || r.phase !== was.phase) {
    console.log(`run ${r.id} (${r.label}): ${r.status}${r.phase ? ` — ${r.phase}` : ''}${r.joinedLate ? ' (joined late)' : ''}`);
  }
  for (const p of r.points) {
    if (p.step <= step) continue;
    step = p.step;
    const loss = p.loss === null ? 'state received' : `loss ${p.loss.toFixed(4)}`;
    console.log(`run ${r.id} step ${p.step}: ${loss}, ${p.world} member(s), ${p.stepMs.toFixed(0)} ms${p.hash === null ? '' : `, weights ${hashHex(p.hash)}`}`);
  }
  if (RUN_DONE.has(r.status) && r.error && was.status !== r.status) console.error(`run ${r.id} ${r.error.title}: ${r.error.message}`);
  seen.set(r.id, { status: r.status, phase: r.phase, step });
}
