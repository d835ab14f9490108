// The f16 flash attention's layouts as tuning choices (tune/f16-attention.ts): an f16 run's jobs (forward
// and backward per call shape), picks named from the spec's fields (parsed back, unknown names refused),
// and their cache entries under their own family and code hash (another hash: not applied).
import { describe, expect, it } from 'vitest';
import type { F16AttnSpec } from '../../../src/engine/kernels/attention/f16/code';
import { F16_ATTN_BWD_LAYOUTS, F16_ATTN_LAYOUTS, f16AttnBwdLayoutPair } from '../../../src/engine/kernels/attention/f16/layouts';
import { f16AttnBwdPick, f16AttnBwdSpecsOfPick, f16AttnPick, f16AttnSpecOfPick, f16AttnTuneKey } from '../../../src/engine/kernels/attention/f16/picks';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { codeHash, missingJobs, TuneCache, trainingTuneJobs } from '../../../src/engine/tune';
import { tunedPicks } from '../../../src/engine/tune/store';

const H100 = { vendor: 'nvidia', architecture: 'hopper', device: 'NVIDIA H100 80GB HBM3', description: 'NVIDIA H100 (driver 580.159.04)' };
const entry = (picks: string[]) => ({ picks, ms: 0.5, candidates: 3, at: '2026-12-06T10:00:00.000Z' });
const spec = (l: object, cfg = { M: 16, N: 16, K: 16 }): F16AttnSpec => ({ cfg, D: 64, sgSize: 32, ...l } as F16AttnSpec);

describe('f16 attention layouts as tuning choices', () => {
  it('an f16 run has a forward and a backward job at its call shape; an fp32 run none', () => {
    const opts = { ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 };
    const jobs = trainingTuneJobs(opts).filter((j) => j.family === 'f16attn');
    expect(jobs.map((j) => j.family === 'f16attn' && j.pass)).toEqual(['fwd', 'bwd']);
    const j = jobs[0];
    if (j.family !== 'f16attn') throw new Error('not an f16attn job');
    expect(j.shape.B).toBe(opts.batch);
    expect(j.shape.T).toBe(opts.seq);
    expect(j.key).toBe(f16AttnTuneKey('fwd', j.shape));
    expect(j.key).toMatch(/^fwd\/D\d+\/T\d+\/H\d+\/KV\d+\/B\d+\/causal$/);
    expect(trainingTuneJobs(defaultTrainOptions('micro')).some((x) => x.family === 'f16attn')).toBe(false);
    // The cache lacks them: a tune does them; once cached, not again.
    const c = new TuneCache();
    expect(missingJobs(jobs, c, H100).length).toBe(2);
    c.put(H100, 'f16attn', j.key, entry([f16AttnPick(spec(F16_ATTN_LAYOUTS[0]))]));
    expect(missingJobs(jobs, c, H100).map((x) => x.key)).toEqual([jobs[1].key]);
  });

  it('a pick names a spec from its fields: every layout parses back; a pair names dq and dk/dv; other names do not', () => {
    const names = new Set<string>();
    for (const l of F16_ATTN_LAYOUTS) {
      for (const cfg of [{ M: 16, N: 16, K: 16 }, { M: 16, N: 8, K: 16 }]) {
        const s = spec(l, cfg);
        const pick = f16AttnPick(s);
        expect(pick).toMatch(/^[A-Za-z0-9_/.]{1,64}$/);
        expect(f16AttnSpecOfPick(pick, 64, 32)).toEqual(s);
        names.add(pick);
      }
    }
    expect(names.size).toBe(F16_ATTN_LAYOUTS.length * 2);
    // A true field is spelled by its name, a false one left out.
    expect(f16AttnPick(spec({ sgCount: 4, BKV: 64, PAD: 8, wide: true }))).toBe('16x16x16.BKV_64.PAD_8.sgCount_4.wide');
    expect(f16AttnPick(spec({ sgCount: 4, BKV: 64, PAD: 8, wide: false }))).toBe('16x16x16.BKV_64.PAD_8.sgCount_4');
    // The removed oAcc option (failed its device check on the H100): a cached pick naming it is refused.
    expect(f16AttnSpecOfPick('16x16x16.BKV_64.PAD_8.oAcc.sgCount_4', 64, 32)).toBeNull();
    // A field the layouts do not have is spelled, but a build that does not know it refuses the name.
    const extra = f16AttnPick(spec({ sgCount: 4, BKV: 64, PAD: 8, mode: 'wide' }));
    expect(extra).toContain('mode_wide');
    expect(f16AttnSpecOfPick(extra, 64, 32)).toBeNull();
    expect(() => f16AttnPick(spec({ sgCount: 4, BKV: 64, PAD: 8, mode: 'a-b' }))).toThrow(/no pick spelling/);
    expect(f16AttnSpecOfPick('16x16x16.BKV_24.PAD_8.sgCount_4', 64, 32)).toBeNull(); // BKV not a multiple of N
    expect(f16AttnSpecOfPick('16x16x16.BKV_64.sgCount_4', 64, 32)).toBeNull(); // PAD missing
    expect(f16AttnSpecOfPick('16x16x16.BKV_64.BKV_64.PAD_8.sgCount_4', 64, 32)).toBeNull(); // twice
    expect(f16AttnSpecOfPick('16x16x16.PAD_8.BKV_64.sgCount_4', 64, 32)).toBeNull(); // not the canonical order
    expect(f16AttnSpecOfPick('16x16x16.BKV_64.PAD_8.__proto__.sgCount_4', 64, 32)).toBeNull();
    expect(f16AttnSpecOfPick('128x128k8_8x16', 64, 32)).toBeNull(); // an fp32 GEMM choice
    // The backward: one name when both kernels share the spec, two joined by '/' when not.
    const shared = F16_ATTN_BWD_LAYOUTS.filter((l) => !('dq' in l)).map((l) => spec(l));
    const [a, b] = [shared[0], shared[shared.length - 1]];
    expect(f16AttnBwdPick({ dq: a, dkdv: a })).toBe(f16AttnPick(a));
    expect(f16AttnBwdSpecsOfPick(f16AttnPick(a), 64, 32)).toEqual({ dq: a, dkdv: a });
    const mixed = f16AttnBwdPick({ dq: b, dkdv: a });
    expect(mixed).toBe(`${f16AttnPick(b)}/${f16AttnPick(a)}`);
    expect(f16AttnBwdSpecsOfPick(mixed, 64, 32)).toEqual({ dq: b, dkdv: a });
    expect(f16AttnBwdSpecsOfPick(`${mixed}/${f16AttnPick(a)}`, 64, 32)).toBeNull();
    // The pairs (stored dS: both kernels 'ds'; split, prefetched dk/dv) parse back; a pair with one kernel storing dS is refused.
    const pairs = F16_ATTN_BWD_LAYOUTS.filter((l) => 'dq' in l).map(f16AttnBwdLayoutPair);
    expect(pairs.length).toBeGreaterThan(0);
    for (const p of pairs) {
      const specs = { dq: spec(p.dq), dkdv: spec(p.dkdv) };
      const name = f16AttnBwdPick(specs);
      expect(name).toMatch(p.dq.ds ? /^16x16x16\.BKV_\d+\.PAD_8(\.dense)?\.ds\.[^/]*\/16x16x16\.BKV_\d+\.PAD_8(\.colwise)?(\.contig)?(\.dense)?\.ds\.load_(staged|direct)(\.nomask)?(\.prefetch)?\.sgCount_\d(\.split)?(\.uniform)?$/
        : /\/16x16x16\.BKV_\d+\.PAD_8(\.dense)?\.load_staged(\.prefetch)?\.sgCount_\d(\.split)?$/);
      expect(f16AttnBwdSpecsOfPick(name, 64, 32)).toEqual(specs);
    }
    expect(f16AttnBwdSpecsOfPick(f16AttnPick({ ...a, split: true }), 64, 32)).toBeNull(); // split is no dq option
    const ds = spec(pairs[0].dkdv);
    expect(f16AttnBwdSpecsOfPick(f16AttnBwdPick({ dq: a, dkdv: ds }), 64, 32)).toBeNull();
    expect(f16AttnSpecOfPick(f16AttnPick(ds), 64, 32)).toBeNull(); // not a forward spec
  });

  it('the cache keeps f16 attention picks under their own family and code hash; another hash is kept but not applied', () => {
    const key = f16AttnTuneKey('fwd', { B: 16, T: 512, nH: 12, nKV: 12, D: 64 });
    const bkey = f16AttnTuneKey('bwd', { B: 16, T: 512, nH: 12, nKV: 12, D: 64 });
    const fwd = f16AttnPick(spec({ sgCount: 2, BKV: 64, PAD: 8 }));
    const bwd = f16AttnBwdPick({ dq: spec({ sgCount: 2, BKV: 16, PAD: 8 }), dkdv: spec({ sgCount: 2, BKV: 16, PAD: 8 }) });
    const c = new TuneCache();
    c.put(H100, 'f16attn', key, entry([fwd, '16x16x16.BKV_64.PAD_8.sgCount_4.zz_1']));
    c.put(H100, 'f16attn', bkey, entry([bwd]));
    c.put(H100, 'matmul', '8192x768x768NT', entry(['128x128k8_8x16']));
    const back = TuneCache.parse(c.serialize());
    expect(back.get(H100, 'f16attn', key)?.picks[0]).toBe(fwd);
    const file = JSON.parse(c.serialize());
    expect(file.adapters[0].families.f16attn.codeHash).toBe(codeHash('f16attn'));
    expect(new Set([codeHash('f16attn'), codeHash('f16gemm'), codeHash('attention')]).size).toBe(3);
    const device = {};
    expect(back.applyTo(device, H100)).toBe(3);
    expect(tunedPicks(device, 'f16attn', key)).toEqual([fwd]); // the unknown name is dropped
    expect(tunedPicks(device, 'f16attn', bkey)).toEqual([bwd]);
    // A changed kernel (another code hash): its entries stop applying, the other families' stay.
    file.adapters[0].families.f16attn.codeHash = '1-0000000';
    const stale = TuneCache.parse(JSON.stringify(file));
    expect(stale.current(H100, 'f16attn')).toEqual({});
    expect(stale.counts(H100)).toEqual({ current: 1, stale: 2 });
    const d2 = {};
    expect(stale.applyTo(d2, H100)).toBe(1);
    expect(tunedPicks(d2, 'f16attn', key)).toBeUndefined();
    expect(missingJobs([{ family: 'f16attn', key, label: key, pass: 'fwd', shape: { B: 16, T: 512, nH: 12, nKV: 12, D: 64 } }], stale, H100).length).toBe(1);
    // Tuned again: the stale family is replaced under the current hash.
    stale.put(H100, 'f16attn', key, entry([fwd]));
    expect(stale.counts(H100)).toEqual({ current: 2, stale: 0 });
    expect(() => TuneCache.parse(JSON.stringify({ ...file, adapters: [{ ...file.adapters[0], families: { f16attn: { codeHash: codeHash('f16attn'), entries: { 'fwd/D64': entry([fwd]) } } } }] })))
      .toThrow(/not a f16attn choice key/);
  });
});
