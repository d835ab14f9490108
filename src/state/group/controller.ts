/**
 * The page's peer group: joins or creates a room (PeerJS transport, src/peers/peerjs/peerjs.ts), keeps the
 * roster, speaks the session protocol (group-wire.ts) and trains the group's runs — data parallel
 * (src/parallel/dp/dp.ts) or tensor parallel (src/parallel/tp/group.ts), through group-training.ts — feeding the
 * group store.
 *
 * Where the training runs: on the page's main thread, not in the training Web Worker. WebRTC
 * (RTCPeerConnection) does not exist in workers, so a worker-hosted trainer would need every
 * collective proxied through postMessage: each gradient chunk, heartbeat and bufferedAmount wait
 * crossing a thread boundary, and two copies of the drivers' timing-sensitive fault logic (silence
 * timeouts, backpressure) reasoning about a transport they cannot see. On the main thread the
 * drivers run unchanged over the real transport, as the headless peer runs them in Node. The page
 * stays responsive because the heavy work is not on this thread: WebGPU queues, pipeline
 * compilation and readbacks run in the GPU process and are awaited, and WebRTC's network work runs
 * in the browser's network stack. What remains here per step is O(parameters) typed-array work —
 * the AGoQ INT8 codec of the gradient, its all-reduce sums, a crc32 of the weights — a few
 * milliseconds for micro and tiny (small and base, also offered, want a real GPU). The e2e test records the page's
 * long tasks while training.
 *
 * A run: one member presses Start; it announces the run (config + members) to every peer, and each
 * member builds its model, says 'ready', and trains. Data parallel starts once every announced
 * member is ready (or gone), so slow compiles (minutes on SwiftShader) do not trip the driver's
 * silence timeout; a member that joins the room later learns the run from the others, builds its
 * model, and joins at the group's next step (DataParallel's HELLO → WELCOME, then the state
 * hand-over). Tensor parallel needs every member from the start (its first collective waits for
 * all shards); a member that leaves stops it. Stop is group-wide: the stopper names a step count
 * every member stops at (its completed steps + 2, which no member can have passed: the message
 * travels on each channel ahead of the stopper's frames of its next step).
 */
import { type IceConfig, parseIce } from '../../peers/transport/ice';
import type { PeerProblem } from '../../peers/peerjs/peerjs';
import { createRoomId, parseServerUrl, type PeerServerAddress, roomLink, sameOriginServer, serverForPage } from '../../peers/room/room';
import type { PeerId, Unsubscribe } from '../../peers/transport/transport';
import { DeviceLostError } from '../../engine/gpu/device';
import type { Runtime } from '../../engine/gpu/runtime';
import { type GroupRunStatus, type GroupStore, isActiveRun, shortPeer } from './group';
import { GROUP_MODES, groupConfigProblem, isTensorParallel } from './config';
import type { GroupDeps, OpenRoomOptions, RoomTransport } from './deps';
import { errorText, runError } from './errors';
import type { CheckpointFiles } from '../../engine/io/checkpoint';
import { type GroupTrainingHost, type LiveRun, trainDp, trainTp } from './training';
import { type RunMessage, SESSION_VERSION, type SessionMessage, type SplitTransport, splitTransport } from './wire';

interface Session {
  t: RoomTransport;
  split: SplitTransport;
  unsubs: Unsubscribe[];
  timer: ReturnType<typeof setInterval>;
  /** Peers whose malformed session message was already reported (later ones are only counted). */
  reported: Set<PeerId>;
}

/** Group runs whose end checkpoint stays in memory for download. */
const KEPT_CHECKPOINTS = 3;

export class GroupController {
  private session: Session | null = null;
  private live: LiveRun | null = null;
  /** Runs this page has finished or declined: a late copy of their announcement is ignored. */
  private readonly past = new Set<string>();
  private rt: Promise<Runtime> | null = null;
  private text: Promise<string> | null = null;
  private opening = false;
  /** What a run's training (group-training.ts) uses of this controller. */
  private readonly host: GroupTrainingHost;
  /** The end checkpoints of this session's runs, newest last (a few: they are whole models in memory). */
  private readonly checkpoints = new Map<string, CheckpointFiles>();

  constructor(
    private readonly store: GroupStore,
    private readonly deps: GroupDeps,
  ) {
    this.host = {
      store, dp: deps.dp, tpTimeoutMs: deps.tpTimeoutMs,
      selfId: () => this.selfId,
      training: () => this.session?.split.training ?? null,
      present: (p) => this.present(p),
      broadcast: (m) => this.broadcast(m),
      broadcastTo: (peers, m) => this.broadcastTo(peers, m),
      phase: (live, status, phase) => this.phase(live, status, phase),
      keepCheckpoint: (live, step, files) => {
        this.checkpoints.delete(live.id);
        this.checkpoints.set(live.id, files);
        for (const old of [...this.checkpoints.keys()].slice(0, -KEPT_CHECKPOINTS)) {
          this.checkpoints.delete(old);
          store.getState().updateRun(old, { checkpointStep: null });
        }
        store.getState().updateRun(live.id, { checkpointStep: step });
      },
      beforeBuild: async () => {
        if (!deps.buildBlocksMs || !this.session?.t.announceBusy) return;
        this.session.t.announceBusy(deps.buildBlocksMs);
        // Let the announcement leave before the thread blocks.
        await new Promise((resolve) => setTimeout(resolve, 100));
      },
    };
  }

  /** The checkpoint this page kept of a group run (model.safetensors + config.json among them), or null. */
  checkpoint(runId: string): CheckpointFiles | null {
    return this.checkpoints.get(runId) ?? null;
  }

  /** This member's id in the room (null outside one). */
  get selfId(): PeerId | null {
    return this.session?.t.id ?? null;
  }

  // ---- rooms ----------------------------------------------------------------------------------

  /** Creates a room (optionally with a passphrase) and shows its link. */
  async create(passphrase = ''): Promise<void> {
    const page = this.deps.pageUrl;
    const named = new URL(page).searchParams.get('server') ?? undefined;
    let server: PeerServerAddress;
    let room: string;
    let link: string;
    try {
      server = serverForPage(page);
      room = createRoomId();
      link = roomLink(page, room, named);
    } catch (e) {
      this.store.getState().joinFailed(errorText(e));
      return;
    }
    await this.connect({ room, passphrase, server, role: 'host' }, link);
  }

  /** Joins the room of this page's link. */
  async join(passphrase = ''): Promise<void> {
    const invite = this.store.getState().invite;
    if (!invite) return;
    let server: PeerServerAddress;
    let link: string;
    try {
      server = invite.server ? parseServerUrl(invite.server) : sameOriginServer(this.deps.pageUrl);
      link = roomLink(this.deps.pageUrl, invite.room, invite.server);
    } catch (e) {
      this.store.getState().joinFailed(errorText(e));
      return;
    }
    await this.connect({ room: invite.room, passphrase, server, role: 'peer' }, link);
  }

  private async connect(o: OpenRoomOptions, link: string): Promise<void> {
    if (this.session || this.opening) return;
    this.opening = true;
    const s = this.store.getState();
    let ice: IceConfig;
    try {
      ice = parseIce(s.ice.spec, s.ice.relayOnly);
    } catch (e) {
      this.opening = false;
      s.joinFailed(`ICE servers: ${errorText(e)}`);
      return;
    }
    s.connecting();
    let t: RoomTransport | null = null;
    try {
      t = await this.deps.openTransport({ ...o, passphrase: o.passphrase || undefined, ice });
      // Listening before admission: the members announce their run the moment the link is admitted.
      this.attach(t);
      await t.whenAdmitted(this.deps.admitTimeoutMs ?? 30_000);
      if (!this.isCurrent(t)) throw new Error('left before being admitted');
      s.joined({ id: o.room, link, role: o.role, selfId: t.id, hasPassphrase: !!o.passphrase, server: o.server.url });
      s.notice('info', o.role === 'host' ? 'group created: share the link' : `joined the group (${t.peers().length} other member${t.peers().length === 1 ? '' : 's'})`);
      this.refreshRoster();
    } catch (e) {
      const stillHere = t !== null && this.isCurrent(t);
      if (stillHere) this.detach();
      t?.close();
      // Leaving while connecting is not a failure to report.
      if (stillHere || t === null) s.joinFailed(errorText(e));
    } finally {
      this.opening = false;
    }
  }

  /** Whether `t` is still this page's room transport (it may have left while awaiting). */
  private isCurrent(t: RoomTransport): boolean {
    return this.session?.t === t;
  }

  private attach(t: RoomTransport): void {
    const split = splitTransport(t);
    const session: Session = { t, split, unsubs: [], reported: new Set(), timer: setInterval(() => this.refreshRoster(), this.deps.rosterEveryMs ?? 1000) };
    this.session = session;
    session.unsubs.push(
      split.onSession((from, m) => this.onSession(from, m), (from, why) => this.rejected(from, why)),
      t.onPeerJoin((p) => this.peerJoined(p)),
      t.onPeerLeave((p) => this.peerLeft(p)),
      t.onProblem((p) => this.problem(p)),
    );
  }

  private detach(): void {
    const s = this.session;
    if (!s) return;
    clearInterval(s.timer);
    for (const u of s.unsubs) u();
    this.session = null;
  }

  /** Leaves the room: this page's run ends here (the others are told), the transport closes. */
  leave(): void {
    const live = this.live;
    if (live) {
      this.broadcast({ t: 'quit', id: live.id, reason: 'left the group' });
      this.cancel(live, 'this page left the group');
    }
    const t = this.session?.t;
    this.detach();
    t?.close();
    this.store.getState().left();
  }

  dispose(): void {
    this.leave();
  }

  private refreshRoster(): void {
    if (this.session) this.store.getState().setRoster(this.session.t.roster());
  }

  private present(p: PeerId): boolean {
    return p === this.selfId || (this.session?.t.peers().includes(p) ?? false);
  }

  private broadcast(m: SessionMessage): void {
    const s = this.session;
    if (!s) return;
    for (const p of s.t.peers()) s.split.sendSession(p, m);
  }

  private peerJoined(p: PeerId): void {
    this.store.getState().notice('info', `${shortPeer(p)} joined the group`);
    this.refreshRoster();
    const live = this.live;
    // A newcomer learns what the group trains (data parallel: it joins at the next step).
    if (live && live.cancelled === null) this.session?.split.sendSession(p, this.announcement(live));
  }

  private peerLeft(p: PeerId): void {
    const s = this.store.getState();
    s.peerGone(p);
    s.notice('warn', `${shortPeer(p)} left the group`);
    this.refreshRoster();
    const live = this.live;
    if (!live) return;
    if (live.role === 'joiner' && live.completed === 0 && !live.members.some((m) => this.present(m) && m !== this.selfId)) {
      this.cancel(live, 'the members of the run left before this page could join it');
    }
    live.wake?.();
  }

  private problem(p: PeerProblem): void {
    const s = this.store.getState();
    switch (p.kind) {
      case 'bad-message':
        return s.countRejected();
      case 'auth-failed':
      case 'denied':
        return s.notice('error', p.message);
      case 'timeout':
      case 'server':
        return s.notice('warn', p.message);
      case 'connection':
        return; // a closing link: the leave notice says it
    }
  }

  private rejected(from: PeerId, why: string): void {
    const s = this.store.getState();
    s.countRejected();
    if (this.session && !this.session.reported.has(from)) {
      this.session.reported.add(from);
      s.notice('warn', `rejected a message from ${shortPeer(from)}: ${why} (further ones are only counted)`);
    }
  }

  // ---- session messages -----------------------------------------------------------------------

  private onSession(from: PeerId, m: SessionMessage): void {
    const live = this.live?.id === m.id ? this.live : null;
    switch (m.t) {
      case 'run':
        return this.onRun(from, m);
      case 'ready':
        if (live) {
          live.ready.add(from);
          live.wake?.();
        }
        return;
      case 'step':
        this.store.getState().peerReport(from, m);
        if (live && !live.stepping) {
          live.stepping = true;
          live.wake?.();
        }
        return;
      case 'stop':
        if (live) this.applyStop(live, m.after, `stopped by ${shortPeer(from)}${m.reason ? ` (${m.reason})` : ''}`);
        return;
      case 'quit':
        if (!live) return;
        live.quits.set(from, m.reason);
        this.store.getState().notice('warn', `${shortPeer(from)} left the run: ${m.reason}`);
        if (isTensorParallel(live.config) && live.members.includes(from) && live.cancelled === null) {
          this.fail(live, `${shortPeer(from)} left the run (${m.reason}); tensor parallelism needs the shard of every member`);
        }
        live.wake?.();
        return;
    }
  }

  private onRun(from: PeerId, m: RunMessage): void {
    const s = this.store.getState();
    if (m.by !== from) return this.rejected(from, `a run announced on behalf of ${shortPeer(m.by)}`);
    if (this.past.has(m.id)) return;
    const live = this.live;
    if (live) {
      if (live.id === m.id) return;
      // Two Starts at once: every member keeps the run with the smaller id, so all pick the same.
      if (live.looping || live.id < m.id) {
        this.past.add(m.id);
        s.notice('warn', `${shortPeer(from)} started another run while this page trains one; ignored`);
        this.broadcastTo(m.members, { t: 'quit', id: m.id, reason: 'busy with another run' });
        return;
      }
      this.cancel(live, 'another member started a run at the same moment; joining that one');
    }
    const problem = groupConfigProblem(m.config, m.members.length);
    if (problem) {
      this.past.add(m.id);
      s.notice('error', `${shortPeer(from)} started a run this page cannot train: ${problem}`);
      this.broadcastTo(m.members, { t: 'quit', id: m.id, reason: problem.slice(0, 300) });
      return;
    }
    const self = this.selfId!;
    if (m.members.includes(self)) return this.begin(m, 'member');
    if (!isTensorParallel(m.config)) return this.begin(m, 'joiner');
    this.past.add(m.id);
    s.notice('info', `${shortPeer(from)} trains ${GROUP_MODES[m.config.mode].label} across ${m.members.length} members; its members are fixed, so this page can take part in the group's next run`);
  }

  private broadcastTo(peers: PeerId[], m: SessionMessage): void {
    for (const p of peers) if (p !== this.selfId) this.session?.split.sendSession(p, m);
  }

  private announcement(live: LiveRun): RunMessage {
    return { t: 'run', v: SESSION_VERSION, id: live.id, config: live.config, members: live.members, by: this.selfId! };
  }

  // ---- runs -----------------------------------------------------------------------------------

  /** Starts the draft run on every member of the group (or says why it cannot). */
  start(): boolean {
    const s = this.store.getState();
    const self = this.selfId;
    if (!this.session || !self) {
      s.notice('error', 'create or join a group first');
      return false;
    }
    if (this.live) {
      s.notice('error', 'this page is already training a group run: stop it first');
      return false;
    }
    const members = [self, ...this.session.t.peers()].sort();
    const problem = groupConfigProblem(s.draft, members.length);
    if (problem) {
      s.notice('error', `cannot start: ${problem}`);
      return false;
    }
    const m: RunMessage = { t: 'run', v: SESSION_VERSION, id: `g${createRoomId().slice(0, 12)}`, config: { ...s.draft }, members, by: self };
    this.broadcast(m);
    this.begin(m, 'member');
    return true;
  }

  /**
   * Stops the group's run on every member at the same step (before the first step: at once). A
   * page still waiting to join a running group only withdraws itself.
   */
  stop(): void {
    const live = this.live;
    if (!live || live.cancelled !== null) return;
    if (live.role === 'joiner' && live.completed === 0) {
      this.broadcast({ t: 'quit', id: live.id, reason: 'stopped before joining' });
      return this.cancel(live, 'stopped here before joining the group');
    }
    const after = live.looping ? live.completed + 2 : 0;
    this.broadcast({ t: 'stop', id: live.id, after, reason: 'Stop pressed' });
    this.applyStop(live, after, 'stopped here');
  }

  private applyStop(live: LiveRun, after: number, reason: string): void {
    if (!live.looping) return this.cancel(live, reason);
    if (after >= live.stopAfter) return; // an earlier stop stands
    live.stopAfter = after;
    live.stopReason = reason;
    this.store.getState().updateRun(live.id, { status: 'stopping', phase: `${reason}: stopping after step ${Math.max(after, live.completed + 1)}` });
  }

  private cancel(live: LiveRun, reason: string): void {
    if (live.cancelled !== null) return;
    live.cancelled = reason;
    live.abort?.(reason);
    live.wake?.();
  }

  private fail(live: LiveRun, message: string): void {
    live.failure ??= message;
    this.cancel(live, message);
  }

  private begin(m: RunMessage, role: LiveRun['role']): void {
    const live: LiveRun = {
      id: m.id, config: m.config, members: [...m.members].sort(), startedBy: m.by, role,
      ready: new Set(), quits: new Map(), stepping: false, looping: false, completed: 0,
      stopAfter: Number.POSITIVE_INFINITY, stopReason: null, cancelled: null, failure: null, abort: null, wake: null, firstStepAt: null,
    };
    // A joiner whose group already reported steps may ask in at once.
    live.stepping = Object.entries(this.store.getState().reports).some(([p, r]) => r.runId === m.id && this.present(p));
    this.live = live;
    this.past.add(m.id);
    const s = this.store.getState();
    // The run's config whole: a field it leaves out (a custom model, DiLoCo's) is not kept from this page's draft.
    s.setDraft({ ...m.config, model: m.config.model, diloco: m.config.diloco });
    s.addRun({ id: m.id, config: m.config, startedBy: m.by, members: live.members, joinedLate: role === 'joiner' });
    if (m.by !== this.selfId) s.notice('info', `${shortPeer(m.by)} started a run: ${GROUP_MODES[m.config.mode].label}, ${m.config.preset}, ${m.config.steps} steps`);
    void this.execute(live);
  }

  private phase(live: LiveRun, status: GroupRunStatus, phase: string): void {
    const run = this.store.getState().runs.find((r) => r.id === live.id);
    // A stop already shown keeps its status until the run ends.
    if (run && isActiveRun(run) && run.status !== 'stopping') this.store.getState().updateRun(live.id, { status, phase });
  }

  private async execute(live: LiveRun): Promise<void> {
    const s = this.store.getState();
    try {
      this.phase(live, 'preparing', 'acquiring the GPU and the training text');
      const [rt, text] = await Promise.all([this.runtime(), this.loadText()]);
      if (live.cancelled === null) {
        if (isTensorParallel(live.config)) await trainTp(this.host, live, rt, text);
        else await trainDp(this.host, live, rt, text);
      }
      if (live.failure !== null) throw new Error(live.failure);
      const complete = live.completed >= live.config.steps;
      const why = live.cancelled ?? live.stopReason ?? 'stopped';
      s.updateRun(live.id, { status: complete ? 'done' : 'stopped', phase: complete ? `completed ${live.config.steps} steps` : `${why} after ${live.completed} steps` });
    } catch (e) {
      const error = runError(e, { failure: live.failure, tensorParallel: isTensorParallel(live.config), completed: live.completed });
      s.updateRun(live.id, { status: 'error', phase: error.title, error });
      s.notice('error', `${error.title}: ${error.message}`);
      // Members waiting for this one (ready barrier, a tensor-parallel collective) learn it at once.
      this.broadcast({ t: 'quit', id: live.id, reason: `${error.title}: ${error.message}`.slice(0, 300) });
    } finally {
      if (this.live === live) this.live = null;
    }
  }

  // ---- GPU and data ---------------------------------------------------------------------------

  private runtime(): Promise<Runtime> {
    this.rt ??= this.deps.runtime().then(
      (rt) => {
        // A validation error or a lost device ruins the run on the GPU: end it with the reason.
        const failActive = (message: string) => {
          if (this.live) this.fail(this.live, message);
        };
        rt.device.addEventListener?.('uncapturederror', (ev) => failActive(`GPU error: ${(ev as GPUUncapturedErrorEvent).error.message}`));
        void rt.gpu.lost.then((info) => {
          this.rt = null;
          failActive(new DeviceLostError(info.message || info.reason || 'unknown').message);
        });
        return rt;
      },
      (e: unknown) => {
        this.rt = null;
        throw e;
      },
    );
    return this.rt;
  }

  private loadText(): Promise<string> {
    this.text ??= this.deps.loadText().catch((e: unknown) => {
      this.text = null;
      throw e;
    });
    return this.text;
  }
}
