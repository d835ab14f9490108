/**
 * The peer-group panel's store (zustand vanilla, like the lab's): the room this page is in, the
 * roster, the run configuration, this session's group runs with their per-step points, and notices.
 * Only data and small pure transitions live here; the transport and the training loops are the
 * controller's (group-controller.ts), which feeds this store.
 */
import { createStore, type StoreApi } from 'zustand/vanilla';
import { describeIce, parseIce } from '../../peers/transport/ice';
import { type ParsedRoomLink, parseRoomLink } from '../../peers/room/room';
import type { PeerRole, RosterEntry } from '../../peers/room/roster';
import type { PeerId } from '../../peers/transport/transport';
import { DEFAULT_GROUP_CONFIG, type GroupRunConfig, groupRunLabel } from './config';
import type { StepMessage } from './wire';

export type GroupPhase = 'idle' | 'connecting' | 'joined';

export interface GroupRoom {
  id: string;
  /** The link that joins the room (the secret). */
  link: string;
  role: PeerRole;
  selfId: PeerId;
  hasPassphrase: boolean;
  /** The PeerServer, as a URL. */
  server: string;
}

/** A peer's latest step report (session 'step' message). */
export interface PeerReport {
  runId: string;
  step: number;
  world: number;
  loss: number | null;
  hash: number | null;
  stepMs: number;
  commMs: number;
  computeMs: number;
  at: number;
}

/** One step of a group run as this member measured it. */
export interface GroupStepPoint {
  step: number;
  /** The loss of the step's whole batch (data parallel: mean over members); null for a step received as state. */
  loss: number | null;
  world: number;
  /** Bytes of the exchange this member sent (data parallel: the gradient all-reduce; tensor parallel: every layer's all-reduces). */
  wireBytes: number;
  /** What the fp32 exchange would have sent for the same step (the drivers' exact prediction). */
  fp32WireBytes: number;
  /** All transport bytes of the step, each way (exchange, reports, heartbeats, state hand-over). */
  bytesSent: number;
  bytesReceived: number;
  commMs: number;
  computeMs: number;
  stepMs: number;
  /** Wall-clock ms from the start of this member's first step of the run to the end of this one. */
  elapsedMs: number;
  /** Tokens the whole group trained in the step (groupStepTokens). */
  tokens: number;
  /** crc32 of the weights after the step (data parallel; null for tensor parallel, whose members hold different shards). */
  hash: number | null;
}

export type GroupRunStatus = 'preparing' | 'waiting' | 'training' | 'stopping' | 'done' | 'stopped' | 'error';
const ACTIVE: readonly GroupRunStatus[] = ['preparing', 'waiting', 'training', 'stopping'];

export interface GroupRun {
  id: string;
  /** Numbered label, e.g. "#2 DP AGoQ int8 · micro". */
  label: string;
  config: GroupRunConfig;
  startedBy: PeerId;
  /** The run's current members (data parallel: as of the last step). */
  members: PeerId[];
  /** This member joined the run after it started (and received the group's state). */
  joinedLate: boolean;
  status: GroupRunStatus;
  phase: string;
  points: GroupStepPoint[];
  /** Step after which this member received the group's state (a late joiner catching up). */
  caughtUpAt: number | null;
  error: { title: string; message: string } | null;
  /** The step of the checkpoint this page keeps of the run (its end; null: none). */
  checkpointStep: number | null;
}

export type NoticeLevel = 'info' | 'warn' | 'error';
export interface GroupNotice {
  id: number;
  level: NoticeLevel;
  text: string;
  at: number;
}

const MAX_NOTICES = 60;
/** Points kept per run: when a long run reaches it, every other point is dropped (the curve keeps its whole span, coarser). */
export const MAX_POINTS = 4000;

export interface GroupState {
  /** The room named by this page's URL (?room=), offered for joining. */
  invite: ParsedRoomLink | null;
  /** Why this page's ?room= link could not be read. */
  inviteError: string | null;
  phase: GroupPhase;
  room: GroupRoom | null;
  /** Why creating or joining failed (wrong passphrase, no PeerServer...). */
  joinError: string | null;
  roster: RosterEntry[];
  reports: Record<PeerId, PeerReport>;
  draft: GroupRunConfig;
  runs: GroupRun[];
  notices: GroupNotice[];
  /** Malformed or unexpected messages received (counted, dropped). */
  rejected: number;
  /** ICE servers for the next create/join (src/peers/transport/ice.ts spec), and where they came from. */
  ice: IceSetting;

  setDraft(patch: Partial<GroupRunConfig>): void;
  setIce(ice: IceSetting): void;
  connecting(): void;
  joined(room: GroupRoom): void;
  joinFailed(message: string): void;
  left(): void;
  setRoster(roster: RosterEntry[]): void;
  peerReport(from: PeerId, m: StepMessage): void;
  peerGone(peer: PeerId): void;
  addRun(r: Pick<GroupRun, 'id' | 'config' | 'startedBy' | 'members' | 'joinedLate'>): void;
  updateRun(id: string, patch: Partial<Pick<GroupRun, 'status' | 'phase' | 'members' | 'caughtUpAt' | 'error' | 'checkpointStep'>>): void;
  /** A step of run `id` with the run's members and phase after it, in one update (one render per step). */
  addPoint(id: string, p: GroupStepPoint, patch?: Partial<Pick<GroupRun, 'members' | 'phase'>>): void;
  notice(level: NoticeLevel, text: string): void;
  countRejected(): void;
  dismissNotices(): void;
}

export type GroupStore = StoreApi<GroupState>;

export function isActiveRun(r: GroupRun | undefined): r is GroupRun {
  return !!r && ACTIVE.includes(r.status);
}

/** The run this page is taking part in now, if any (always the newest). */
export function activeRun(s: Pick<GroupState, 'runs'>): GroupRun | null {
  const r = s.runs.at(-1);
  return isActiveRun(r) ? r : null;
}

/** The weights hash after each step that has one, as `step:hash` (hex), for display and checks. */
export function hashTrail(points: readonly GroupStepPoint[], last = 64): string {
  return points
    .filter((p) => p.hash !== null)
    .slice(-last)
    .map((p) => `${p.step}:${hashHex(p.hash!)}`)
    .join(',');
}

/** A peer id in a few characters (PeerJS ids are `<room tag>-<random>`; the tag is the same for everyone). */
export function shortPeer(id: PeerId): string {
  return (id.split('-').at(-1) ?? id).slice(0, 6);
}

export function hashHex(h: number): string {
  return (h >>> 0).toString(16).padStart(8, '0');
}

export interface WireSummary {
  steps: number;
  /** Exchange bytes this member sent over the steps that measured them, and fp32's for the same steps. */
  wire: number;
  fp32: number;
  ratio: number | null;
  /** Exchange bytes this member sent per token the group trained, over every step (DiLoCo's inner steps send none). */
  bytesPerToken: number | null;
  /** Share of the steps' wall-clock time spent communicating (commMs / stepMs, summed). */
  commShare: number | null;
}

/** A run's exchange against fp32's, per trained token, and its time waiting on the network. */
export function wireSummary(points: readonly GroupStepPoint[]): WireSummary {
  const measured = points.filter((p) => p.fp32WireBytes > 0);
  const sum = (ps: readonly GroupStepPoint[], f: (p: GroupStepPoint) => number) => ps.reduce((a, p) => a + f(p), 0);
  const wire = sum(measured, (p) => p.wireBytes);
  const fp32 = sum(measured, (p) => p.fp32WireBytes);
  const tokens = sum(points, (p) => p.tokens);
  const time = sum(points, (p) => p.stepMs);
  return {
    steps: points.length,
    wire,
    fp32,
    ratio: fp32 > 0 ? wire / fp32 : null,
    bytesPerToken: tokens > 0 ? sum(points, (p) => p.wireBytes) / tokens : null,
    commShare: time > 0 ? Math.min(1, sum(points, (p) => p.commMs) / time) : null,
  };
}

/** The room a page URL invites to (?room=), or why its link is malformed. */
export function inviteOf(pageUrl: string): { invite: ParsedRoomLink | null; inviteError: string | null } {
  if (!new URL(pageUrl).searchParams.has('room')) return { invite: null, inviteError: null };
  try {
    return { invite: parseRoomLink(pageUrl), inviteError: null };
  } catch (e) {
    return { invite: null, inviteError: (e as Error).message };
  }
}

export interface IceSetting {
  spec: string;
  relayOnly: boolean;
  /** 'link': the page URL's ?ice= / ?relay=1; 'server': the server's /lab-config.json; 'panel': typed here. */
  from: 'link' | 'server' | 'panel' | null;
}

/** Why an ICE setting cannot be used (null when it can), and a one-line summary without credentials. */
export function iceCheck(i: IceSetting): { problem: string | null; summary: string } {
  try {
    return { problem: null, summary: describeIce(parseIce(i.spec, i.relayOnly)) };
  } catch (e) {
    return { problem: (e as Error).message, summary: 'invalid ICE servers' };
  }
}

/** The ICE setting a page URL carries (?ice=SPEC, ?relay=1), or null when it names none. */
export function iceOf(pageUrl: string): IceSetting | null {
  const q = new URL(pageUrl).searchParams;
  if (!q.has('ice') && !q.has('relay')) return null;
  return { spec: q.get('ice') ?? '', relayOnly: q.get('relay') === '1', from: 'link' };
}

export function createGroupStore(init: { invite?: ParsedRoomLink | null; inviteError?: string | null; ice?: IceSetting | null } = {}, now: () => number = Date.now): GroupStore {
  let noticeId = 0;
  let runNumber = 0;
  const mapRun = (s: GroupState, id: string, f: (r: GroupRun) => GroupRun) => ({ runs: s.runs.map((r) => (r.id === id ? f(r) : r)) });
  return createStore<GroupState>()((set, get) => ({
    invite: init.invite ?? null,
    inviteError: init.inviteError ?? null,
    phase: 'idle',
    room: null,
    joinError: null,
    roster: [],
    reports: {},
    draft: { ...DEFAULT_GROUP_CONFIG },
    ice: init.ice ?? { spec: '', relayOnly: false, from: null },
    runs: [],
    notices: [],
    rejected: 0,

    setDraft: (patch) => set({ draft: { ...get().draft, ...patch } }),
    setIce: (ice) => set({ ice }),
    connecting: () => set({ phase: 'connecting', joinError: null }),
    joined: (room) => set({ phase: 'joined', room, joinError: null, invite: null }),
    joinFailed: (message) => set({ phase: 'idle', room: null, joinError: message, roster: [] }),
    // The room just left stays offered, so the page can join it again (under a new id).
    left: () => set((s) => ({ phase: 'idle', room: null, roster: [], reports: {}, invite: s.room ? inviteOf(s.room.link).invite : s.invite })),
    setRoster: (roster) => set({ roster }),
    peerReport: (from, m) =>
      set((s) => ({
        reports: {
          ...s.reports,
          [from]: { runId: m.id, step: m.step, world: m.world, loss: m.loss, hash: m.hash, stepMs: m.stepMs, commMs: m.commMs, computeMs: m.computeMs, at: now() },
        },
      })),
    peerGone: (peer) =>
      set((s) => {
        if (!(peer in s.reports)) return {};
        const { [peer]: _gone, ...reports } = s.reports;
        return { reports };
      }),
    addRun: (r) =>
      set((s) => ({
        runs: [
          ...s.runs,
          { ...r, label: `#${++runNumber} ${groupRunLabel(r.config)}`, status: 'preparing', phase: 'starting', points: [], caughtUpAt: null, error: null, checkpointStep: null },
        ],
      })),
    updateRun: (id, patch) => set((s) => mapRun(s, id, (r) => ({ ...r, ...patch }))),
    addPoint: (id, p, patch = {}) =>
      set((s) =>
        mapRun(s, id, (r) => {
          const points = r.points.length >= MAX_POINTS ? [...r.points.filter((_, i) => i % 2 === 1), p] : [...r.points, p];
          return { ...r, ...patch, points };
        }),
      ),
    notice: (level, text) => set((s) => ({ notices: [...s.notices, { id: ++noticeId, level, text, at: now() }].slice(-MAX_NOTICES) })),
    countRejected: () => set((s) => ({ rejected: s.rejected + 1 })),
    dismissNotices: () => set({ notices: [] }),
  }));
}

const GROUP_CSV_COLUMNS = ['step', 'loss', 'world', 'wireBytes', 'fp32WireBytes', 'bytesSent', 'bytesReceived', 'commMs', 'computeMs', 'stepMs', 'elapsedMs', 'tokens', 'hash'] as const;

/** A group run's steps as CSV (this member's view), like a single run's export; the hash as hex. */
export function groupRunCsv(run: GroupRun): string {
  const rows = [GROUP_CSV_COLUMNS.join(',')];
  for (const p of run.points) rows.push(GROUP_CSV_COLUMNS.map((c) => (c === 'hash' ? (p.hash === null ? '' : hashHex(p.hash)) : (p[c] ?? ''))).join(','));
  return rows.join('\n') + '\n';
}

export function groupRunJson(run: GroupRun): string {
  return JSON.stringify({ ...run, points: run.points.map((p) => ({ ...p, hash: p.hash === null ? null : hashHex(p.hash) })) }, null, 2) + '\n';
}
