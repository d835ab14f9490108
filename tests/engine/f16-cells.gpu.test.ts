/**
 * f16 saved activations that are the f16 operand copies themselves (RunPlan.f16Cells, issue 35): on
 * SwiftShader through the f32 twin (f16Twin: f32 cells holding f16 values) with the f16 attention's
 * emulated kernels, a micro step under `f16` and `agoq-f16` is bit for bit the step that stores the
 * cells packed beside separate copies (shareF16: false): loss, every gradient, and the cells hold what
 * the packed storage unpacks to. The step loses the cells' pack and unpack passes and the casts into
 * f16.x and f16.qkv (only dO's cast stays); a Trainer allocates exactly its plan.
 */
import { describe, expect, it } from 'vitest';
import { unpackF16Ref } from '../../src/engine/kernels/f16/f16.ref';
import { f16CellBytes } from '../../src/engine/model/f16-operands';
import { LlamaGpu } from '../../src/engine/model/llama';
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
const micro = f16TwinMicro(7, 23);
const { cfg, B, T, DEV } = micro;

const plan = (scheme: Scheme, shareF16: boolean) => resolvePlan(cfg, B, T, { scheme, f16Device: DEV, f16Twin: true, shareF16 });

/** One forward + backward; `fwd` reads buffers between them. */
const step = (p: RunPlan, fwd?: (m: LlamaGpu) => Promise<void>) => twinStep(rt, micro, p, fwd);

describe.each(['f16', 'agoq-f16'] as const)('f16 cells as the operand copies (%s, f32 twin)', (name) => {
  it('the plan: which cells, their bytes, no f16.x / q-k-v slots where the cells serve', () => {
    const p = plan(SCHEME_PRESETS[name], true);
    const old = plan(SCHEME_PRESETS[name], false);
    const want = name === 'f16' ? ['h1', 'q', 'k', 'v', 'o', 'h2', 'act'] : ['q', 'k', 'v', 'o'];
    for (const s of p.f16Cells) expect([...s].sort()).toEqual([...want].sort());
    expect(old.f16Cells.every((s) => s.size === 0)).toBe(true);
    const bytes = (q: RunPlan, k: string) => q.buffers.find((b) => b.key === k)?.bytes;
    for (const k of want) {
      const n = p.saved[0][k as 'q']!.n;
      // The twin's f32 elements; q, k, v with the attention's pad rows.
      expect(bytes(p, `L0.${k}.codes`), k).toBe(f16CellBytes(p.dims, k as 'q', n, true));
      expect(bytes(p, `L0.${k}.codes`)).toBeGreaterThanOrEqual(n * 4);
    }
    // f16.x only where some dW GEMM's X is not a cell (agoq-f16's INT4 h1, h2, act); f16.qkv holds dO's slot alone.
    expect(bytes(p, 'f16.x') === undefined).toBe(name === 'f16');
    expect(bytes(old, 'f16.x')).toBeGreaterThan(0);
    expect(bytes(p, 'f16.qkv')).toBeLessThan(bytes(old, 'f16.qkv')!);
    // The cells' fp32 live copies go to scratch: q, k, v (read in fp32 by nobody but their cells' writers) to the backward's
    // dres, dk, dv; o (read back for the attention backward) to qRaw.
    expect(p.f16Live).toEqual({ q: 'dres', k: 'dk', v: 'dv', o: 'qRaw' });
    expect(p.buffers.filter((b) => /^live\.[qkvo]$/.test(b.key))).toEqual([]);
    expect(old.buffers.filter((b) => /^live\.[qkvo]$/.test(b.key)).map((b) => b.key).sort()).toEqual(['live.k', 'live.o', 'live.q', 'live.v']);
  });

  it('a step is bit for bit the packed-cells step; the cells hold what the packed storage unpacks to', async () => {
    const packed = new Map<string, Uint32Array>();
    const ref = await step(plan(SCHEME_PRESETS[name], false), async (m) => {
      for (let l = 0; l < cfg.num_hidden_layers; l++) {
        for (const k of ['h1', 'q', 'k', 'v', 'o', 'h2', 'act'] as const) {
          const st = m.storage[l][k];
          if (st?.format === 'f16') packed.set(`L${l}.${k}`, unpackF16Ref(await rt.readU32(m.b(`L${l}.${k}.codes`), 0, st.words), st.n));
        }
      }
    });
    const cells = new Map<string, Uint32Array>();
    const got = await step(plan(SCHEME_PRESETS[name], true), async (m) => {
      for (let l = 0; l < cfg.num_hidden_layers; l++) for (const k of m.plan.f16Cells[l]) cells.set(`L${l}.${k}`, await rt.readU32(m.b(`L${l}.${k}.codes`), 0, m.storage[l][k]!.n));
    });
    try {
      expect(got.model.attnPaths.get('L0.attn')).toBe('f16-tensor-core');
      expect(got.model.attnPaths.get('L0.attnDp')).toBe('f16-tensor-core');
      expect(cells.size).toBe(cfg.num_hidden_layers * (name === 'f16' ? 7 : 4));
      for (const [k, v] of cells) expect(Array.from(v), k).toEqual(Array.from(packed.get(k)!));
      expectSameStep(got, ref);
      expect(got.grads.some((g) => g !== 0)).toBe(true);

      // Per layer, gone: the cells' store passes (the producers write them; v's store is its one cast), the unpacks of
      // h1, q, k, v, h2, act (o's stays: the attention backward reads it fp32), the dW GEMMs' casts into f16.x,
      // the forward's v16 cast and the backward's casts of q, k, v (dO's stays).
      const per = (labels: string[], re: RegExp) => labels.filter((l) => l.startsWith('L0.') && re.test(l)).sort();
      const cast = /\[f32→f16\]$/;
      // agoq-f16 keeps the casts of its INT4-stored h1, h2, act (not f16 cells).
      const x = (...s: string[]) => s.map((k) => `L0.${k}.dw.f16.x[f32→f16]`);
      expect(per(got.labels, /\.f16\.x\[|\.v16\[|attn\.bwd\.[qkv]16\[/)).toEqual(name === 'f16' ? [] : x('down', 'gate', 'q'));
      expect(per(ref.labels, /\.f16\.x\[/)).toEqual(x('down', 'gate', 'o', 'q'));
      expect(per(ref.labels, /\.v16\[|attn\.bwd\.[qkv]16\[/)).toEqual(['L0.attn.bwd.k16[f32→f16]', 'L0.attn.bwd.q16[f32→f16]', 'L0.attn.bwd.v16[f32→f16]', 'L0.v16[f32→f16]']);
      expect(per(got.labels, /attn\.bwd\.dO16/)).toEqual(['L0.attn.bwd.dO16[f32→f16]']);
      // The twin's cell passes: v's store (a cast) and o's unpack (a copy).
      expect(per(got.labels, /^L0\.(h1|q|k|v|o|h2|act)\.f16/)).toEqual(['L0.o.f16.f16cell.copy', 'L0.v.f16[f32→f16]']);
      // The packed step's stores and unpacks of those tensors.
      const keys = name === 'f16' ? ['act', 'h1', 'h2', 'k', 'o', 'q', 'v'] : ['k', 'o', 'q', 'v'];
      expect(per(ref.labels, /^L0\.(h1|q|k|v|o|h2|act)\.f16\.pack$/)).toEqual(keys.map((k) => `L0.${k}.f16.pack`));
      expect(per(ref.labels, /^L0\.(h1|q|k|v|o|h2|act)\.f16\.unpack$/)).toEqual(keys.map((k) => `L0.${k}.f16.unpack`));
      expect(got.labels.filter((l) => cast.test(l)).length).toBeLessThan(ref.labels.filter((l) => cast.test(l)).length);
    } finally {
      ref.model.destroy();
      got.model.destroy();
    }
  }, 300_000);
});

/** The f16 preset with fp32 forward GEMMs (the cells of h1, o, h2, act written by their store's cast, read by the f16 dW GEMMs) and INT8 attention scores (o's cell written by its store: the INT8 attention writes fp32 only; q, k, v stored packed). */
const F16_FP32_FORWARD_I8_SCORES = parseScheme({
  ...SCHEME_PRESETS.f16, name: 'f16-fp32-forward-i8-scores',
  layer: { ...SCHEME_PRESETS.f16.layer, compute: { ...SCHEME_PRESETS.f16.layer.compute, forward: 'fp32', attention_qk: 'int8' } },
});

describe('f16 cells written by their store pass (fp32 forward, INT8 attention scores; f32 twin)', () => {
  it('a step is bit for bit the packed-cells step', async () => {
    const p = plan(F16_FP32_FORWARD_I8_SCORES, true);
    expect([...p.f16Cells[0]].sort()).toEqual(['act', 'h1', 'h2', 'o']);
    expect(p.f16Live).toEqual({ o: 'qRaw' });
    const ref = await step(plan(F16_FP32_FORWARD_I8_SCORES, false));
    const got = await step(p);
    try {
      expectSameStep(got, ref);
      // The cells' stores are casts; the dW GEMMs cast nothing into f16.x.
      expect(got.labels.filter((l) => /^L0\.(h1|o|h2|act)\.f16\[f32→f16\]$/.test(l)).sort()).toEqual(['L0.act.f16[f32→f16]', 'L0.h1.f16[f32→f16]', 'L0.h2.f16[f32→f16]', 'L0.o.f16[f32→f16]']);
      expect(got.labels.some((l) => l.includes('.f16.x['))).toBe(false);
    } finally {
      ref.model.destroy();
      got.model.destroy();
    }
  }, 300_000);
});

describe('f16 cells in a Trainer', () => {
  it('allocates exactly its plan under f16 and agoq-f16 (twin, f16 GEMMs)', async () => {
    const text = 'First Citizen:\nBefore we proceed any further, hear me speak.\n'.repeat(40);
    const tok = CharTokenizer.fromText(text);
    for (const scheme of [SCHEME_PRESETS.f16, SCHEME_PRESETS['agoq-f16']]) {
      const opts = defaultTrainOptions('micro', { steps: 2, warmup: 0, batch: 2, seq: 16, model: { vocab_size: tok.vocabSize }, scheme });
      const p = resolveTrainingPlan(opts, { device: { shaderF16: true, tensorCores: false }, f16Twin: true });
      expect(p.model.f16Cells[0].has('o'), scheme.name).toBe(true);
      const t = await Trainer.create(rt, opts, text, { tokenizer: tok, plan: p });
      try {
        expect(t.memory(), scheme.name).toEqual(p.memory);
        expect(Number.isFinite((await t.trainStep()).loss)).toBe(true);
      } finally {
        t.destroy();
      }
    }
  }, 120_000);
});
