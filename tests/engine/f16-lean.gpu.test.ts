/**
 * The lean f16 workspace of a memory-saving scheme (RunPlan.f16Lean, issue 35: agoq-f16, whose
 * activations are stored below 16 bits): each f16 GEMM casts its weight into f16.w just before it runs
 * (one weight's copy instead of all), and gate's fp32 live copy is f16.a (f16GateInA: the forward's X
 * copies go to f16.x, the SwiGLU backward dequantizes gate's rows block by block into dh). On
 * SwiftShader through the f32 twin with the emulated f16 attention, a micro agoq-f16 step is bit for
 * bit the step with the full workspace (f16Lean: false); a Trainer allocates exactly its plan.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { resolvePlan, type RunPlan } from '../../src/engine/plan/run-plan';
import { resolveTrainingPlan } from '../../src/engine/plan/train-plan';
import { SCHEME_PRESETS } from '../../src/engine/scheme/presets';
import { parseScheme, type Scheme } from '../../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../../src/engine/train/options';
import { CharTokenizer } from '../../src/engine/train/tokenizer/tokenizer';
import { Trainer } from '../../src/engine/train/trainer';
import { attentionTestRuntime } from '../helpers/gpu';
import { expectSameStep } from '../helpers/compare';
import { f16TwinMicro, twinStep } from '../helpers/model';

const rt = await attentionTestRuntime();
const micro = f16TwinMicro(11, 29);
const { cfg, B, T, layout, DEV } = micro;
const AGOQ = SCHEME_PRESETS['agoq-f16'];
/**
 * agoq-f16 with gate and up INT4 per tensor: micro's SwiGLU backward then runs in blocks (agoq-f16's
 * per-128 groups put micro's rows at 256-byte-aligned scales only whole), so gate's live copy is f16.a.
 */
const AGOQ_BLOCKS = parseScheme({
  ...AGOQ, name: 'agoq-f16-swiglu-tensor',
  layer: { ...AGOQ.layer, saved: { ...AGOQ.layer.saved, swiglu: { ...AGOQ.layer.saved.swiglu!, granularity: 'tensor' } } },
});

const plan = (scheme: Scheme, f16Lean?: boolean) => resolvePlan(cfg, B, T, { scheme, f16Device: DEV, f16Twin: true, f16Lean });

const step = (p: RunPlan) => twinStep(rt, micro, p);

describe('the lean f16 workspace (agoq-f16, f32 twin)', () => {
  it('the plan: lean by default for agoq-f16 only, one weight in f16.w, gate live in f16.a', () => {
    const lean = plan(AGOQ_BLOCKS);
    const full = plan(AGOQ_BLOCKS, false);
    expect(lean.swigluRows).toBeLessThan(lean.dims.N);
    expect(lean.f16Lean).toBe(true);
    expect(full.f16Lean).toBe(false);
    expect(lean.f16Live.gate).toBe('f16.a');
    expect(full.f16Live.gate).toBeUndefined();
    const bytes = (p: RunPlan, k: string) => p.buffers.find((b) => b.key === k)?.bytes;
    expect(bytes(lean, 'live.gate')).toBeUndefined();
    expect(bytes(full, 'live.gate')).toBe(lean.dims.N * lean.dims.F * 4);
    // The twin's f32 elements: the widest weight (gate/up/down, C·F) alone.
    expect(bytes(lean, 'f16.w')).toBe(cfg.hidden_size * cfg.intermediate_size * 4);
    expect(bytes(full, 'f16.w')).toBeGreaterThan(7 * cfg.num_hidden_layers * bytes(lean, 'f16.w')! / 3);
    expect(bytes(lean, 'f16.a')).toBeGreaterThanOrEqual(lean.dims.N * lean.dims.F * 4);
    // Not lean: activations stored in 16 bits or fp32.
    for (const s of ['f16', 'int8-f16', 'taco-f16'] as const) {
      const p = resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS[s], f16Device: DEV, f16Twin: true });
      expect([p.f16Lean, p.f16Live.gate], s).toEqual([false, undefined]);
    }
    // agoq-f16 itself: lean; gate in f16.a where its SwiGLU backward runs in blocks (base), not at micro's whole-tensor block.
    expect([plan(AGOQ).f16Lean, plan(AGOQ).swigluRows, plan(AGOQ).f16Live.gate]).toEqual([true, B * T, undefined]);
    const base = resolvePlan(PRESETS.base, 16, 512, { scheme: AGOQ, f16Device: DEV });
    expect([base.f16Lean, base.f16Live.gate, base.swigluRows]).toEqual([true, 'f16.a', 1024]);
    // No gate in f16.a without a backward or with the f16 GEMMs resolved to fp32; no lean weights without f16 GEMMs.
    expect(resolvePlan(cfg, B, T, { scheme: AGOQ_BLOCKS, f16Device: DEV, f16Twin: true, training: false }).f16Live.gate).toBeUndefined();
    const noF16 = resolvePlan(cfg, B, T, { scheme: AGOQ_BLOCKS, f16Device: { shaderF16: false, tensorCores: false } });
    expect(noF16.f16Live.gate).toBeUndefined();
    expect(noF16.buffers.some((b) => b.key.startsWith('f16.'))).toBe(false);
  });

  it.each([['agoq-f16', AGOQ], ['its per-tensor SwiGLU variant (gate in f16.a)', AGOQ_BLOCKS]] as const)('%s: a step is bit for bit the full-workspace step; weights cast before each f16 GEMM, gate dequantized in blocks', async (_, scheme) => {
    const ref = await step(plan(scheme, false));
    const p = plan(scheme);
    const got = await step(p);
    try {
      expectSameStep(got, ref);
      expect(got.grads.some((g) => g !== 0)).toBe(true);
      const casts = (labels: string[]) => labels.filter((l) => l.startsWith('f16.w.'));
      // Full: every weight in one cast, the forward's first dispatch. Lean: each right before its forward GEMM and again before its dX GEMM.
      const names = layout.views.filter((v) => v.name.startsWith('model.layers.') && v.shape.length === 2).map((v) => v.name);
      expect([ref.fwd[0], ...casts(ref.fwd), ...casts(ref.bwd)]).toEqual(['f16.w[f32→f16]']);
      expect(casts(got.fwd).map((l) => l.replace(/\[.*$/, '')).sort()).toEqual(names.map((n) => `f16.w.${n}`).sort());
      expect(casts(got.bwd).length).toBe(names.length);
      for (const labels of [got.fwd, got.bwd]) {
        labels.forEach((l, i) => {
          if (l.startsWith('f16.w.')) expect(labels[i + 1], l).toMatch(/^L\d+\.(\w+_proj|\w+\.dx)/);
        });
      }
      // Gate in f16.a: no whole dequantize in the backward, its rows per SwiGLU block instead.
      const L0 = (labels: string[], re: RegExp) => labels.filter((l) => l.startsWith('L0.') && re.test(l));
      const gateRows = /swiglu\.bwd\.rows\d+\.gate/;
      expect(L0(ref.bwd, gateRows)).toEqual([]);
      // Whole-tensor dequantizes (unlabeled by tensor): gate's, one a layer, gone where gate's rows come in blocks.
      const whole = (labels: string[]) => labels.filter((l) => l.startsWith('dequantize.')).length;
      if (p.f16Live.gate === 'f16.a') {
        expect(L0(got.bwd, gateRows).length).toBe(p.dims.N / p.swigluRows);
        expect(whole(ref.bwd) - whole(got.bwd)).toBe(cfg.num_hidden_layers);
        // The forward's X copies (h1, h2, act: INT4-stored, no f16 cells) are written to f16.x.
        expect(got.fwd.filter((l) => l.includes('.f16.a['))).toEqual([]);
      } else {
        expect(L0(got.bwd, gateRows)).toEqual([]);
        expect(whole(got.bwd)).toBe(whole(ref.bwd));
      }
    } finally {
      ref.model.destroy();
      got.model.destroy();
    }
  }, 300_000);

  it('a Trainer allocates exactly its lean plan', async () => {
    const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
    const tok = CharTokenizer.fromText(text);
    const opts = defaultTrainOptions('micro', { steps: 2, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize }, scheme: AGOQ_BLOCKS });
    const p = resolveTrainingPlan(opts, { device: { shaderF16: true, tensorCores: false }, f16Twin: true });
    expect([p.model.f16Lean, p.model.f16Live.gate]).toEqual([true, 'f16.a']);
    const t = await Trainer.create(rt, opts, text, { tokenizer: tok, plan: p });
    try {
      expect(t.memory()).toEqual(p.memory);
      expect(Number.isFinite((await t.trainStep()).loss)).toBe(true);
    } finally {
      t.destroy();
    }
  }, 120_000);
});
