/**
 * The f16 flash-attention forward (kernels/attention/f16). SwiftShader has neither shader-f16 nor
 * subgroup matrices, so what runs here is the generated kernel's emulated twin (every f16 cast a
 * quantizeToF16, every subgroup-matrix op a plain function) against the float64 reference on
 * f16-rounded q, k, v (the forward reading f16 copies of them, as the model runs it, and staging fp32 ones), within F16_ATTN_TOL (the backward: attentionBackwardRef on f16-rounded q, k, v,
 * dO within F16_ATTN_BWD_TOL); and the fallback (no verified kernel: the caller keeps
 * fp32 attention). The kernel itself runs on the lent GPU: bench/f16-attn-device.ts.
 */
import { describe, expect, it } from 'vitest';
import { attentionBackwardF16, attentionForwardF16 } from '../../src/engine/kernels/attention/f16/attention-f16';
import { checkAttentionBackwardF16, checkAttentionF16, checkF16AttnBwdSpecs, checkF16AttnSpec, enableF16Attention } from '../../src/engine/kernels/attention/f16/checks';
import { f16AttnBwdCandidates, f16AttnBwdLabel, firstPassingBwd } from '../../src/engine/kernels/attention/f16/layouts';
import { f16AttentionBackwardSpecs, f16AttentionHeadDims, f16AttentionSpec } from '../../src/engine/kernels/attention/f16/picks';
import { f16AttnBwdPairError, f16AttnBwdSpecError, f16AttnDkdvCode, f16AttnDsHeadElems, f16AttnDsOffset } from '../../src/engine/kernels/attention/f16/code-bwd';
import { attentionForwardRef, forEachScoreRef } from '../../src/engine/kernels/attention/attention.ref';
import { f16AttnInputElems } from '../../src/engine/kernels/attention/f16/code';
import { roundF16Array } from '../../src/engine/quant/f16';
import { Rng } from '../../src/engine/util/rng';
import { f16AttnBlockQ, f16AttnForwardCode, f16AttnSpecError, type F16AttnSpec } from '../../src/engine/kernels/attention/f16/code';
import { attentionTestRuntime } from '../helpers/gpu';

const rt = await attentionTestRuntime();

// Micro specs (SwiftShader compiles the unrolled twin slowly: a few call sites each): two subgroups
// (BQ 16) of 8×8×8 tiles, two lanes per row, key blocks of 8 (several per query block); one
// subgroup of 8×4×8 tiles (M ≠ N ≠ K like the device's 16×8×16), one lane per row, key blocks of 16 (> BQ).
const small: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
const odd: F16AttnSpec = { cfg: { M: 8, N: 4, K: 8 }, D: 8, sgCount: 1, BKV: 16, sgSize: 8, PAD: 8 };

describe('f16 attention forward, emulated subgroup matrices', () => {
  it('matches the reference: causal mask, online softmax over several key blocks, partial blocks, GQA', async () => {
    // From f16 copies staged through workgroup memory (the default load) and read by the matrix loads
    // ('direct'); f16AttnCheckCases' third case makes row maxima jump between key blocks.
    for (const s of [small, odd, { ...small, load: 'direct' as const }]) {
      expect(f16AttnSpecError(s, rt.device.limits.maxComputeWorkgroupStorageSize, 1024, true, true)).toBeNull();
      const r = await checkF16AttnSpec(rt, s, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    // G = 3 (three query heads on one KV head).
    const r = await checkAttentionF16(rt, small, { B: 1, T: 29, nH: 3, nKV: 1 }, { emulate: true });
    expect([r.error, r.ok]).toEqual([undefined, true]);
    expect(r.maxErrO).toBeLessThan(1e-3);
    // The kernel staging fp32 q, k, v (and the earlier whole-row max scan): kept for side-by-side timing.
    const staged = await checkAttentionF16(rt, small, { B: 1, T: 29, nH: 2, nKV: 1 }, { emulate: true, inputs: 'f32', rowMax: 'scan' });
    expect([staged.error, staged.ok]).toEqual([undefined, true]);
  });

  it('backward (dq kernel with Di, then dk/dv summing the group\'s heads) matches the reference', async () => {
    // 8×4×8 tiles, two subgroups of 8 lanes, blocks of 8: several blocks each way, partial ones, G = 2.
    const s: F16AttnSpec = { ...odd, sgCount: 2, BKV: 8 };
    for (const k of ['dq', 'dkdv'] as const) expect(f16AttnBwdSpecError(k, s, rt.device.limits.maxComputeWorkgroupStorageSize, 1024, true, true)).toBeNull();
    // From f16 copies of q, k, v, dO: staged (the default load), and read by the matrix loads.
    for (const l of [s, { ...s, load: 'direct' as const }]) {
      const r = await checkF16AttnBwdSpecs(rt, { dq: l, dkdv: l }, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    // The kernels staging fp32 q, k, v, dO (the earlier ones, kept for side-by-side timing).
    const staged = await checkAttentionBackwardF16(rt, { dq: s, dkdv: s }, { B: 1, T: 21, nH: 2, nKV: 1 }, { emulate: true, inputs: 'f32' });
    expect([staged.error, staged.ok]).toEqual([undefined, true]);
    // Candidates are the layouts both kernels fit, staged first: at 48 KiB all four at D 64 each way,
    // at 32 KiB the two-subgroup staged ones (fp32 inputs: no direct ones) and every direct one (nothing staged).
    const lim = { maxComputeWorkgroupStorageSize: 49152, maxComputeInvocationsPerWorkgroup: 1024 };
    // Then the stored-dS pairs (dq from dS + dk/dv storing it; f16 inputs only), those that fit.
    const name = (x: F16AttnSpec) => `${x.sgCount}/${x.BKV}${x.wide ? 'w' : ''}${x.load === 'direct' ? 'd' : ''}${x.split ? 's' : ''}${x.prefetch ? 'p' : ''}${x.contig ? 'c' : ''}${x.dense ? 'n' : ''}${x.uniform ? 'u' : ''}${x.nomask ? 'm' : ''}${x.colwise ? 'k' : ''}`;
    const list = (l: typeof lim, inputs16?: boolean) => f16AttnBwdCandidates([{ M: 16, N: 16, K: 16 }], 64, 32, l, undefined, false, inputs16)
      .map((c) => (c.dq.ds ? `ds ${name(c.dq)}+${name(c.dkdv)}` : c.dkdv.split || c.dkdv.prefetch ? `${name(c.dq)}+${name(c.dkdv)}` : name(c.dq)));
    expect(list(lim)).toEqual(['ds 4/64wn+2/32sn', 'ds 4/64+2/32s', '2/16', '4/16', '2/32', '4/32', '2/16d', '4/16d', '2/32d', '4/32d', 'ds 4/64+2/16sp', 'ds 4/64+2/16spc', 'ds 4/64+2/16s', 'ds 4/64+2/16p', 'ds 4/64+2/16', 'ds 4/64+2/16c',
      'ds 4/32+2/16', 'ds 2/64+2/16', 'ds 4/64+4/16s', 'ds 4/64+4/16', 'ds 4/64+2/16d', 'ds 4/64+2/32sp', 'ds 4/64+4/16sp', 'ds 4/64+4/32sp', 'ds 2/64w+2/16sp', 'ds 4/64w+2/16sp', '2/16+2/16sp', '2/16+2/16s', '2/16+2/32s',
      'ds 4/64n+2/32sn', 'ds 4/64n+2/64sn', 'ds 4/64n+2/32spn', 'ds 4/64+2/64s', 'ds 2/64wn+2/32sn',
      'ds 4/64n+2/16sn', 'ds 4/64n+4/32sn', '2/16n+2/32sn', 'ds 4/64u+2/32su', 'ds 4/64u+4/32su', 'ds 4/64+2/32sm', 'ds 4/64n+2/32snm',
      'ds 4/64d+2/32s', 'ds 4/64du+2/32sn', 'ds 4/64wdu+2/32sn', 'ds 4/64+2/32sk', 'ds 4/64n+2/32snmk',
      'ds 4/64du+2/32snmk', 'ds 4/64du+2/64snmk']);
    // The first passing candidate, and where it stores dS the first passing one that recomputes (no more checked).
    const c = f16AttnBwdCandidates([{ M: 16, N: 16, K: 16 }], 64, 32, lim);
    const checked: string[] = [];
    const pick = async (ok: (x: (typeof c)[number]) => boolean) => firstPassingBwd(c, async (x) => (checked.push(f16AttnBwdLabel(x)), ok(x)));
    const dsFirst = await pick((x) => !!x.dq.ds || x.dkdv.split === true);
    expect([dsFirst.first?.dq.ds, dsFirst.first?.dkdv.prefetch, dsFirst.recompute?.dkdv.split, dsFirst.recompute?.dkdv.prefetch]).toEqual([true, undefined, true, true]);
    expect(checked.length).toBe(10); // the first (stored-dS) pair, the other stored-dS ones skipped, 8 failing, the first split one
    expect(await pick((x) => !x.dq.ds)).toEqual({ first: c[2], recompute: c[2] });
    expect(await pick((x) => !!x.dq.ds)).toEqual({ first: c[0] });
    expect(list({ ...lim, maxComputeWorkgroupStorageSize: 32768 }, false)).toEqual(['2/16', '2/32', '2/16+2/16s', '2/16+2/32s', '2/16n+2/32sn']);
    expect(list({ ...lim, maxComputeWorkgroupStorageSize: 32768 })).toEqual(['2/16', '2/32', '2/16d', '4/16d', '2/32d', '4/32d', 'ds 4/32+2/16', 'ds 2/64+2/16', 'ds 2/64w+2/16sp', '2/16+2/16sp', '2/16+2/16s', '2/16+2/32s', 'ds 2/64wn+2/32sn', '2/16n+2/32sn',
      'ds 4/64d+2/32s', 'ds 4/64du+2/32sn', 'ds 4/64wdu+2/32sn', 'ds 4/64du+2/32snmk']);
  });

  it('backward over the stored dS (dk/dv storing dS, dq a GEMM over it) matches the reference, in chunks of pairs', async () => {
    // Own rows 16 (the stored tiles' side) each way; dq takes bigger query and key blocks than dk/dv,
    // dk/dv staged and direct, 8×8×8 with two lanes a row and 8×4×8 with one. The checks' scratch holds
    // half the pairs (two chunks) and is NaN where nothing is stored: a read of an unstored entry fails.
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8, ds: true };
    const b: F16AttnSpec = { ...odd, sgCount: 2, BKV: 8, ds: true };
    for (const specs of [{ dq: { ...a, BKV: 16 }, dkdv: a }, { dq: { ...b, BKV: 16 }, dkdv: { ...b, load: 'direct' as const } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    // G = 3 and a dq block (32 queries) wider than dk/dv's (16 keys): four subgroups, or two of two row tiles each (wide).
    for (const dq of [{ ...a, sgCount: 4 }, { ...a, wide: true }]) {
      const r = await checkAttentionBackwardF16(rt, { dq, dkdv: a }, { B: 1, T: 45, nH: 3, nKV: 1 }, { emulate: true });
      expect([r.error, r.ok]).toEqual([undefined, true]);
    }
    expect(f16AttnBwdSpecError('dkdv', { ...a, wide: true }, 49152, 1024, true, true)).toMatch(/wide is an option of the dq-from-dS kernel/);
    expect(f16AttnBlockQ({ ...a, wide: true })).toBe(32);
    // dq matrix-loading dS's tiles as stored (load 'direct', 16×16×16 tiles): two subgroups (the second's
    // row tile past T in the last block), and one wide subgroup with the uniform subgroup index; G = 3 too.
    const c: F16AttnSpec = { cfg: { M: 16, N: 16, K: 16 }, D: 16, sgCount: 1, BKV: 16, sgSize: 16, PAD: 8, ds: true };
    const dqDirect = { ...c, sgCount: 2, load: 'direct' as const };
    const rd = await checkF16AttnBwdSpecs(rt, { dq: dqDirect, dkdv: c }, true);
    expect(rd).toEqual({ label: rd.label, ok: true });
    for (const dq of [dqDirect, { ...c, wide: true, load: 'direct' as const, uniform: true }]) {
      const r = await checkAttentionBackwardF16(rt, { dq, dkdv: c }, { B: 1, T: 45, nH: 3, nKV: 1 }, { emulate: true });
      expect([r.error, r.ok]).toEqual([undefined, true]);
    }
    expect(f16AttnBwdSpecError('dq', { ...dqDirect, dense: true }, 49152, 1024, true, true)).toMatch(/no dense/);
  });

  it('split dk/dv (paired subgroups: Sᵀ and dv, dPᵀ and dk) matches the reference, recomputing and storing dS', async () => {
    // Two and four subgroups (one and two pairs), query blocks of 8 and 16, 8×8×8 and 8×4×8; fp32 inputs too.
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
    const b: F16AttnSpec = { ...odd, sgCount: 4, BKV: 16 };
    for (const specs of [{ dq: a, dkdv: { ...a, split: true } }, { dq: { ...a, BKV: 16, ds: true }, dkdv: { ...a, BKV: 16, split: true, contig: true, ds: true } }, { dq: b, dkdv: { ...b, split: true } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    const f32 = await checkAttentionBackwardF16(rt, { dq: a, dkdv: { ...a, split: true } }, { B: 1, T: 21, nH: 2, nKV: 1 }, { emulate: true, inputs: 'f32' });
    expect([f32.error, f32.ok]).toEqual([undefined, true]);
    expect(f16AttnBwdSpecError('dq', { ...a, split: true }, 49152, 1024, true, true)).toMatch(/option of the dk\/dv kernel/);
    expect(f16AttnBwdSpecError('dkdv', { ...a, sgCount: 3, split: true }, 49152, 1024, true, true)).toMatch(/3 subgroups must pair up/);
    expect(f16AttnBwdSpecError('dkdv', { ...a, load: 'direct', split: true }, 49152, 1024, true, true)).toMatch(/load 'staged'/);
  });

  it('prefetched dk/dv (the next query block\'s rows in registers) matches the reference, split or not, recomputing and storing dS', async () => {
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
    // Across the group's heads (G = 2 in the first case), split with one and two pairs or not split
    // (8×4×8 left out: SwiftShader takes ~50 s over it).
    for (const specs of [{ dq: a, dkdv: { ...a, split: true, prefetch: true } }, { dq: { ...a, BKV: 16, ds: true }, dkdv: { ...a, sgCount: 4, split: true, prefetch: true, ds: true } },
      { dq: { ...a, ds: true }, dkdv: { ...a, BKV: 16, prefetch: true, contig: true, ds: true } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    expect(f16AttnBwdSpecError('dkdv', { ...a, prefetch: true }, 49152, 1024, true, false)).toMatch(/prefetches f16 copies it stages/);
    expect(f16AttnBwdSpecError('dq', { ...a, prefetch: true }, 49152, 1024, true, true)).toMatch(/prefetch is an option of the dk\/dv kernel/);
    expect(f16AttnBwdSpecError('dq', { ...a, contig: true }, 49152, 1024, true, true)).toMatch(/contig is an option of the dk\/dv kernel/);
  });

  it('dense kernels (no causal tile skips: masked tiles multiply zeros) match the reference, forward and backward', async () => {
    // Forward: two subgroups of 8 rows, key blocks of 8: subgroup 0 skips a query block's last key block unless dense.
    const f = { ...small, dense: true };
    expect(f16AttnForwardCode(small, { emulate: true })).toMatch(/<= rmax\)/);
    expect(f16AttnForwardCode(f, { emulate: true })).not.toMatch(/<= rmax\)/);
    const fr = await checkF16AttnSpec(rt, f, true);
    expect(fr).toEqual({ label: fr.label, ok: true });
    expect(fr.label).toMatch(/ dense$/);
    // Recomputing dq + dk/dv not split (subgroup 1's first query tile is masked), and the stored dS with
    // dk/dv split over two pairs (the second pair's first query tiles are masked) and a dq of four subgroups,
    // or of two wide ones (two row tiles each).
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8, dense: true };
    const ds = { dq: { ...a, sgCount: 4, BKV: 16, ds: true }, dkdv: { ...a, sgCount: 4, split: true, ds: true } };
    expect(f16AttnDkdvCode(ds.dkdv, { emulate: true, inputs: 'f16' })).not.toMatch(/>= pk0\)/);
    expect(f16AttnDkdvCode({ ...ds.dkdv, dense: undefined }, { emulate: true, inputs: 'f16' })).toMatch(/>= pk0\)/);
    for (const specs of [{ dq: a, dkdv: a }, ds, { dq: { ...a, BKV: 16, wide: true, ds: true }, dkdv: { ...a, split: true, ds: true } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
  });

  it('uniform kernels (the subgroup index through subgroupBroadcastFirst, the skips kept) match the reference, forward and backward', async () => {
    const f = { ...small, uniform: true };
    expect(f16AttnForwardCode(f, { emulate: true })).toMatch(/let sg = subgroupBroadcastFirst\(lid \/ 16u\);/);
    const fr = await checkF16AttnSpec(rt, f, true);
    expect(fr).toEqual({ label: fr.label, ok: true });
    expect(fr.label).toMatch(/ uniform$/);
    // The stored dS with dk/dv split over two pairs (the second pair's first query tiles skipped) and a dq of four subgroups.
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 4, BKV: 8, sgSize: 16, PAD: 8, uniform: true };
    const specs = { dq: { ...a, BKV: 16, ds: true }, dkdv: { ...a, split: true, ds: true } };
    expect(f16AttnDkdvCode(specs.dkdv, { emulate: true, inputs: 'f16' })).toMatch(/^enable subgroups;[^]*subgroupBroadcastFirst/);
    const r = await checkF16AttnBwdSpecs(rt, specs, true);
    expect(r).toEqual({ label: r.label, ok: true });
  });

  it('dk/dv without the mask past the diagonal (nomask) matches the reference, recomputing and storing dS', async () => {
    // Query blocks of 8 past the diagonal take the unmasked path, the diagonal and partial last blocks the masked one; split over one pair, contiguous columns too.
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
    const code = f16AttnDkdvCode({ ...a, nomask: true }, { emulate: true, inputs: 'f16' });
    expect(code).toMatch(/if \(qs >= k0 \+ 15u && qs \+ 8u <= P\.T\)/);
    for (const specs of [{ dq: a, dkdv: { ...a, nomask: true } }, { dq: { ...a, BKV: 16, ds: true }, dkdv: { ...a, split: true, contig: true, nomask: true, ds: true } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    expect(f16AttnBwdSpecError('dq', { ...a, nomask: true }, 49152, 1024, true, true)).toMatch(/nomask is an option of the staged dk\/dv kernel/);
    expect(f16AttnBwdSpecError('dkdv', { ...a, load: 'direct', nomask: true }, 49152, 1024, true, true)).toMatch(/nomask is an option of the staged dk\/dv kernel/);
    expect(f16AttnSpecError({ ...a, nomask: true })).toMatch(/nomask is an option of the backward/);
  });

  it('dk/dv with its SIMT by columns (colwise) matches the reference, recomputing and storing dS', async () => {
    // Two lanes a column (BKV 8 of 16 lanes), and two column sets a lane (BKV 32) split and unmasked past the diagonal.
    const a: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
    expect(f16AttnDkdvCode({ ...a, colwise: true }, { emulate: true, inputs: 'f16' })).toMatch(/let r = lane \/ 8u \+ 6u;/);
    // And with dense (the combination the candidates list last).
    const split = { ...a, BKV: 32, split: true, nomask: true, colwise: true, ds: true };
    for (const specs of [{ dq: a, dkdv: { ...a, colwise: true } }, { dq: { ...a, BKV: 16, ds: true }, dkdv: split }, { dq: { ...a, BKV: 16, ds: true, dense: true }, dkdv: { ...split, dense: true } }]) {
      const r = await checkF16AttnBwdSpecs(rt, specs, true);
      expect(r).toEqual({ label: r.label, ok: true });
    }
    expect(f16AttnBwdSpecError('dq', { ...a, colwise: true }, 49152, 1024, true, true)).toMatch(/colwise is an option of the staged dk\/dv kernel/);
    expect(f16AttnBwdSpecError('dkdv', { ...a, colwise: true, contig: true }, 49152, 1024, true, true)).toMatch(/one at a time/);
  });

  it('the stored dS is the reference dS at f16AttnDsOffset, 0 where masked in a stored tile', async () => {
    const s: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8, ds: true };
    const [B, T, nH, nKV, D] = [1, 37, 2, 1, 16];
    const G = nH / nKV;
    const rng = new Rng(5);
    const q = roundF16Array(rng.uniformArray(B * T * nH * D).map((x) => 3 * x));
    const k = roundF16Array(rng.uniformArray(B * T * nKV * D));
    const v = roundF16Array(rng.uniformArray(B * T * nKV * D));
    const dO = roundF16Array(rng.uniformArray(B * T * nH * D));
    const fwd = attentionForwardRef(q, k, v, B, T, nH, nKV, D);
    const [o, lse] = [Float32Array.from(fwd.o), Float32Array.from(fwd.lse)];
    const bufs: GPUBuffer[] = [];
    const up = (x: Float32Array) => (bufs.push(rt.upload('workspace', 'ds.test', x)), bufs[bufs.length - 1]);
    const copy = (x: Float32Array, w: number) => { const p = new Float32Array(f16AttnInputElems(B * T, w)); p.set(x); return up(p); };
    try {
      const headElems = f16AttnDsHeadElems(T);
      const scratch = up(new Float32Array(B * nKV * G * headElems).fill(NaN));
      const nk = B * T * nKV * D;
      const args = {
        label: 'ds.test', B, T, nH, nKV, D, q: up(q), k: up(k), v: up(v), o: up(o), lse: up(lse), dO: up(dO),
        dq: up(new Float32Array(B * T * nH * D)), dk: up(new Float32Array(nk)), dv: up(new Float32Array(nk)), workspace: up(new Float32Array(B * nH * T)),
        specs: { dq: s, dkdv: s }, emulate: true, qkv16: { q: copy(q, nH * D), k: copy(k, nKV * D), v: copy(v, nKV * D), dO: copy(dO, nH * D), elem: 'f32' as const },
      };
      // Without a scratch that holds one pair's dS the stored-dS specs refuse to run.
      expect(() => attentionBackwardF16(rt, args)).toThrow(/stores dS and needs a dsScratch of at least one \(b, KV head\) pair's \d+ bytes \(none given\)/);
      rt.run(attentionBackwardF16(rt, { ...args, dsScratch: scratch }));
      const got = new Float32Array(await rt.read(scratch, 0, B * nKV * G * headElems * 4));
      let mag = 0;
      let err = 0;
      let masked = 0;
      for (let h = 0; h < nH; h++) {
        const base = h * headElems; // B 1, nKV 1: head h is the chunk's h
        forEachScoreRef({ q, k, v, o, lse, dO, B, T, nH, nKV, D }, 0, h, (t, j, _p, ds) => {
          mag = Math.max(mag, Math.abs(ds));
          err = Math.max(err, Math.abs(got[base + f16AttnDsOffset(T, t, j)] - ds));
        });
        for (let t = 0; t < T; t++) for (let j = t + 1; j < 16 * Math.ceil((t + 1) / 16); j++) masked = Math.max(masked, Math.abs(got[base + f16AttnDsOffset(T, t, j)]));
      }
      expect(err / mag).toBeLessThan(2e-3);
      expect(masked).toBe(0);
      expect(() => f16AttnDsOffset(T, 3, 16)).toThrow(/no tile for query 3, key 16/);
    } finally {
      bufs.forEach((x) => rt.mem.free(x));
    }
  });

  it('the real kernel is written with subgroup matrices and f16 staging', () => {
    const code = f16AttnForwardCode(small);
    expect(code).toContain('enable chromium_experimental_subgroup_matrix;');
    expect(code).toContain('subgroupMatrixMultiplyAccumulate(');
    expect(code).toContain('vec4<f16>(');
    expect(code).not.toContain('emuMMA');
    // From f16 q/k/v copies, staged: 16-byte loads split by bitcast into the K/V area, matrix loads from there.
    const staged16 = f16AttnForwardCode(small, { inputs: 'f16' });
    expect(staged16).toContain('var<storage, read> k: array<vec4<u32>>');
    expect(staged16).toContain('bitcast<vec4<f16>>(w.zw)');
    expect(staged16).toContain('subgroupMatrixLoad<RT, col_major>(&KV,');
    expect(staged16).not.toContain('vec4<f16>(select');
    // Direct: K and V tiles loaded from storage, no K/V staging; the row max over the lanes by shuffles.
    const direct = f16AttnForwardCode({ ...small, load: 'direct' }, { inputs: 'f16' });
    expect(direct).toContain('subgroupMatrixLoad<RT, col_major>(&k, kvo');
    expect(direct).toContain('subgroupShuffleXor(mx, 1u)');
    expect(direct).not.toMatch(/var<workgroup> KV|vec4<f16>\(/);
  });

  it('rejects specs it cannot build and head dims with no verified kernel', () => {
    expect(f16AttnSpecError({ ...small, D: 20 })).toMatch(/head dim 20/);
    expect(f16AttnSpecError({ ...small, BKV: 12 })).toMatch(/BKV=12/);
    expect(f16AttnSpecError({ ...small, PAD: 4 })).toMatch(/PAD=4/);
    expect(f16AttnSpecError({ ...small, sgSize: 12 })).toMatch(/subgroup size 12/);
    expect(f16AttnSpecError({ ...small, load: 'direct' })).toMatch(/load 'direct' reads f16/);
    // The stored dS: a backward option, of both kernels, f16 inputs, own rows a multiple of 16, dq staged.
    const ds = { ...small, ds: true };
    expect(f16AttnSpecError(ds, 49152, 1024, true, true)).toMatch(/option of the backward/);
    expect(f16AttnBwdSpecError('dq', ds, 49152, 1024, true, false)).toMatch(/ds \(the stored dS\) reads f16 copies/);
    expect(f16AttnBwdSpecError('dkdv', { ...ds, sgCount: 1 }, 49152, 1024, true, true)).toMatch(/8 own rows must be a multiple of 16/);
    expect(f16AttnBwdSpecError('dq', { ...ds, load: 'direct' }, 49152, 1024, true, true)).toMatch(/8x8 tiles must be the stored dS's 16x16/);
    expect(f16AttnBwdSpecError('dkdv', { ...ds, load: 'direct' }, 49152, 1024, true, true)).toBeNull();
    expect(f16AttnBwdPairError({ dq: ds, dkdv: small })).toMatch(/both use the stored dS/);
    expect(f16AttnSpecError({ cfg: { M: 8, N: 4, K: 4 }, D: 12, sgCount: 1, BKV: 16, sgSize: 8, PAD: 8 }, 49152, 1024, false, true)).toMatch(/multiple of 8/);
    const b = rt.createBuffer('workspace', 'x', 64);
    try {
      expect(() => attentionForwardF16(rt, { label: 'L0.attn', B: 1, T: 4, nH: 1, nKV: 1, D: 48, q: b, k: b, v: b, o: b, lse: b }))
        .toThrow(/no verified f16 attention kernel for head dim 48/);
      expect(() => attentionBackwardF16(rt, { label: 'L0.attn', B: 1, T: 4, nH: 1, nKV: 1, D: 64, q: b, k: b, v: b, o: b, lse: b, dO: b, dq: b, dk: b, dv: b, workspace: b }))
        .toThrow(/no verified f16 attention backward for head dim 64/);
    } finally {
      rt.mem.free(b);
    }
  });

  it('enableF16Attention verifies nothing without shader-f16 and subgroup matrices (fp32 attention stays)', async () => {
    if (rt.gpu.features.shaderF16 && rt.gpu.features.subgroupMatrix) return; // a real GPU: bench/f16-attn-device.ts
    const p = await enableF16Attention(rt);
    expect(p.present).toBe(false);
    expect(p.why).toMatch(/no shader-f16|no subgroup matrices/);
    expect(f16AttentionSpec(rt, 64)).toBeUndefined();
    expect(f16AttentionBackwardSpecs(rt, 64)).toBeUndefined();
    expect(f16AttentionHeadDims(rt)).toEqual([]);
  });
});
