/**
 * Kernel tuning tables shared in a group (src/parallel/dp/tune-share.ts, the TUNE control message of
 * wire.ts). The hostile sender is written from the protocol's description (its own byte writer, not
 * the product's encoder): oversized, malformed, wrong-adapter and unknown-kernel tables are refused
 * or dropped with the sender named, never a crash. The product's chunking keeps each message within
 * 4 KiB and a table within the per-peer bound; a member takes tables only from its group's members.
 */
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { adapterDigest, adoptSharedTable, codeHash, type SharedTuneTable, TuneCache } from '../../src/engine/tune';
import { MemberGroup } from '../../src/parallel/dp/member-group';
import { encodeTuneTable, MAX_TUNE_BYTES_PER_PEER, TuneShareInbox } from '../../src/parallel/dp/tune-share';
import type { DpEvent } from '../../src/parallel/dp/types';
import { decodeControl, DpKind, DpMessageError, type TuneSharePart } from '../../src/parallel/dp/wire';
import { TextDataset } from '../../src/engine/train/data/data';
import type { Trainer } from '../../src/engine/train/trainer';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { Insider } from '../peers/adversary/insider';

const GPU = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const rt = {
  device: { limits: { maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024, maxComputeWorkgroupsPerDimension: 65535 } },
  gpu: { adapterInfo: GPU, features: {} },
} as unknown as Runtime;

// ---- a sender written from wire.ts's description ----
// Header: 'WDP1' u32 LE, kind u8 (TUNE = 10), version u8 (3), reserved u16 0. TUNE: part u8, parts u8,
// adapter text, u8 family count, per family: name text, code hash text, u8 n, n × (key text, ms f32,
// u8 k, k × pick text); text = u16 LE byte length + UTF-8.
type Fam = { family: string; hash: string; entries: { key: string; ms: number; picks: string[] }[] };
function tuneBytes(part: number, parts: number, adapter: string, fams: Fam[], o: { kind?: number; trailing?: number; picksCount?: number } = {}): Uint8Array {
  const out: number[] = [];
  const u8 = (v: number) => out.push(v & 0xff);
  const u16 = (v: number) => out.push(v & 0xff, (v >> 8) & 0xff);
  const text = (s: string) => {
    const b = new TextEncoder().encode(s);
    u16(b.length);
    out.push(...b);
  };
  const f32 = (v: number) => out.push(...new Uint8Array(Float32Array.of(v).buffer));
  out.push(0x57, 0x44, 0x50, 0x31); // 'W','D','P','1' as u32 LE 0x31504457
  u8(o.kind ?? 10);
  u8(3);
  u16(0);
  u8(part);
  u8(parts);
  text(adapter);
  u8(fams.length);
  for (const f of fams) {
    text(f.family);
    text(f.hash);
    u8(f.entries.length);
    for (const e of f.entries) {
      text(e.key);
      f32(e.ms);
      u8(o.picksCount ?? e.picks.length);
      for (const p of e.picks) text(p);
    }
  }
  for (let i = 0; i < (o.trailing ?? 0); i++) u8(0);
  return Uint8Array.from(out);
}

const MINE = adapterDigest(GPU);
const matmul = (entries: Fam['entries']): Fam => ({ family: 'matmul', hash: codeHash('matmul'), entries });
const decode = (b: Uint8Array) => decodeControl(b) as TuneSharePart & { kind: DpKind };

/** An inbox whose accept is adoptSharedTable on the stand-in runtime and a fresh cache; what it names and notes. */
function inbox() {
  const cache = new TuneCache();
  const named: string[] = [];
  const notes: string[] = [];
  const box = new TuneShareInbox((from, t) => adoptSharedTable(rt, cache, t, from), (from, why) => named.push(`${from}: ${why}`), (_from, m) => notes.push(m));
  const feed = (from: string, b: Uint8Array) => box.receive(from, decode(b), b.length);
  return { cache, named, notes, feed, box };
}

describe('TUNE messages', () => {
  it("a sender's bytes decode to its table; malformed ones are refused whole", () => {
    const fams = [matmul([{ key: '64x64x64NN', ms: 0.25, picks: ['32x32k16_4x4'] }])];
    expect(decode(tuneBytes(0, 1, MINE, fams))).toEqual({ kind: DpKind.TuneShare, part: 0, parts: 1, adapter: MINE, families: [{ family: 'matmul', codeHash: codeHash('matmul'), entries: fams[0].entries }] });
    const bad: [Uint8Array, RegExp][] = [
      [tuneBytes(0, 17, MINE, fams), /at most 16 parts/],
      [tuneBytes(3, 2, MINE, fams), /part 3 of 2/],
      [tuneBytes(0, 1, MINE, fams, { trailing: 3 }), /trailing bytes/],
      [tuneBytes(0, 1, MINE, fams).subarray(0, 30), /truncated/],
      [tuneBytes(0, 1, MINE, fams, { picksCount: 9 }), /9 picks, at most 8/],
      [tuneBytes(0, 1, 'x'.repeat(65), fams), /adapter of 65 B exceeds 64 B/],
      [tuneBytes(0, 1, MINE, fams, { kind: 77 }), /unknown message kind 77/],
    ];
    for (const [b, why] of bad) {
      expect(() => decodeControl(b)).toThrow(DpMessageError);
      expect(() => decodeControl(b)).toThrow(why);
    }
  });

  it('the product cuts a large table into messages of at most 4 KiB that reassemble to it, and stops at the bound', () => {
    const entries = Array.from({ length: 300 }, (_, i) => ({ key: `${i + 1}x64x64NN`, picks: ['32x32k16_4x4', '64x64k16_8x8'], ms: i }));
    const table: SharedTuneTable = { adapter: MINE, families: [{ family: 'matmul', codeHash: codeHash('matmul'), entries }] };
    const msgs = encodeTuneTable(table);
    expect(msgs.length).toBeGreaterThan(2);
    expect(Math.max(...msgs.map((m) => m.length))).toBeLessThanOrEqual(4096);
    const got = msgs.map(decode);
    expect(got.every((m) => m.parts === msgs.length)).toBe(true);
    expect(got.flatMap((m) => m.families.flatMap((f) => f.entries.map((e) => e.key)))).toEqual(entries.map((e) => e.key));
    const { cache, named, feed } = inbox();
    for (const m of msgs) feed('p1', m);
    expect(named).toEqual([]);
    expect(Object.keys(cache.current(GPU, 'matmul'))).toHaveLength(300);
    const huge = { ...table, families: [{ ...table.families[0], entries: Array.from({ length: 3000 }, (_, i) => ({ ...entries[0], key: `${i + 1}x8x8NN` })) }] };
    const capped = encodeTuneTable(huge);
    expect(capped).toHaveLength(16);
    expect(capped.reduce((n, m) => n + m.length, 0)).toBeLessThanOrEqual(MAX_TUNE_BYTES_PER_PEER);
  });

  it('hostile tables: over the bound, parts that disagree, twice, wrong adapter, unknown kernels: refused or dropped, the sender named', () => {
    const { cache, named, notes, feed } = inbox();
    const one = matmul([{ key: '64x64x64NN', ms: 0.1, picks: ['32x32k16_4x4'] }]);
    // A part sent twice: the table is refused, and nothing more from its sender this run.
    const entry = (i: number, pick: string) => ({ key: `${i + 1}x64x64NN`, ms: 0.1, picks: Array.from({ length: 8 }, (_, j) => `${pick}${j}`) });
    const pad = (pick: string, n: number) => matmul(Array.from({ length: n }, (_, i) => entry(i, pick)));
    for (let i = 0; i < 3; i++) feed('twice', tuneBytes(i, 16, MINE, [pad('x'.repeat(12), 27)]));
    feed('twice', tuneBytes(0, 16, MINE, [one]));
    feed('twice', tuneBytes(15, 16, MINE, [one]));
    expect(named.filter((n) => n.startsWith('twice'))).toEqual([expect.stringMatching(/part 0 twice/), expect.stringMatching(/another one in this run/)]);
    // Parts past 4 KiB (which the control channel would not carry): the per-peer bound still holds.
    const big = tuneBytes(0, 16, MINE, [pad('y'.repeat(14), 30)]);
    expect(big.length).toBeGreaterThan(4096);
    for (let i = 0; i < 16; i++) feed('big', tuneBytes(i, 16, MINE, [pad('y'.repeat(14), 30)]));
    expect(named.filter((n) => n.startsWith('big'))).toEqual([`big: tuning table refused: over ${MAX_TUNE_BYTES_PER_PEER} B`, expect.stringMatching(/another one/)]);
    expect(cache.counts(GPU).current).toBe(0);
    // Parts of one table that disagree on their count or adapter.
    feed('split', tuneBytes(0, 2, MINE, [one]));
    feed('split', tuneBytes(1, 3, MINE, [one]));
    expect(named.at(-1)).toMatch(/^split: .*part of 3 parts after parts of 2/);
    // Another adapter: honest, not used, nobody named.
    const before = named.length;
    feed('other', tuneBytes(0, 1, adapterDigest({ ...GPU, device: 'NVIDIA H200' }), [one]));
    expect(named.length).toBe(before);
    expect(notes.at(-1)).toMatch(/not used: a table for another adapter/);
    // Unknown kernels, NaN, an unknown family: each entry dropped and named; the good one taken.
    feed('mixed', tuneBytes(0, 1, MINE, [
      matmul([{ key: '64x64x64NN', ms: 0.1, picks: ['evil_kernel'] }, { key: '96x96x96NN', ms: NaN, picks: ['32x32k16_4x4'] }, { key: '128x64x64NN', ms: 0.1, picks: ['32x32k16_4x4'] }]),
      { family: 'shader-f99', hash: 'z', entries: [] },
    ]));
    expect(named.filter((n) => n.startsWith('mixed'))).toEqual([
      expect.stringMatching(/entry matmul 64x64x64NN dropped: 'evil_kernel' is no GEMM kernel/),
      expect.stringMatching(/entry matmul 96x96x96NN dropped: time NaN/),
      expect.stringMatching(/unknown kernel family 'shader-f99'/),
    ]);
    expect(Object.keys(cache.current(GPU, 'matmul'))).toEqual(['128x64x64NN']);
    expect(cache.get(GPU, 'matmul', '128x64x64NN')?.sharedBy).toBe('mixed');
  });

  it('an accept that throws names the sender and leaves the member running', () => {
    const named: string[] = [];
    const box = new TuneShareInbox(() => {
      throw new Error('boom');
    }, (from, why) => named.push(`${from}: ${why}`), () => {});
    const b = tuneBytes(0, 1, MINE, [matmul([])]);
    box.receive('p', decode(b), b.length);
    expect(named).toEqual(['p: tuning table refused: boom']);
  });
});

/** What a member group reads of a trainer before its first sync (forged-welcome.test.ts's stand-in). */
function standIn(n = 64): Trainer {
  const state = { weights: new Float32Array(n).fill(0.5), m: new Float32Array(n), v: new Float32Array(n), step: 0 };
  return {
    model: { training: true, plan: { grads: null }, layout: { totalFloats: n } },
    plan: { model: {} },
    opts: { model: 'micro', batch: 1, seq: 8, seed: 1, optimizer: {} },
    data: TextDataset.fromTokens(Int32Array.from({ length: 256 }, (_, k) => k % 7), 1),
    stepIndex: 0,
    trainingState: async () => state,
    restoreTrainingState: () => {},
  } as unknown as Trainer;
}

describe('a group shares its tables', () => {
  it('two members that form a group each take the other\'s table; a peer outside the group is refused', async () => {
    const hub = new LoopbackHub();
    const taken: string[] = [];
    const events: DpEvent[] = [];
    const member = (id: string, key: string) => {
      const cache = new TuneCache();
      cache.put(GPU, 'matmul', key, { picks: ['32x32k16_4x4'], ms: 0.1, candidates: 2, at: '2026-12-06T00:00:00.000Z' });
      const table: SharedTuneTable = { adapter: MINE, families: [{ family: 'matmul', codeHash: codeHash('matmul'), entries: [{ key, picks: ['32x32k16_4x4'], ms: 0.1 }] }] };
      return new MemberGroup(standIn(), hub.endpoint(id), {
        run: 'ts', mode: 'fp32', members: ['a', 'b'], heartbeatMs: 1000, silenceMs: 5000, onEvent: (e) => events.push(e),
        tuneShare: { table, accept: (from, t) => {
          const out = adoptSharedTable(rt, cache, t, from);
          taken.push(`${id}<-${from}: ${out.added.join(',')}`);
          return out;
        } },
      }, { step: async () => { throw new Error('no steps here'); } });
    };
    const stranger = new Insider(hub.endpoint('s'));
    const [a, b] = [member('a', '64x64x64NN'), member('b', '128x128x64NN')];
    try {
      await Promise.all([a.formGroup(), b.formGroup()]);
      for (let i = 0; i < 50 && taken.length < 2; i++) await new Promise((r) => setTimeout(r, 20));
      expect(taken.sort()).toEqual(['a<-b: matmul 128x128x64NN', 'b<-a: matmul 64x64x64NN']);
      expect(events.filter((e) => e.kind === 'tuning')).toHaveLength(2);
      stranger.control('a', 'ts', tuneBytes(0, 1, MINE, [matmul([{ key: '8x8x8NN', ms: 0.1, picks: ['32x32k16_4x4'] }])]));
      for (let i = 0; i < 50 && !events.some((e) => e.kind === 'reject' && e.peers[0] === 's'); i++) await new Promise((r) => setTimeout(r, 20));
      expect(events.find((e) => e.kind === 'reject' && e.peers[0] === 's')?.message).toMatch(/tuning table from a peer outside the group/);
    } finally {
      a.stop();
      b.stop();
    }
  }, 20_000);
});
