// The tuner's f16 attention jobs on the test device, and the model's choice of spec. SwiftShader has no
// shader-f16 (nor subgroup matrices): every f16 attention job says it is skipped and why, times and
// records nothing. The selection runs on the emulated twin (attention-f16.gpu.test.ts): a tuned pick
// serves a call once it passed its check on this runtime, and a pick that fails it is passed over.
import { describe, expect, it } from 'vitest';
import { attentionForwardF16 } from '../../../src/engine/kernels/attention/f16/attention-f16';
import { verifyTunedF16Attention } from '../../../src/engine/kernels/attention/f16/checks';
import type { F16AttnSpec } from '../../../src/engine/kernels/attention/f16/code';
import { f16AttentionBackwardSpecsFor, f16AttentionSpec, f16AttentionSpecFor, f16AttnBwdPick, f16AttnPick, f16AttnTuneKey } from '../../../src/engine/kernels/attention/f16/picks';
import { subgroupSize } from '../../../src/engine/kernels/qgemm/sgmat';
import { SCHEME_PRESETS } from '../../../src/engine/scheme/presets';
import { defaultTrainOptions } from '../../../src/engine/train/options';
import { trainingTuneJobs } from '../../../src/engine/tune';
import { expectSkippedTune } from '../../helpers/tune';
import { madeChoices, resetChoices, setTunedPicks } from '../../../src/engine/tune/store';
import { attentionTestRuntime } from '../../helpers/gpu';

const rt = await attentionTestRuntime();
const noF16 = !rt.gpu.features.shaderF16;

describe('f16 attention in the tuner', () => {
  it.skipIf(!noF16)('without shader-f16 each f16 attention job is skipped with the reason, nothing timed or cached', async () => {
    const jobs = trainingTuneJobs({ ...defaultTrainOptions('micro'), scheme: SCHEME_PRESETS.f16 }).filter((j) => j.family === 'f16attn');
    expect(jobs.length).toBe(2);
    await expectSkippedTune(rt, jobs, 'f16attn', 'f16 attention layouts', /^skipped: this device has no shader-f16/);
  });

  it.skipIf(!noF16)('a call runs its tuned pick once verified on the runtime (emulated twin), a failing pick falls back', async () => {
    // A micro spec of the twin at the device's subgroup size (SwiftShader's 4: 4×4×4 tiles, one lane a row), two subgroups, key blocks of 8.
    const sg = subgroupSize(rt);
    // load 'direct' (matrix loads from the f16 copies): the cheaper twin to compile here, and a spec option the pick carries.
    const a: F16AttnSpec = { cfg: { M: sg, N: 4, K: 4 }, D: 16, sgCount: 2, BKV: 8, sgSize: sg, PAD: 8, load: 'direct' };
    // A pick that fails its check (its twin needs more workgroup memory than the device has), tuned first.
    const huge = { ...a, sgCount: 8, BKV: 1024 };
    const shape = { B: 1, T: 24, nH: 2, nKV: 1, D: 16 };
    const other = { ...shape, T: 40 };
    expect(f16AttentionSpec(rt, 16)).toBeUndefined(); // nothing verified here: the first-passing spec is none
    setTunedPicks(rt.device, 'f16attn', f16AttnTuneKey('fwd', shape), [f16AttnPick(huge), f16AttnPick(a)]);
    // The backward's selection is the same code (a passing pair would cost seconds of compiles here): only a failing pair.
    setTunedPicks(rt.device, 'f16attn', f16AttnTuneKey('bwd', shape), [f16AttnBwdPick({ dq: huge, dkdv: huge })]);
    setTunedPicks(rt.device, 'f16attn', f16AttnTuneKey('fwd', other), [f16AttnPick(huge)]);
    resetChoices(rt.device);
    // Not yet checked on this runtime: not run.
    expect(f16AttentionSpecFor(rt, shape, true)).toBeUndefined();
    const tried = await verifyTunedF16Attention(rt, true);
    expect(tried.map((t) => [t.label, t.ok])).toEqual([
      [`fwd D16 ${f16AttnPick(huge)}`, false], [expect.stringContaining('f16 attention D16'), true], [`bwd D16 ${f16AttnPick(huge)}`, false],
    ]);
    // The first tuned pick that passed: a; the backward and the other shape (failing picks only) fall back: none verified here.
    expect(f16AttnPick(a)).toContain('load_direct');
    expect(f16AttentionSpecFor(rt, shape, true)).toEqual(a);
    expect(f16AttentionBackwardSpecsFor(rt, shape, true)).toBeUndefined();
    expect(f16AttentionSpecFor(rt, other, true)).toBeUndefined();
    // Verified on the twin is not verified for the real kernel.
    expect(f16AttentionSpecFor(rt, shape)).toBeUndefined();
    expect(madeChoices(rt.device).filter((c) => c.family === 'f16attn').map((c) => [c.key, c.source]))
      .toEqual([[f16AttnTuneKey('fwd', shape), 'tuned']]);
    // The model's call (no spec given) runs the tuned pick: a's query blocks of 2·sg rows.
    const n = (rows: number, w: number) => rt.createBuffer('workspace', 'f16attn.sel', (rows + 128) * w * 4);
    const bufs = [n(24, 32), n(24, 16), n(24, 16), n(24, 32), n(2, 24), n(24, 32)];
    try {
      const [q, k, v, o, lse, o16] = bufs;
      const ds = attentionForwardF16(rt, { label: 'sel', ...shape, q, k, v, o, lse, emulate: true, o16: { out: o16, elem: 'f32' }, qkv16: { q, k, v, elem: 'f32' } });
      expect(ds[0].workgroups.slice(0, 2)).toEqual([Math.ceil(24 / (2 * sg)), 2]);
    } finally {
      bufs.forEach((x) => rt.mem.free(x));
    }
  });
});
