/**
 * Membership by agreement (issue 38): the statements that decide a group's membership and start —
 * every member's STATUS at a sync, its end-of-step REPORT (joiners, accusations, weights hash) — are signed by their sender and echoed, so every honest member
 * decides from the same set of signed statements, never from what one member told it alone.
 *
 * Two rounds (Dolev–Strong with one relay round, as the verified all-reduce's echo):
 *  1. every member all-gathers its signed statement:
 *       statement = body ‖ public key (32 B) ‖ Ed25519 signature (64 B) over
 *       "wgpg-<domain>-v1\0" ‖ run id u32 ‖ group step u32 ‖ SHA-256(members, '\n'-joined) ‖ body
 *  2. every member all-gathers its echo: per rank, u32 length ‖ the statement it received from that
 *     rank in round 1 (length 0: none).
 * A sender's statements are the one it sent this member and those the *other* members relay for it
 * (its relay of itself counts for nothing: with one faulty member, what an honest member received is
 * in its echo to everyone, so every honest member ends with the same set). Two different validly
 * signed bodies from one sender are proof of equivocation, alike on every honest member: it is
 * removed. None: absent (withheld from everyone), also alike.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import { sameBytes } from '../../peers/collectives/digest';
import { CollectiveError, type PeerGroup, Skips } from '../../peers/collectives/group';
import { type Identity, PUBLIC_KEY_BYTES, SIGNATURE_BYTES, verifySignature } from '../../peers/room/identity';
import type { PeerId } from '../../peers/transport/transport';
import { decodeMember } from './step';
import { syncVerdict, type SyncVerdict } from './sync';
import { decodeReport, decodeStatus, type GroupStatus, type StepReport } from './wire';

export const STATEMENT_SIG_BYTES = PUBLIC_KEY_BYTES + SIGNATURE_BYTES;
const utf8 = new TextEncoder();

/** What a statement's signature covers beside its body: the domain, the group (run id, step, members). */
export function statementContext(domain: string, runId: number, step: number, members: readonly PeerId[]): Uint8Array {
  const prefix = utf8.encode(`wgpg-${domain}-v1\0`);
  const out = new Uint8Array(prefix.length + 8 + 32);
  out.set(prefix);
  const dv = new DataView(out.buffer);
  dv.setUint32(prefix.length, runId >>> 0, true);
  dv.setUint32(prefix.length + 4, step >>> 0, true);
  out.set(sha256(utf8.encode(members.join('\n'))), prefix.length + 8);
  return out;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const m = new Uint8Array(a.length + b.length);
  m.set(a);
  m.set(b, a.length);
  return m;
}

/** body ‖ public key ‖ signature over context ‖ body. */
export function signStatement(id: Identity, context: Uint8Array, body: Uint8Array): Uint8Array {
  const out = new Uint8Array(body.length + STATEMENT_SIG_BYTES);
  out.set(body);
  out.set(id.publicKey, body.length);
  out.set(id.sign(concat(context, body)), body.length + PUBLIC_KEY_BYTES);
  return out;
}

/** The body of `statement` when it is `peer`'s own signature (its key bound to its id) over it; else null. */
export function openStatement(id: Identity, peer: PeerId, context: Uint8Array, statement: Uint8Array): Uint8Array | null {
  if (statement.length <= STATEMENT_SIG_BYTES) return null;
  const n = statement.length - STATEMENT_SIG_BYTES;
  const body = statement.subarray(0, n);
  const key = statement.subarray(n, n + PUBLIC_KEY_BYTES);
  const sig = statement.subarray(n + PUBLIC_KEY_BYTES);
  if (!id.binds(peer, key) || !verifySignature(sig, concat(context, body), key)) return null;
  return body.slice();
}

/** An echo row: per rank, u32 LE length ‖ the statement held (0: none). */
export function encodeEcho(held: readonly (Uint8Array | null)[]): Uint8Array {
  const n = held.reduce((s, b) => s + 4 + (b?.length ?? 0), 0);
  const out = new Uint8Array(n);
  const dv = new DataView(out.buffer);
  let o = 0;
  for (const b of held) {
    dv.setUint32(o, b?.length ?? 0, true);
    if (b) out.set(b, o + 4);
    o += 4 + (b?.length ?? 0);
  }
  return out;
}

/** An echo row as received (null when malformed: its sender is then heard as relaying nothing). */
export function decodeEcho(row: Uint8Array, n: number): (Uint8Array | null)[] | null {
  const dv = new DataView(row.buffer, row.byteOffset, row.byteLength);
  const out: (Uint8Array | null)[] = [];
  let o = 0;
  for (let r = 0; r < n; r++) {
    if (o + 4 > row.length) return null;
    const len = dv.getUint32(o, true);
    if (o + 4 + len > row.length) return null;
    out.push(len ? row.subarray(o + 4, o + 4 + len) : null);
    o += 4 + len;
  }
  return o === row.length ? out : null;
}

export interface Agreed {
  /** Per rank: the one body every honest member holds signed (null: absent or an equivocator). */
  bodies: (Uint8Array | null)[];
  /** Ranks that signed two different bodies (proof, the same on every honest member). */
  equivocators: number[];
  /** Ranks of which no member holds a signed statement. */
  absent: number[];
  /** Ranks whose statement to this member, or echo row, did not verify or parse (named here only). */
  suspects: [number, string][];
}

/**
 * The decision from what this member holds: `direct[s]`, the statement rank s sent it (its own for
 * itself), and `rows[q]`, rank q's echo (null: none or malformed). `open(s, statement)`: the body
 * when it is validly signed by s.
 */
export function decideStatements(n: number, direct: readonly (Uint8Array | null)[], rows: readonly (readonly (Uint8Array | null)[] | null)[], open: (s: number, statement: Uint8Array) => Uint8Array | null): Agreed {
  const out: Agreed = { bodies: [], equivocators: [], absent: [], suspects: [] };
  for (let s = 0; s < n; s++) {
    const bodies: Uint8Array[] = [];
    const take = (st: Uint8Array | null | undefined, by: number): void => {
      if (!st) return;
      const b = open(s, st);
      if (!b) {
        out.suspects.push([by, by === s ? 'its signed statement does not verify' : `relayed a statement of rank ${s} that does not verify`]);
        return;
      }
      if (!bodies.some((x) => sameBytes(x, b))) bodies.push(b);
    };
    take(direct[s], s);
    // A relay by the sender itself adds nothing an honest member could not have missed.
    rows.forEach((row, q) => q !== s && take(row?.[s], q));
    if (bodies.length > 1) out.equivocators.push(s);
    else if (bodies.length === 0) out.absent.push(s);
    out.bodies.push(bodies.length === 1 ? bodies[0] : null);
  }
  return out;
}

export interface AgreeOptions {
  /** The signature's domain ('status'). */
  domain: string;
  /** Least wait for the last echo row once every other arrived, ms (default 2000; twice the round so far when longer). */
  graceMs?: number;
  /**
   * Least wait for the last statement of round 1 once every other arrived or is vouched for, ms
   * (default graceMs): twice this or twice the median arrival so far, whichever is longer; then the
   * member goes on without it (issue 38: one member withholding from everyone stalled the group).
   */
  lastSenderMs?: number;
  /**
   * When a member was last heard from (any frame, heartbeats too; Date.now ms). Given, the last
   * sender is given up on only once heard since the round began: a member that is alive and
   * silent in the round withholds, a silent one (still starting) is the silence watchdog's.
   */
  lastHeard?: (peer: PeerId) => number;
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/**
 * Runs both rounds on `g` at its next two tags (reserved: a faster member's echo may arrive during
 * round 1) and decides. Round 1 waits for every member except a sender whose statement an echo
 * already carries (withheld from this member only), and for the last one only 2 × max(lastSenderMs,
 * median arrival so far): a statement withheld from everyone then is absent on every honest member
 * alike (a late one that reached another member in time comes relayed in its echo). Round 2 waits
 * for the last row twice as long as the round has taken (at least twice the grace), then goes on:
 * with one faulty member, the rows that decide are the honest ones, which come.
 */
export async function agreeStatements(g: PeerGroup, body: Uint8Array, o: AgreeOptions): Promise<Agreed> {
  const id = g.transport.identity;
  if (!id) throw new Error('membership agreement: the transport has no signing identity');
  const N = g.size;
  const me = g.rank;
  const ctx = statementContext(o.domain, g.runId, g.step, g.members);
  const open = (s: number, st: Uint8Array) => openStatement(id, g.members[s], ctx, st);
  const mine = signStatement(id, ctx, body);
  const base = g.reserveTags(2);
  const grace = o.graceMs ?? 2000;

  // Round 1; a sender missing here whose signed statement an early echo row carries is skipped.
  const skip1 = new Skips();
  const early = g.onBuffered((tag, from, payload) => {
    if (tag !== base + 1 || from === me) return;
    const row = decodeEcho(payload, N);
    row?.forEach((st, s) => st && s !== from && s !== me && open(s, st) && skip1.add(s));
  });
  // The last sender is waited for a bounded time; a later statement counts only as another's relay.
  const t1 = performance.now();
  const arrived = new Map<number, number>();
  let last1: ReturnType<typeof setTimeout> | undefined;
  const since = Date.now();
  const missing = () => g.members.filter((_, r) => r !== me && !skip1.has(r) && !arrived.has(r));
  const giveUp = (ms: number) => {
    last1 = setTimeout(() => {
      if (o.lastHeard && missing().some((p) => o.lastHeard!(p) < since)) return giveUp(ms);
      g.members.forEach((_, r) => skip1.add(r));
    }, ms);
  };
  const arm1 = () => {
    if (last1 === undefined && missing().length <= 1) giveUp(2 * Math.max(o.lastSenderMs ?? grace, median([...arrived.values()])));
  };
  const unwatch = skip1.watch(arm1);
  arm1();
  let direct: (Uint8Array | null)[];
  try {
    direct = await g.allGatherSomeAt(base, mine, skip1, (from) => (arrived.set(from, performance.now() - t1), arm1()));
  } finally {
    early();
    unwatch();
    clearTimeout(last1);
  }

  // Round 2: the echo of what round 1 brought.
  const skip2 = new Skips();
  const t0 = performance.now();
  let rowsIn = 0;
  let last: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    if (last === undefined && N - 1 - rowsIn <= 1) last = setTimeout(() => g.members.forEach((_, r) => skip2.add(r)), 2 * Math.max(grace, performance.now() - t0));
  };
  arm();
  let raw: (Uint8Array | null)[];
  try {
    raw = await g.allGatherSomeAt(base + 1, encodeEcho(direct), skip2, () => (rowsIn++, arm()));
  } finally {
    clearTimeout(last);
  }
  const malformed: [number, string][] = [];
  const rows = raw.map((b, q) => {
    if (q === me || !b) return null;
    const row = decodeEcho(b, N);
    if (!row) malformed.push([q, `malformed echo row (${b.length} B)`]);
    return row;
  });
  const d = decideStatements(N, direct, rows, open);
  d.suspects.push(...malformed);
  return d;
}

/**
 * The signature of a WELCOME or CLAIM (control channel): over statementContext('welcome' | 'claim',
 * fingerprint, epoch, the sorted members), by the sender's key. A joiner counts only those that
 * verify against their sender's id, so a welcome cannot be passed off as another member's.
 */
export function signMembers(id: Identity, domain: 'welcome' | 'claim', fingerprint: number, epoch: number, members: readonly PeerId[]): { publicKey: Uint8Array; signature: Uint8Array } {
  return { publicKey: id.publicKey, signature: id.sign(statementContext(domain, fingerprint, epoch, [...members].sort())) };
}

export function membersSignedBy(id: Identity, from: PeerId, domain: 'welcome' | 'claim', m: { fingerprint: number; epoch: number; members: readonly PeerId[]; publicKey: Uint8Array; signature: Uint8Array }): boolean {
  return id.binds(from, m.publicKey) && verifySignature(m.signature, statementContext(domain, m.fingerprint, m.epoch, [...m.members].sort()), m.publicKey);
}

/** A sync's decision from the agreed statuses: the verdict, and who is removed for the run (equivocators). */
export interface AgreedSync {
  verdict: SyncVerdict;
  /** Members proven to have signed two statuses: removed by every honest member alike. */
  removed: [PeerId, string][];
  /** Members named to this member only (a statement or echo row that did not verify). */
  suspects: [PeerId, string][];
}

/**
 * The sync's verdict from the statuses every honest member holds alike (agreeStatements): members
 * that equivocated are removed; with them, or a member whose status nobody holds (or whose signed
 * status is malformed), out, the group retries with the members a strict majority of the other
 * statuses lists (alike everywhere, so an insider cannot split a vote that sits at the majority).
 * Otherwise syncVerdict on the agreed statuses. Throws as syncVerdict does.
 */
export function agreedSyncVerdict(g: PeerGroup, a: Agreed, fingerprint: number, epoch: number, stepIndex: number): AgreedSync {
  const st: (GroupStatus | null)[] = a.bodies.map((b) => {
    if (!b) return null;
    try {
      return decodeStatus(b);
    } catch {
      return null;
    }
  });
  const removed = a.equivocators.map((r): [PeerId, string] => [g.members[r], `signed two different statuses at the sync of epoch ${epoch}`]);
  const suspects = a.suspects.map(([r, why]): [PeerId, string] => [g.members[r], why]);
  const out = g.members.filter((_, r) => !st[r]);
  if (out.length === 0) return { verdict: syncVerdict(g, st as GroupStatus[], fingerprint, epoch, stepIndex), removed, suspects };
  const present = st.filter((x): x is GroupStatus => x !== null);
  const agreedView = g.members.filter((p, r) => st[r] && present.filter((x) => x.members.includes(p)).length * 2 > present.length);
  const absent = out.filter((p) => !removed.some(([q]) => q === p));
  const why = [removed.length ? `${removed.map(([p]) => p).join(', ')} signed two different statuses` : '', absent.length ? `no signed status of ${absent.join(', ')}` : ''].filter(Boolean).join('; ');
  return { verdict: { agreedView, why: `sync of epoch ${epoch}: ${why}` }, removed, suspects };
}

/** A step's end-of-step reports as every honest member holds them, and who equivocated. */
export interface AgreedReports {
  /** Per rank (null: an equivocator's, left out of this step's decisions). */
  reports: (StepReport | null)[];
  /** Members proven to have signed two different reports: removed by every honest member alike. */
  removed: [PeerId, string][];
  suspects: [PeerId, string][];
}

/**
 * The reports (joiners, accusations, weights hash, loss) decided from the signed, echoed set, so an
 * insider telling members different things (a joiner listed to some only, to split an admission
 * at the exact majority) is proven by its two signatures and removed. A report nobody holds, or a
 * malformed or wrong-step one, fails the step naming its sender, as an unsigned one did.
 */
export function agreedReports(g: PeerGroup, a: Agreed, s: number): AgreedReports {
  const removed = a.equivocators.map((r): [PeerId, string] => [g.members[r], `signed two different reports after step ${s}`]);
  const suspects = a.suspects.map(([r, why]): [PeerId, string] => [g.members[r], why]);
  const reports = a.bodies.map((b, r) => {
    if (a.equivocators.includes(r)) return null;
    const p = g.members[r];
    if (!b) throw new CollectiveError('invalid-payload', `no signed report of ${p} after step ${s}`, p);
    const rep = decodeMember(g, r, () => decodeReport(b));
    if (rep.step !== s + 1) throw new CollectiveError('invalid-payload', `${p} reports step ${rep.step}, expected ${s + 1}`, p);
    return rep;
  });
  return { reports, removed, suspects };
}
