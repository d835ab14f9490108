/**
 * A group run's training on this member: data parallel (a DataParallel driver over the member's
 * own Trainer) or tensor parallel (this member's TpTrainer shard), each driven by the engine's
 * training loop (runTraining); what they report goes to the group store and the other members.
 * The controller (group-controller.ts) owns the room, the session messages and the run's life.
 */
import { type DataParallelOptions, type DpEvent, DpError, type DpStepStats } from '../../parallel/dp/dp';
import { crc32 } from '../../peers/collectives/crc32';
import { createParallelTrainer, type GroupMember, memberInit } from '../../parallel/factory';
import { CollectiveError, PeerGroup } from '../../peers/collectives/group';
import { tpStepWireBytes } from '../../parallel/tp/group';
import type { PeerId, Transport } from '../../peers/transport/transport';
import type { Runtime } from '../../engine/gpu/runtime';
import type { TpStepMetrics, TpTrainer } from '../../parallel/tp/trainer';
import type { CheckpointFiles } from '../../engine/io/checkpoint';
import { cadenceOf, trainOptionsOf } from '../../engine/run/spec';
import { type LoopControl, runTraining } from '../../engine/train/loop';
import type { RunTrainer } from '../../engine/train/run-trainer';
import { type GroupRunStatus, type GroupStepPoint, type GroupStore, shortPeer } from './group';
import { type GroupRunConfig, groupRunSpec, groupStepTokens } from './config';
import type { SessionMessage } from './wire';
import { adapterKeyOf, adoptSharedTable, applySharedForTraining, resetRunChoices, shareableTable, type TuneCache } from '../../engine/tune';
import { loadTuneCacheIdb, saveTuneCacheIdb } from '../../engine/tune/idb';

/** What a run's training needs of the controller. */
export interface GroupTrainingHost {
  readonly store: GroupStore;
  selfId(): PeerId | null;
  /** The room's training transport (null once this page left the room). */
  training(): Transport | null;
  present(p: PeerId): boolean;
  broadcast(m: SessionMessage): void;
  broadcastTo(peers: PeerId[], m: SessionMessage): void;
  phase(live: LiveRun, status: GroupRunStatus, phase: string): void;
  /** The run's checkpoint at its end (the member's own weights: data parallel's are the group's; tensor parallel's gathered). */
  keepCheckpoint(live: LiveRun, step: number, files: CheckpointFiles): void;
  /** Called before building a model, which may block this thread (GroupDeps.buildBlocksMs). */
  beforeBuild(): Promise<void>;
  readonly dp?: Pick<DataParallelOptions, 'silenceMs' | 'joinTimeoutMs' | 'collectiveTimeoutMs' | 'heartbeatMs'>;
  readonly tpTimeoutMs?: number;
}

/** This page's part in one group run. */
export interface LiveRun {
  id: string;
  config: GroupRunConfig;
  /** The members announced at the start. */
  members: PeerId[];
  startedBy: PeerId;
  /** 'member': announced at the start; 'joiner': joins the running group (data parallel only). */
  role: 'member' | 'joiner';
  ready: Set<PeerId>;
  quits: Map<PeerId, string>;
  /** A member reported a step: the group runs, a joiner may ask in. */
  stepping: boolean;
  /** This member's step loop has begun (the driver or the shard exists). */
  looping: boolean;
  /** Steps this member has completed (its trainer's step index). */
  completed: number;
  /** Stop once this many steps are done (a group-wide stop), and why. */
  stopAfter: number;
  stopReason: string | null;
  /** Set when this page leaves the run early (stop before the first step, leaving the room), with why. */
  cancelled: string | null;
  /** Set when the run cannot go on (e.g. a tensor-parallel member quit): ends as an error with this text. */
  failure: string | null;
  /** Interrupts a collective in flight (stops the driver / closes the group). */
  abort: ((reason: string) => void) | null;
  /** Wakes waitFor() to re-check its condition. */
  wake: (() => void) | null;
  /** performance.now() when this member's first step of the run began (its points' time axis). */
  firstStepAt: number | null;
}

/** A step's measurements, before record() adds the time axis and the group's token count. */
type MeasuredStep = Omit<GroupStepPoint, 'elapsedMs' | 'tokens'>;

async function waitFor(live: LiveRun, cond: () => boolean): Promise<void> {
  while (!cond() && live.cancelled === null) await new Promise<void>((resolve) => (live.wake = resolve));
  live.wake = null;
}

export async function trainDp(host: GroupTrainingHost, live: LiveRun, rt: Runtime, text: string): Promise<void> {
  const { config } = live;
  const self = host.selfId()!;
  host.phase(live, 'preparing', 'building the model (compiling GPU pipelines)');
  await host.beforeBuild();
  const spec = groupRunSpec(config, 1);
  const tuning = await groupTuning(rt, trainOptionsOf(spec));
  // This member's own trainer, built before joining (compiling blocks); the group's member wraps it below.
  const trainer = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts: trainOptionsOf(spec), text, init: memberInit(spec.strategy) });
  let dp: GroupMember | null = null;
  try {
    if (live.role === 'member') {
      live.ready.add(self);
      host.broadcastTo(live.members, { t: 'ready', id: live.id });
      host.phase(live, 'waiting', 'waiting for the other members to build their model');
      await waitFor(live, () => live.members.every((p) => live.ready.has(p) || live.quits.has(p) || !host.present(p)));
    } else {
      host.phase(live, 'waiting', "waiting for the group's next step to ask to join");
      await waitFor(live, () => live.stepping);
    }
    const transport = host.training();
    if (live.cancelled !== null || !transport) return;
    const members = live.role === 'member' ? live.members.filter((p) => p === self || (host.present(p) && !live.quits.has(p))) : undefined;
    // Data parallel or DiLoCo, as the spec's strategy says; the gradient wire format is the trainer's plan's.
    const options = { ...host.dp, run: live.id, members, onEvent: (e: DpEvent) => dpEvent(host, live, e), tuneShare: tuning };
    const driver = await createParallelTrainer({ strategy: spec.strategy, trainer, transport, options });
    dp = driver;
    live.abort = (why) => driver.stop(why);
    live.looping = true;
    const training = live.role === 'joiner' ? 'asking to join: the group admits newcomers at its next step' : 'training';
    await runTraining(driver, cadenceOf(spec), {
      onPhase: (p) => p === 'training' && host.phase(live, 'training', training),
      onCheckpoint: (step, files) => host.keepCheckpoint(live, step, files),
      onStep: (st) => {
        live.completed = driver.stepIndex;
        recordDp(host, live, st);
      },
    }, stopControl(live, driver));
  } catch (e) {
    // Stopping the driver from here (leaving, a cancel) fails its step in flight: that is the stop, not an error.
    if (!(live.cancelled !== null && live.failure === null && e instanceof DpError && e.code === 'stopped')) throw e;
  } finally {
    dp?.stop(live.cancelled ?? live.stopReason ?? 'the run is over on this member');
    dp?.destroy();
    trainer.destroy();
  }
}

/**
 * This member's kernel tuning for a group run (engine/tune): the page's cache (IndexedDB) applies to
 * the model about to be built, a group member's shared picks only after their check on this device;
 * its own table goes to the group (parallel/dp/tune-share.ts), and the members' tables are taken
 * into the cache (entry by entry) for the next run on this GPU.
 */
async function groupTuning(rt: Runtime, opts: ReturnType<typeof trainOptionsOf>): Promise<NonNullable<DataParallelOptions['tuneShare']>> {
  const { cache, problem } = await loadTuneCacheIdb();
  const adapter = adapterKeyOf(rt.gpu.adapterInfo);
  cache.applyTo(rt.device, adapter);
  const shared = await applySharedForTraining(rt, opts, cache);
  const keep = (c: TuneCache) => (problem ? Promise.resolve() : saveTuneCacheIdb(c).catch(() => {}));
  if (shared.failed.length) await keep(cache);
  resetRunChoices(rt);
  return {
    table: shareableTable(cache, adapter),
    accept: (from, t) => {
      const out = adoptSharedTable(rt, cache, t, from);
      if (out.added.length) void keep(cache);
      return out;
    },
  };
}

/** A group-wide stop ends the loop at its step; leaving or a failure at once. */
function stopControl(live: LiveRun, t: RunTrainer<{ step: number }>): LoopControl {
  return { stopRequested: () => live.cancelled !== null || t.stepIndex >= live.stopAfter };
}

function recordDp(host: GroupTrainingHost, live: LiveRun, st: DpStepStats): void {
  record(host, live, {
    step: st.step, loss: st.groupLoss ?? st.loss, world: st.world, wireBytes: st.exchangeBytesSent, fp32WireBytes: st.fp32ExchangeBytes,
    bytesSent: st.bytesSent, bytesReceived: st.bytesReceived, commMs: Math.max(0, st.commMs), computeMs: st.busyMs, stepMs: st.stepMs, hash: st.weightsHash,
  }, st.members);
}

function dpEvent(host: GroupTrainingHost, live: LiveRun, e: DpEvent): void {
  const s = host.store.getState();
  const who = e.peers.map(shortPeer).join(', ');
  switch (e.kind) {
    case 'dropped':
      return s.notice('warn', `${who} dropped from the run at step ${e.step}: the others go on, the data re-sharded`);
    case 'admitted':
      return s.notice('info', `${who} join${e.peers.length === 1 ? 's' : ''} the run at step ${e.step}`);
    case 'state-received':
      s.updateRun(live.id, { caughtUpAt: e.step });
      return s.notice('info', `caught up: received the weights, Adam moments and step ${e.step} from ${who}`);
    case 'state-sent':
      return s.notice('info', `sent the run's state to ${who} (${e.message})`);
    case 'state-rejected':
      return s.notice('error', `state from ${who} rejected: ${e.message}`);
    case 'refused':
      return s.notice('warn', e.message);
    case 'fault':
      return s.notice('warn', e.message);
    case 'reject':
      return s.countRejected();
    case 'screened':
    case 'suspect':
      return s.notice('warn', e.message);
    case 'removed':
      return s.notice('error', `${e.message}: the others go on without it`);
    case 'outvoted':
      return s.notice('warn', `${who}: a state the majority does not vouch for was offered at step ${e.step}; not adopted`);
    case 'tuning':
      return s.notice('info', e.message);
    case 'formed':
    case 'welcomed':
    case 'stopped':
      return;
  }
}

export async function trainTp(host: GroupTrainingHost, live: LiveRun, rt: Runtime, text: string): Promise<void> {
  const transport = host.training();
  if (!transport) return;
  const { config, members } = live;
  const group = new PeerGroup(transport, {
    runId: crc32(new TextEncoder().encode(`tp-run:${live.id}`)), members, timeoutMs: host.tpTimeoutMs ?? 600_000,
    onReject: () => host.store.getState().countRejected(),
  });
  live.abort = () => group.close();
  let tp: TpTrainer | null = null;
  try {
    host.phase(live, 'preparing', "building this member's shard (compiling GPU pipelines); the first exchange waits for every member");
    await host.beforeBuild();
    const spec = groupRunSpec(config, members.length);
    if (spec.strategy.kind !== 'tp') throw new Error(`a tensor-parallel run of mode '${config.mode}' has strategy ${spec.strategy.kind}`);
    tp = await createParallelTrainer({ strategy: spec.strategy, rt, opts: trainOptionsOf(spec), text, group });
    if (live.cancelled !== null) return;
    live.looping = true;
    const rank = tp;
    const fp32Bytes = tpStepWireBytes(rank.model.dims, { ...rank.tp.tp, codec: 'fp32' });
    await runTraining(rank, cadenceOf(spec), {
      onPhase: (p) => p === 'training' && host.phase(live, 'training', 'training'),
      onCheckpoint: (step, files) => host.keepCheckpoint(live, step, files),
      onStep: (m) => {
        live.completed = rank.stepIndex;
        recordTp(host, live, m, group.size, fp32Bytes);
      },
    }, stopControl(live, rank));
  } catch (e) {
    if (!(live.cancelled !== null && live.failure === null && e instanceof CollectiveError && e.code === 'closed')) throw e;
  } finally {
    tp?.destroy();
    group.close();
  }
}

function recordTp(host: GroupTrainingHost, live: LiveRun, m: TpStepMetrics, world: number, fp32Bytes: number): void {
  record(host, live, {
    step: m.step, loss: m.loss, world, wireBytes: m.comm.bytesSent, fp32WireBytes: fp32Bytes, bytesSent: m.comm.bytesSent,
    bytesReceived: m.comm.bytesReceived, commMs: m.comm.commSeconds * 1000, computeMs: m.comm.computeSeconds * 1000,
    stepMs: (m.comm.commSeconds + m.comm.computeSeconds) * 1000, hash: null,
  }, live.members);
}

function record(host: GroupTrainingHost, live: LiveRun, m: MeasuredStep, members: PeerId[]): void {
  const now = performance.now();
  live.firstStepAt ??= now - m.stepMs;
  const p: GroupStepPoint = { ...m, elapsedMs: now - live.firstStepAt, tokens: groupStepTokens(live.config, m.world) };
  const s = host.store.getState();
  const stopping = s.runs.find((r) => r.id === live.id)?.status === 'stopping';
  const phase = `step ${p.step + 1} / ${live.config.steps} · ${p.world} member${p.world === 1 ? '' : 's'}`;
  s.addPoint(live.id, p, stopping ? { members: [...members] } : { members: [...members], phase });
  host.broadcast({ t: 'step', id: live.id, step: p.step, world: p.world, loss: p.loss, hash: p.hash, stepMs: p.stepMs, commMs: p.commMs, computeMs: p.computeMs });
}
