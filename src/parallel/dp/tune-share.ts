/**
 * A member's kernel tuning table, shared with its group (issue 36): each member sends its own
 * tuned entries (engine/tune/shared.ts shareableTable) once to every member of the groups it forms,
 * as TUNE control messages (wire.ts) of at most 4 KiB; a receiver holds at most MAX_TUNE_PARTS
 * parts and MAX_TUNE_BYTES_PER_PEER bytes per peer, takes one table per peer per run, and hands a
 * complete one to `accept` (adoptSharedTable: per-entry checks, only shapes its cache lacks; the
 * device check comes before any use). Whatever is wrong is dropped and its sender named, never thrown.
 */
import type { SharedTableOutcome, SharedTuneTable } from '../../engine/tune/shared';
import type { PeerId } from '../../peers/transport/transport';
import { DpKind, encodeControl, MAX_TUNE_PARTS, type TuneSharePart } from './wire';

/** What a member offers and how it takes a peer's table (DataParallelOptions.tuneShare). */
export interface TuneShareOptions {
  /** This member's own table on its adapter (shareableTable); empty families: nothing is sent. */
  table: SharedTuneTable;
  /** Takes a peer's complete table (adoptSharedTable with the run's device and cache, then keeps the cache). */
  accept(from: PeerId, table: SharedTuneTable): SharedTableOutcome;
}

/** The control channel's bound on one message. */
export const MAX_TUNE_MESSAGE_BYTES = 4096;
/** What one peer's table may take in all (parts of at most 4 KiB). */
export const MAX_TUNE_BYTES_PER_PEER = MAX_TUNE_PARTS * MAX_TUNE_MESSAGE_BYTES;
/** Dropped entries named one by one per table; the rest are counted in one line. */
const NAMED_DROPS = 5;

const utf8 = new TextEncoder();
const len = (s: string) => 2 + utf8.encode(s).length;

/**
 * A table as TUNE messages of at most `maxBytes` each, entries in order; past MAX_TUNE_PARTS parts
 * the rest is left out (a receiver would refuse more).
 */
export function encodeTuneTable(table: SharedTuneTable, maxBytes = MAX_TUNE_MESSAGE_BYTES): Uint8Array[] {
  const head = 8 + 1 + 1 + len(table.adapter) + 1;
  const parts: TuneSharePart['families'][] = [];
  let cur: TuneSharePart['families'] = [];
  let size = head;
  for (const f of table.families) {
    const famBytes = len(f.family) + len(f.codeHash) + 1;
    let fam: TuneSharePart['families'][number] | null = null;
    for (const e of f.entries) {
      const eBytes = len(e.key) + 4 + 1 + e.picks.reduce((n, p) => n + len(p), 0);
      if (head + famBytes + eBytes > maxBytes) continue; // an entry that fits no message is not sent
      if (size + (fam ? 0 : famBytes) + eBytes > maxBytes || (fam && fam.entries.length === 255)) {
        parts.push(cur);
        cur = [];
        size = head;
        fam = null;
      }
      if (!fam) {
        cur.push((fam = { family: f.family, codeHash: f.codeHash, entries: [] }));
        size += famBytes;
      }
      fam.entries.push({ key: e.key, ms: e.ms, picks: [...e.picks] });
      size += eBytes;
    }
  }
  if (cur.length) parts.push(cur);
  const kept = parts.slice(0, MAX_TUNE_PARTS);
  return kept.map((families, part) => encodeControl({ kind: DpKind.TuneShare, part, parts: kept.length, adapter: table.adapter, families }));
}

interface Pending {
  parts: number;
  adapter: string;
  got: Map<number, TuneSharePart['families']>;
  bytes: number;
}

/** The receiving side: per peer, the parts of its table until complete, bounded; one table per peer. */
export class TuneShareInbox {
  private readonly pending = new Map<PeerId, Pending>();
  /** Peers whose table was taken or refused in this run: later TUNE messages from them are refused. */
  private readonly closed = new Set<PeerId>();

  constructor(
    private readonly accept: TuneShareOptions['accept'],
    /** Names a sender for a refused message or entry (the group's reject event). */
    private readonly refuse: (from: PeerId, why: string) => void,
    /** Says what a taken table gave (the group's log). */
    private readonly note: (from: PeerId, message: string) => void,
  ) {}

  receive(from: PeerId, m: TuneSharePart, bytes: number): void {
    if (this.closed.has(from)) return this.refuse(from, 'tuning table: another one in this run (one per member): ignored');
    let p = this.pending.get(from);
    if (!p) this.pending.set(from, (p = { parts: m.parts, adapter: m.adapter, got: new Map(), bytes: 0 }));
    p.bytes += bytes;
    const why = p.bytes > MAX_TUNE_BYTES_PER_PEER ? `over ${MAX_TUNE_BYTES_PER_PEER} B`
      : m.parts !== p.parts ? `part of ${m.parts} parts after parts of ${p.parts}`
        : m.adapter !== p.adapter ? 'parts for two adapters'
          : p.got.has(m.part) ? `part ${m.part} twice` : null;
    if (why) return this.close(from, `tuning table refused: ${why}`);
    p.got.set(m.part, m.families);
    if (p.got.size < p.parts) return;
    this.pending.delete(from);
    this.closed.add(from);
    const families = [...p.got].sort((a, b) => a[0] - b[0]).flatMap(([, f]) => f);
    let out: SharedTableOutcome;
    try {
      out = this.accept(from, { adapter: p.adapter, families });
    } catch (e) {
      return this.refuse(from, `tuning table refused: ${(e as Error).message}`);
    }
    for (const d of out.dropped.slice(0, NAMED_DROPS)) this.refuse(from, `tuning table: entry ${d.key} dropped: ${d.why}`);
    if (out.dropped.length > NAMED_DROPS) this.refuse(from, `tuning table: ${out.dropped.length - NAMED_DROPS} more entries dropped`);
    if (out.ignored) return this.note(from, `tuning table of ${from} not used: ${out.ignored}`);
    const other = out.otherCode.length ? ` (${out.otherCode.join(', ')}: tuned for other kernel code, not used)` : '';
    this.note(from, `tuning table of ${from}: ${out.added.length} kernel choices this member had not tuned taken (checked on this device before use)${other}`);
  }

  private close(from: PeerId, why: string): void {
    this.pending.delete(from);
    this.closed.add(from);
    this.refuse(from, why);
  }
}
