// The tuning cache and its keys (engine/tune): adapters and families, the code hash that invalidates a
// changed kernel's entries only, import/export validation of hostile files, the limits every candidate
// is checked against before compiling, the order the kernels' choosers consult (tuned, shipped table,
// a seed of the same architecture, heuristic) and the run's tuned / partly / defaults status.
import { describe, expect, it } from 'vitest';
import type { Runtime } from '../../src/engine/gpu/runtime';
import { pickChoice } from '../../src/engine/kernels/matmul/choice';
import { chooseAttentionTile } from '../../src/engine/kernels/attention/attention';
import { defaultTrainOptions } from '../../src/engine/train/options';
import {
  adapterFamily, adapterId, codeHash, LAB_RUN_SHAPE, labRunOptions, madeChoices, parseTuneCache, resetChoices, TuneCache, TuneCacheError, trainingTuneJobs,
  tuningStatus,
} from '../../src/engine/tune';
import { DEFAULT_RUN_CONFIG, trainOptionsFor } from '../../src/worker/protocol';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { setTunedPicks } from '../../src/engine/tune/store';
import { setShippedSeeds } from '../../src/engine/tune/adapter';
import { attentionCandidates } from '../../src/engine/tune/attention';
import { checkShape, matmulCandidateProblem, matmulCandidates, tileCannotWin } from '../../src/engine/tune/gemm';
import { deviceTuneOptions } from '../../src/engine/tune/tuner';
import type { MatmulJob } from '../../src/engine/tune/jobs';
import { getVariant } from '../../src/engine/kernels/matmul/variants';

const H200 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H200', description: 'NVIDIA H200 (driver 580.159.04)' };
const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const RADEON = { vendor: 'amd', architecture: 'rdna-3', device: 'Radeon RX 7900', description: 'AMD Radeon' };

const LIMITS = {
  maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024, maxComputeWorkgroupSizeX: 1024, maxComputeWorkgroupsPerDimension: 65535,
} as GPUSupportedLimits;

/** A runtime with only what the choosers read: the device (its limits; the key of its picks) and the adapter. */
function fakeRt(adapterInfo: typeof H200, limits: Partial<GPUSupportedLimits> = {}): Runtime {
  return { device: { limits: { ...LIMITS, ...limits } }, gpu: { adapterInfo, features: {} } } as unknown as Runtime;
}

const entry = (picks: string[], at = '2026-12-06T10:00:00.000Z') => ({ picks, ms: 0.5, candidates: 3, at });

/** A copy of a cache's JSON whose first matmul entry has these fields changed. */
function withEntry(data: { adapters: { families: { matmul: { entries: Record<string, object> } } }[] }, change: object): unknown {
  const d = structuredClone(data);
  const entries = d.adapters[0].families.matmul.entries;
  const k = Object.keys(entries)[0];
  entries[k] = { ...entries[k], ...change };
  return d;
}

describe('adapter keys', () => {
  it('one id per adapter; the family is vendor/architecture, Hopper named by the part when the architecture is blank', () => {
    expect(adapterId(H200)).not.toBe(adapterId(H100));
    expect(adapterId({ ...H200, vendor: 'NVIDIA ' })).toBe(adapterId(H200));
    expect(adapterFamily(H100)).toBe('nvidia/hopper');
    expect(adapterFamily({ ...H100, architecture: '' })).toBe('nvidia/hopper');
    expect(adapterFamily({ ...H100, architecture: '', device: 'RTX 4090', description: '' })).toBeNull();
    expect(adapterFamily(RADEON)).toBe('amd/rdna-3');
  });
});

describe('tuning cache', () => {
  it('keeps entries per adapter and family under the current code hash, and round-trips through JSON', () => {
    const c = new TuneCache();
    c.put(H100, 'matmul', '8192x768x768NT', entry(['128x128k8_8x16']));
    c.put(H100, 'attention', 'fwd/D64', entry(['64x32/256b']));
    c.put(RADEON, 'matmul', '8192x768x768NT', entry(['64x64k16_8x8']));
    expect(c.get(H100, 'matmul', '8192x768x768NT')?.picks).toEqual(['128x128k8_8x16']);
    expect(c.get(H200, 'matmul', '8192x768x768NT')).toBeUndefined();
    const back = TuneCache.parse(c.serialize());
    expect(back.get(RADEON, 'matmul', '8192x768x768NT')?.picks).toEqual(['64x64k16_8x8']);
    expect(back.counts(H100)).toEqual({ current: 2, stale: 0 });
  });

  it('a changed kernel invalidates only its own family\'s entries', () => {
    const c = new TuneCache();
    c.put(H100, 'matmul', '8192x768x768NT', entry(['128x128k8_8x16']));
    c.put(H100, 'attention', 'fwd/D64', entry(['64x32/256b']));
    const data = JSON.parse(c.serialize());
    expect(data.adapters[0].families.matmul.codeHash).toBe(codeHash('matmul'));
    data.adapters[0].families.matmul.codeHash = '1-0123456789abcdef'; // as tuned by an older matmul.wgsl
    const old = TuneCache.parse(data);
    expect(old.current(H100, 'matmul')).toEqual({});
    expect(old.get(H100, 'attention', 'fwd/D64')?.picks).toEqual(['64x32/256b']);
    expect(old.counts(H100)).toEqual({ current: 1, stale: 1 });
    const device = {};
    expect(old.applyTo(device, H100)).toBe(1);
    // Tuning again under the current code replaces the stale family.
    old.put(H100, 'matmul', '16384x384x384NT', entry(['64x64k16_8x8']));
    expect(Object.keys(old.current(H100, 'matmul'))).toEqual(['16384x384x384NT']);
    expect(codeHash('matmul')).not.toBe(codeHash('attention'));
    expect(codeHash('matmul')).toBe(codeHash('matmul'));
  });

  it('merges an import: newer entries win, a stale family does not replace a current one', () => {
    const mine = new TuneCache();
    mine.put(H100, 'matmul', '64x64x64NN', entry(['32x32k16_4x4'], '2026-12-01T00:00:00.000Z'));
    const theirs = new TuneCache();
    theirs.put(H100, 'matmul', '64x64x64NN', entry(['64x64k16_4x4'], '2026-12-05T00:00:00.000Z'));
    theirs.put(H100, 'matmul', '128x64x64NN', entry(['64x64k16_8x8']));
    expect(mine.merge(theirs).added).toBe(2);
    expect(mine.get(H100, 'matmul', '64x64x64NN')?.picks).toEqual(['64x64k16_4x4']);
    const stale = JSON.parse(theirs.serialize());
    stale.adapters[0].families.matmul.codeHash = 'old';
    expect(mine.merge(TuneCache.parse(stale)).added).toBe(0);
    expect(mine.counts(H100).current).toBe(2);
  });

  it('refuses malformed or foreign files with one clear error', () => {
    const good = new TuneCache();
    good.put(H100, 'matmul', '64x64x64NN', entry(['32x32k16_4x4']));
    const ok = JSON.parse(good.serialize());
    const bad: [string, unknown, RegExp][] = [
      ['not JSON', '{"format": ', /not JSON/],
      ['an array', '[1,2]', /not a tuning cache/],
      ['a run.json', JSON.stringify({ preset: 'micro', model: {}, batch: 4 }), /not a tuning cache.*"format" is null/],
      ['another format', { ...ok, format: 'something-else' }, /not a tuning cache.*"something-else"/],
      ['a newer version', { ...ok, version: 2 }, /version 2 is not supported/],
      ['an unknown key', { ...ok, extra: 1 }, /extra|Unrecognized/i],
      ['an unknown family', { ...ok, adapters: [{ ...ok.adapters[0], families: { gemm: ok.adapters[0].families.matmul } }] }, /gemm|Unrecognized/i],
      ['a prototype key', JSON.parse(good.serialize().replace('"64x64x64NN"', '"__proto__"')), /'__proto__' is not a matmul choice key/],
      ['an attention key under matmul', JSON.parse(good.serialize().replace('"64x64x64NN"', '"fwd/D64"')), /not a matmul choice key/],
      ['a pick with odd characters', JSON.parse(good.serialize().replace('"32x32k16_4x4"', '"<script>"')), /picks/],
      ['no picks', withEntry(ok, { picks: [] }), /picks/],
      ['a negative time', withEntry(ok, { ms: -1 }), /ms/],
      ['a huge adapter list', { ...ok, adapters: Array.from({ length: 65 }, () => ok.adapters[0]) }, /adapters/],
    ];
    for (const [what, input, msg] of bad) {
      let err: unknown;
      try {
        parseTuneCache(input, 'file.json');
      } catch (e) {
        err = e;
      }
      expect(err, what).toBeInstanceOf(TuneCacheError);
      expect((err as Error).message, what).toMatch(/^file\.json: /);
      expect((err as Error).message, what).toMatch(msg);
    }
    expect(() => parseTuneCache(ok)).not.toThrow();
    // Nothing an input names reaches Object.prototype.
    expect(({} as Record<string, unknown>).picks).toBeUndefined();
  });

  it('drops picks this build does not know when applying', () => {
    const c = new TuneCache();
    c.put(H100, 'matmul', '64x64x64NN', entry(['no-such-variant', '32x32k16_4x4']));
    c.put(H100, 'matmul', '64x64x32NN', entry(['no-such-variant']));
    const device = {};
    expect(c.applyTo(device, H100)).toBe(1);
  });
});

describe('limits before compiling', () => {
  const shape = { M: 8192, N: 768, K: 768, transB: true };
  it('a GEMM choice over the workgroup storage, invocations or workspace is refused', () => {
    expect(matmulCandidateProblem(LIMITS, shape, '128x128k8_8x8', 0)).toBeNull();
    const small = { ...LIMITS, maxComputeWorkgroupStorageSize: 16384, maxComputeInvocationsPerWorkgroup: 128, maxComputeWorkgroupSizeX: 128 };
    expect(matmulCandidateProblem(small, shape, '128x128k8_8x8', 0)).toMatch(/256 invocations/);
    expect(matmulCandidateProblem({ ...LIMITS, maxComputeWorkgroupStorageSize: 16384 }, shape, '128x128k16_8x8', 0)).toMatch(/storage/);
    expect(matmulCandidateProblem(LIMITS, { M: 768, N: 768, K: 8192, transA: true }, '64x64k16_8x8_sk4', 0)).toMatch(/workspace/);
    expect(matmulCandidateProblem(LIMITS, shape, 'nonsense', 0)).toMatch(/unknown variant/);
  });

  it('candidates respect the limits, the shipped picks come first, mostly-padding tiles are left out', () => {
    const job: MatmulJob = { family: 'matmul', key: '8192x768x768NT', label: 'q', shape, workspaceBytes: 0 };
    const rt = fakeRt(H100, { maxComputeWorkgroupStorageSize: 32768, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256 });
    const { candidates, rejected } = matmulCandidates(rt, job, { max: 50 });
    expect(candidates.length).toBeGreaterThan(3);
    for (const c of candidates) expect(matmulCandidateProblem(rt.device.limits, shape, c, 0)).toBeNull();
    expect(rejected.some((r) => /invocations|storage/.test(r.why))).toBe(true);
    const full = matmulCandidates(fakeRt(H100), job, { max: 50 }).candidates;
    expect(full[0]).toBe('128x128k16_8x8_np'); // the H200 table's pick seeds the H100
    const tiny = matmulCandidates(fakeRt(RADEON), { ...job, shape: { M: 128, N: 32, K: 32 } }, { max: 50 }).candidates;
    for (const c of tiny) expect(getVariant(c.replace(/_(sk|st)\d+$/, '')).BN).toBeLessThanOrEqual(64);
  });

  it('a tile longer than the problem in M or N is left out where another choice pads less', () => {
    // micro's q forward at batch 8 x seq 32: N = 32, so a 64-wide tile runs half its threads past the edge.
    const job: MatmulJob = { family: 'matmul', key: '256x32x32NT', label: 'q', shape: { M: 256, N: 32, K: 32, transB: true }, workspaceBytes: 0 };
    const { candidates } = matmulCandidates(fakeRt(RADEON), job, { max: 50 });
    expect(candidates.length).toBeGreaterThan(1);
    for (const c of candidates) expect(getVariant(c.replace(/_(sk|st)\d+$/, '')).BN).toBeLessThanOrEqual(32);
    expect(candidates).toContain('32x32k16_4x4');
    expect(candidates).not.toContain('64x64k16_4x4'); // the cost model's pick before
    expect(tileCannotWin(job.shape, '64x64k16_4x4', ['32x32k16_4x4'])).toBe(true);
    // N = 16: every tile is longer; none pads less than 32 wide, so both stay.
    const narrow = { M: 256, N: 16, K: 32, transB: true };
    expect(tileCannotWin(narrow, '128x32k16_8x4', ['32x32k16_4x4'])).toBe(false);
    expect(tileCannotWin(narrow, '32x32k16_4x4', ['128x32k16_8x4'])).toBe(false);
    // A tile longer than M pads more than the one that fits (65 rows: 128 vs 96).
    expect(tileCannotWin({ M: 65, N: 32, K: 256, transA: true }, '128x32k16_8x4_sk3', ['32x32k16_4x4_sk3'])).toBe(true);
    expect(tileCannotWin({ M: 256, N: 64, K: 32 }, '64x64k16_4x4', ['32x32k16_4x4'])).toBe(false);
  });

  it('a CPU adapter times the first two candidates of each choice, the shipped or heuristic pick first; a GPU all', () => {
    const cpu = fakeRt({ vendor: 'google', architecture: 'swiftshader', device: 'swiftshader-device-subzero-', description: 'SwiftShader driver 5.0.0' });
    expect(deviceTuneOptions(cpu)).toMatchObject({ maxGemmCandidates: 2, maxAttentionCandidates: 2, rounds: 2, reps: 1, settleMs: 0, earlyStopMargin: 1.5 });
    expect(deviceTuneOptions(cpu, { maxGemmCandidates: 5 }).maxGemmCandidates).toBe(5);
    expect(deviceTuneOptions(fakeRt(RADEON))).toEqual({});
    const all = attentionCandidates(fakeRt(RADEON), 'fwd', 8, 32).candidates;
    expect(all.length).toBeGreaterThan(2);
    expect(attentionCandidates(fakeRt(RADEON), 'fwd', 8, 32, 2).candidates).toEqual(all.slice(0, 2));
  });

  it('attention tiles over the storage limit are refused; the check shape keeps the timed pipeline\'s remainders', () => {
    const rt = fakeRt(RADEON, { maxComputeWorkgroupStorageSize: 16384 });
    const { candidates, rejected } = attentionCandidates(rt, 'fwd', 64, 512);
    expect(candidates.length).toBeGreaterThan(0);
    expect(rejected.some((r) => /workgroup storage/.test(r.why))).toBe(true);
    const v = getVariant('128x128k8_8x16');
    const s = checkShape({ M: 8192, N: 2560, K: 770, transB: true }, v);
    expect([s.M % v.BM, s.N % v.BN, s.K % v.BK]).toEqual([8192 % v.BM, 2560 % v.BN, 770 % v.BK]);
    expect(s.M * s.N * s.K).toBeLessThan(8192 * 2560 * 770 / 50);
  });
});

describe('where a choice comes from', () => {
  const shape = { label: 'x', M: 8192, N: 768, K: 768, transB: true };
  it('tuned, else the shipped table of this GPU, else a seed of its architecture, else the heuristic', () => {
    for (const [adapter, source] of [[H200, 'table'], [H100, 'seed'], [RADEON, 'heuristic']] as const) {
      const rt = fakeRt(adapter);
      const c = pickChoice(rt, shape, 0);
      expect(madeChoices(rt.device)).toEqual([{ family: 'matmul', key: '8192x768x768NT', source }]);
      if (source !== 'heuristic') expect(c.name).toBe('128x128k16_8x8_np');
      setTunedPicks(rt.device, 'matmul', '8192x768x768NT', ['64x64k16_8x8']);
      expect(pickChoice(rt, shape, 0).name).toBe('64x64k16_8x8');
      expect(madeChoices(rt.device)[0].source).toBe('tuned');
      expect(pickChoice(rt, { ...shape, variant: '32x32k16_4x4' }, 0).name).toBe('32x32k16_4x4');
      expect(madeChoices(rt.device)[0].source).toBe('forced');
    }
  });

  it('with the seeds off (LAB_SHIPPED_SEEDS=0) an H100 runs the heuristic, the H200 still its own table', () => {
    setShippedSeeds(false);
    try {
      for (const [adapter, source] of [[H200, 'table'], [H100, 'heuristic']] as const) {
        const rt = fakeRt(adapter);
        pickChoice(rt, shape, 0);
        chooseAttentionTile(rt, 'fwd', 64);
        expect(madeChoices(rt.device).map((c) => c.source)).toEqual([source, source]);
      }
    } finally {
      setShippedSeeds(true);
    }
  });

  it('a tuned ladder gives a call without workspace its one-pass pick', () => {
    const rt = fakeRt(RADEON);
    const dw = { label: 'dw', M: 768, N: 768, K: 8192, transA: true };
    setTunedPicks(rt.device, 'matmul', '768x768x8192TN', ['64x64k16_8x8_sk4', '64x64k16_8x8']);
    expect(pickChoice(rt, dw, 64 << 20).name).toBe('64x64k16_8x8_sk4');
    expect(pickChoice(rt, dw, 0).name).toBe('64x64k16_8x8');
  });

  it('attention tiles: tuned, else the table or its seed, else the first that fits', () => {
    const rt = fakeRt(H100);
    expect(chooseAttentionTile(rt, 'fwd', 64)).toMatchObject({ BM: 64, BN: 32, NT: 256, blocked: true });
    expect(madeChoices(rt.device)).toEqual([{ family: 'attention', key: 'fwd/D64', source: 'seed' }]);
    setTunedPicks(rt.device, 'attention', 'fwd/D64', ['32x32/128']);
    expect(chooseAttentionTile(rt, 'fwd', 64)).toMatchObject({ BM: 32, BN: 32, NT: 128 });
    expect(madeChoices(rt.device)[0].source).toBe('tuned');
  });

  it('a run is tuned, partly tuned or on defaults (naming a shipped table)', () => {
    const rt = fakeRt(RADEON);
    resetChoices(rt.device);
    expect(tuningStatus([]).status).toBe('defaults');
    const mk = (source: 'tuned' | 'table' | 'seed' | 'heuristic' | 'forced', i: number) => ({ family: 'matmul' as const, key: `k${i}`, source });
    expect(tuningStatus([mk('tuned', 1), mk('forced', 2)])).toMatchObject({ status: 'tuned', label: 'tuned', shippedTable: false });
    expect(tuningStatus([mk('tuned', 1), mk('seed', 2), mk('heuristic', 3)])).toMatchObject({
      status: 'partly tuned', shippedTable: true, label: 'partly tuned (1 of 3 choices; the rest: shipped table of this architecture, heuristic)',
    });
    expect(tuningStatus([mk('table', 1), mk('heuristic', 2)])).toMatchObject({ status: 'defaults', label: 'defaults (shipped table, heuristic)' });
  });
});

describe('the jobs of a run', () => {
  it('micro: every linear\'s forward, dX and dW GEMM (dW with its split-K workspace), the LM head\'s and the attention passes', () => {
    const jobs = trainingTuneJobs(defaultTrainOptions('micro'));
    const keys = jobs.map((j) => j.key);
    expect(keys).toContain('128x32x32NT'); // q forward: 128 tokens read W as stored
    expect(keys).toContain('128x32x32NN'); // q dX
    expect(keys).toContain('32x32x128TN'); // q dW
    expect(keys).toContain('128x65x32NT'); // lm_head
    expect(keys).toContain('32x64x32NT'); // gate in the decoder's prefill of 32 tokens
    expect(keys.filter((k) => k.includes('/'))).toEqual(['fwd/D8', 'dq/D8', 'dkdv/D8']);
    const dw = jobs.find((j) => j.key === '32x32x128TN');
    expect(dw?.family === 'matmul' && dw.workspaceBytes).toBeGreaterThan(0);
    expect(new Set(keys).size).toBe(keys.length);
    // The decoder's prefill GEMMs are outside the training step (tuned after the step's jobs); the step's are not.
    const offStep = jobs.filter((j) => j.family === 'matmul' && j.offStep).map((j) => j.label);
    expect(offStep.length).toBeGreaterThan(0);
    for (const l of offStep) expect(l).toMatch(/^\d+x\d+x\d+ NT: (\w+ decoder prefill(, )?)+$/);
  });

  it('"Tune this GPU" tunes the choices of the lab page\'s run: its form\'s defaults, or the batch and context given', () => {
    expect([DEFAULT_RUN_CONFIG.batch, DEFAULT_RUN_CONFIG.seq]).toEqual([LAB_RUN_SHAPE.batch, LAB_RUN_SHAPE.seq]);
    const keys = (o: Parameters<typeof trainingTuneJobs>[0]) => trainingTuneJobs(o).map((j) => j.key).sort();
    for (const preset of ['micro', 'tiny'] as const) {
      expect(keys(labRunOptions(preset))).toEqual(keys(trainOptionsFor({ ...DEFAULT_RUN_CONFIG, preset })));
      expect(keys(labRunOptions(preset, 3, 16))).toEqual(keys(trainOptionsFor({ ...DEFAULT_RUN_CONFIG, preset, batch: 3, seq: 16 })));
    }
    expect(keys(labRunOptions('micro'))).toContain('256x32x32NT'); // batch 8 x 32 tokens, not the recipe's batch 4
    const int8 = SCHEME_PRESETS.int8;
    expect(keys(labRunOptions('micro', 8, 32, int8))).toEqual(keys(trainOptionsFor({ ...DEFAULT_RUN_CONFIG, scheme: int8 })));
    expect(keys(labRunOptions('micro', 8, 32, int8))).not.toEqual(keys(labRunOptions('micro')));
  });

  it('an f16 run marks the linears\' fp32 GEMMs as its f16 GEMMs\' fallbacks (tuned last); the LM head and the decoder\'s prefill are not', () => {
    const fallbacks = (scheme: typeof SCHEME_PRESETS.fp32) => trainingTuneJobs(defaultTrainOptions('micro', { scheme }))
      .filter((j) => j.family === 'matmul' && j.fallback).map((j) => j.key).sort();
    expect(fallbacks(SCHEME_PRESETS.fp32)).toEqual([]);
    const f16 = fallbacks(SCHEME_PRESETS.f16);
    expect(f16).toEqual(expect.arrayContaining(['128x32x32NN', '32x32x128TN'])); // q dX, q dW
    expect(f16).not.toContain('128x65x32NT'); // lm_head forward runs fp32
    expect(f16).not.toContain('32x64x32NT'); // the decoder's prefill runs fp32
  });

  it('base: the forward linears run NN on a transposed weight (8192 tokens)', () => {
    const keys = trainingTuneJobs(defaultTrainOptions('base', { model: { vocab_size: 65 } })).map((j) => j.key);
    expect(keys).toContain('8192x768x768NN');
    expect(keys).toContain('8192x65x768NT');
    expect(keys).toContain('768x768x8192TN');
  });
});
