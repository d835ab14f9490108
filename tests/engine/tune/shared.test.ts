// Tuning tables shared by a group's members (engine/tune/shared.ts), on a stand-in runtime (limits and
// adapter only): what a member offers, how a received table is judged entry by entry (another adapter
// or kernel code: ignored; an unknown family or kernel, a pick over this adapter's limits, NaN, a bad
// key: dropped with why), that a shared entry fills only what the cache lacks, waits for its device
// check (applyTo skips it), gives way to this member's own tune, and shows in the run's status.
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../../src/engine/gpu/runtime';
import { attnTileName } from '../../../src/engine/kernels/attention/tables';
import {
  adapterDigest, adapterKeyOf, adoptSharedTable, applySharedForTraining, applySharedPicks, codeHash, parseTuneCache, shareableTable, type SharedTuneTable, TuneCache, TuneCacheError,
  tuningStatus,
} from '../../../src/engine/tune';
import { attentionCandidates } from '../../../src/engine/tune/attention';
import type { MatmulJob } from '../../../src/engine/tune/jobs';
import { tunedPicks } from '../../../src/engine/tune/store';
import { missingJobs } from '../../../src/engine/tune/tuner';

const GPU = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const LIMITS = {
  maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024, maxComputeWorkgroupsPerDimension: 65535,
} as GPUSupportedLimits;

function fakeRt(limits: Partial<GPUSupportedLimits> = {}): Runtime {
  return { device: { limits: { ...LIMITS, ...limits } }, gpu: { adapterInfo: GPU, features: {} } } as unknown as Runtime;
}

const KEY = '256x512x128NT';
const own = (picks: string[]) => ({ picks, ms: 0.5, candidates: 3, at: '2026-12-06T10:00:00.000Z' });
const table = (entries: { key: string; picks: string[]; ms: number }[], o: { adapter?: string; family?: string; hash?: string } = {}): SharedTuneTable => ({
  adapter: o.adapter ?? adapterDigest(GPU),
  families: [{ family: o.family ?? 'matmul', codeHash: o.hash ?? codeHash('matmul'), entries }],
});

describe('shared tuning tables', () => {
  it('a member offers its own current entries, not what a peer shared with it', () => {
    const c = new TuneCache();
    c.put(GPU, 'matmul', KEY, own(['64x64k16_8x8']));
    c.putShared(GPU, 'matmul', '64x64x64NN', { ...own(['32x32k16_4x4']), sharedBy: 'peer-1' });
    const t = shareableTable(c, GPU);
    expect(t.adapter).toBe(adapterDigest(GPU));
    expect(t.families).toEqual([{ family: 'matmul', codeHash: codeHash('matmul'), entries: [{ key: KEY, picks: ['64x64k16_8x8'], ms: 0.5 }] }]);
  });

  it('judges every entry: another adapter or code is ignored; unknown kernels, limits, NaN and bad keys are dropped with why', () => {
    const rt = fakeRt({ maxComputeWorkgroupStorageSize: 16384 });
    const c = new TuneCache();
    expect(adoptSharedTable(rt, c, table([{ key: KEY, picks: ['64x64k16_8x8'], ms: 1 }], { adapter: adapterDigest({ ...GPU, description: 'driver 1' }) }), 'p1'))
      .toMatchObject({ added: [], ignored: expect.stringMatching(/another adapter/) });
    expect(adoptSharedTable(rt, c, table([{ key: KEY, picks: ['64x64k16_8x8'], ms: 1 }], { hash: '1-0000' }), 'p1')).toMatchObject({ added: [], otherCode: ['matmul'] });
    const out = adoptSharedTable(rt, c, {
      adapter: adapterDigest(GPU),
      families: [
        { family: 'matmul', codeHash: codeHash('matmul'), entries: [
          { key: KEY, picks: ['32x32k16_4x4'], ms: 0.1 },
          { key: '64x64x64NN', picks: ['no_such_kernel'], ms: 0.1 },
          { key: '64x64x96NN', picks: ['128x128k16_8x8_np'], ms: 0.1 }, // over 16 KiB of workgroup storage
          { key: '96x64x64NN', picks: ['32x32k16_4x4'], ms: NaN },
          { key: '__proto__', picks: ['32x32k16_4x4'], ms: 0.1 },
          { key: '0x64x64NN', picks: ['32x32k16_4x4'], ms: 0.1 },
          { key: KEY, picks: ['32x32k16_4x4'], ms: 0.1 },
        ] },
        { family: 'f17', codeHash: 'x', entries: [{ key: 'a', picks: ['b'], ms: 1 }] },
      ],
    }, 'p1');
    expect(out.added).toEqual([`matmul ${KEY}`]);
    expect(out.dropped.map((d) => d.why)).toEqual([
      expect.stringMatching(/no GEMM kernel of this build/), expect.stringMatching(/workgroup storage/), expect.stringMatching(/NaN/),
      expect.stringMatching(/not a matmul choice key/), expect.stringMatching(/dimension of 0/), 'listed twice', expect.stringMatching(/unknown kernel family/),
    ]);
    expect(c.get(GPU, 'matmul', KEY)).toMatchObject({ picks: ['32x32k16_4x4'], sharedBy: 'p1' });
    expect(Object.keys(c.current(GPU, 'matmul'))).toEqual([KEY]);
  });

  it('an attention pick must be a tile of this build within the limits', () => {
    const rt = fakeRt();
    const fits = attnTileName(attentionCandidates(rt, 'fwd', 64).candidates[0]);
    const out = adoptSharedTable(rt, new TuneCache(), {
      adapter: adapterDigest(GPU),
      families: [{ family: 'attention', codeHash: codeHash('attention'), entries: [
        { key: 'fwd/D64', picks: [fits], ms: 0.2 }, { key: 'dq/D64', picks: ['99x99/7'], ms: 0.2 },
      ] }],
    }, 'p2');
    expect(out.added).toEqual(['attention fwd/D64']);
    expect(out.dropped).toEqual([{ key: 'attention dq/D64', why: expect.stringMatching(/no dq attention tile/) }]);
  });

  it('a shared entry fills only what the cache lacks, waits for its device check, and gives way to a tune', () => {
    const rt = fakeRt();
    const c = new TuneCache();
    c.put(GPU, 'matmul', KEY, own(['64x64k16_8x8']));
    const out = adoptSharedTable(rt, c, table([{ key: KEY, picks: ['32x32k16_4x4'], ms: 0.01 }, { key: '64x64x64NN', picks: ['32x32k16_4x4'], ms: 0.01 }]), 'p1');
    expect(out.added).toEqual(['matmul 64x64x64NN']);
    expect(c.get(GPU, 'matmul', KEY)?.picks).toEqual(['64x64k16_8x8']);
    // A second member's table does not replace the first's.
    expect(adoptSharedTable(rt, c, table([{ key: '64x64x64NN', picks: ['64x64k16_8x8'], ms: 0.01 }]), 'p2').added).toEqual([]);
    const device = {};
    expect(c.applyTo(device, GPU)).toBe(1);
    expect(tunedPicks(device, 'matmul', '64x64x64NN')).toBeUndefined();
    const job: MatmulJob = { family: 'matmul', key: '64x64x64NN', label: '', shape: { M: 64, N: 64, K: 64 }, workspaceBytes: 0 };
    expect(missingJobs([job], c, adapterKeyOf(GPU))).toEqual([job]);
    c.put(GPU, 'matmul', job.key, own(['64x64k16_8x8']));
    expect(c.get(GPU, 'matmul', job.key)?.sharedBy).toBeUndefined();
    expect(missingJobs([job], c, adapterKeyOf(GPU))).toEqual([]);
  });

  it('the cache file keeps who shared an entry, and refuses a malformed one', () => {
    const c = new TuneCache();
    c.putShared(GPU, 'matmul', KEY, { ...own(['32x32k16_4x4']), sharedBy: 'abc-def-123' });
    expect(TuneCache.parse(c.serialize()).get(GPU, 'matmul', KEY)?.sharedBy).toBe('abc-def-123');
    const bad = JSON.parse(c.serialize());
    bad.adapters[0].families.matmul.entries[KEY].sharedBy = '<script>';
    expect(() => parseTuneCache(bad)).toThrow(TuneCacheError);
  });

  it("the run's status names the members whose picks it used", () => {
    const mk = (source: 'tuned' | 'heuristic', i: number, sharedBy?: string) => ({ family: 'matmul' as const, key: `${i}x1x1NN`, source, ...(sharedBy ? { sharedBy } : {}) });
    expect(tuningStatus([mk('tuned', 1, 'p1'), mk('tuned', 2, 'p1')])).toMatchObject({ status: 'tuned', label: 'tuned (shared by peer p1)', shared: 2, sharedBy: ['p1'] });
    expect(tuningStatus([mk('tuned', 1, 'p1'), mk('tuned', 2)]).label).toBe('tuned (1 of 2 shared by peer p1)');
    expect(tuningStatus([mk('tuned', 1, 'p1'), mk('heuristic', 2)]).label).toBe('partly tuned (1 of 2 choices, 1 shared by peer p1; the rest: heuristic)');
    expect(tuningStatus([mk('tuned', 1)]).label).toBe('tuned');
  });
});

describe('applySharedPicks before a run', () => {
  it('an entry whose picks fail here (over this adapter\'s limits) is not applied and leaves the cache', async () => {
    // Written on a device with more workgroup storage (a cache file carried over, or a table taken there).
    const rt = fakeRt({ maxComputeWorkgroupStorageSize: 16384 });
    const c = new TuneCache();
    c.putShared(GPU, 'matmul', '64x64x96NN', { ...own(['128x128k16_8x8_np']), sharedBy: 'p1' });
    const job: MatmulJob = { family: 'matmul', key: '64x64x96NN', label: '', shape: { M: 64, N: 64, K: 96 }, workspaceBytes: 0 };
    const out = await applySharedPicks(rt, c, [job]);
    expect(out).toEqual({ applied: [], failed: [{ key: job.key, from: 'p1', why: expect.stringMatching(/workgroup storage/) }] });
    expect(c.get(GPU, 'matmul', job.key)).toBeUndefined();
    expect(tunedPicks(rt.device, 'matmul', job.key)).toBeUndefined();
  });

  it('a run whose cache holds no shared entry works out no plan for them', async () => {
    const c = new TuneCache();
    c.put(GPU, 'matmul', KEY, own(['64x64k16_8x8']));
    // Options no plan could be resolved from: only reached when there is something to check.
    const bogus = {} as Parameters<typeof applySharedForTraining>[1];
    await expect(applySharedForTraining(fakeRt(), bogus, c)).resolves.toEqual({ applied: [], failed: [] });
    c.putShared(GPU, 'matmul', '64x64x64NN', { ...own(['32x32k16_4x4']), sharedBy: 'p1' });
    await expect(applySharedForTraining(fakeRt(), bogus, c)).rejects.toThrow();
  });
});
