/**
 * The model's f16 training step on the lent GPU (issue 35), one command:
 *
 *  (a) step benchmark, tokens/s (wall clock, pipelined steps; GPU timestamps where the device has
 *      them): `micro` and `base` (B16×T512) under fp32, f16 and int8-f16, each with the GEMM path
 *      every layer ran and the predicted (plan) vs allocated (ledger) memory;
 *  (b) fidelity: `tiny` on TinyShakespeare (or synthetic text without --data), fp32 against f16 over
 *      --fidelity-steps steps from the same init and batches: per-step loss difference, the final
 *      losses, the loss scale and the skipped steps;
 *  (c) memory: (a)'s plan vs ledger bytes per category (the ledger is what the run allocated);
 *  (d) f16 cells (--cells, e.g. tiny,base; RunPlan.f16Cells): one step (B2) per model under f16 and agoq-f16 with the saved f16
 *      tensors as the f16 operand copies against the same step with them packed beside separate copies
 *      (shareF16 false), same init and batch: loss and every stored gradient bit for bit (exit 1 if not), and the plans' bytes;
 *      then forward + backward of both wirings at (a)'s shape (base B16×T512, tiny B16×T128) timed alternately, 3 rounds of --reps;
 *  (e) the lean f16 workspace (--lean, e.g. tiny,base; RunPlan.f16Lean: per-GEMM weight casts, gate's live copy in f16.a): the same
 *      check and timing under agoq-f16 against f16Lean false (the full workspace).
 *  (f) LoRA over the f16 cells (--lora-cells, e.g. tiny,base; issue 39): (d)'s check and timing under f16 with LoRA r16 on every
 *      linear (random B, so dA is not zero): the adapter GEMMs over x read the packed cells through the fp32 GEMM's f16 B
 *      (MatmulArgs.bHalf) instead of fp32 x (forward) and its unpacks (backward); the loss and the adapters' gradients within
 *      f16 rounding (relative 1e-2) of those of shareF16 false, whose forward reads fp32 x (not bit for bit since the forward's
 *      uᵀ reads the cell too, as PEFT's autocast does).
 *  (g) f16 producers that skip what nothing reads in fp32 (--f16-direct, e.g. tiny,base): the SwiGLU over gate's and up's f16
 *      storage (RunPlan.swigluHalf: one pass each way, no packs, unpacks or row blocks) and RMSNorm's and RoPE's outputs as
 *      their f16 copies alone (RunPlan.f16Only): (d)'s check and timing under f16 against swigluHalf and f16Only false.
 *  (h) LoRA's batched split-K reduces (--lora-reduce, e.g. tiny,base; issue 39): (f)'s check and timing under f16 and fp32, a
 *      layer's dA/dB partials summed by one reduce and a stacked group's vᵀ by one against every split GEMM reducing its own
 *      (LoraPlan.batchReduce false): the adapters' gradients bit for bit (the same slices summed in the same order).
 *  (i) (g) under LoRA (--lora-direct, e.g. tiny,base; issue 39): the adapters read h1's, h2's, act's f16 cells, so the SwiGLU
 *      runs over gate's and up's storage both ways (writing dgate, dup in fp32 for gate's and up's adapters: swigluBwdHalf)
 *      and RMSNorm writes h1, h2 as f16 alone: (f)'s check and timing under f16 against swigluHalf and f16Only false, bit for bit.
 *
 *   node f16-train-device.mjs [--json out.json] [--data tinyshakespeare.txt] [--reps 10] [--warmup 3]
 *        [--models micro,base] [--schemes fp32,f16,int8-f16] [--fidelity-steps 80] [--fidelity-model tiny] [--no-bench] [--no-fidelity] [--cpu] [--toggles a,b]
 *        [--cells tiny,base] [--lean tiny,base] [--lora-cells tiny,base] [--f16-direct tiny,base] [--lora-reduce tiny,base] [--lora-direct tiny,base]
 * `--cpu` (SwiftShader: no shader-f16, so the f16 runs resolve to fp32 and say so) tests the script's
 * flow; the numbers are meaningless there. Exit 1 when the f16 run diverges or misses the fidelity bound.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu, withDawnToggle } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { median, timeDispatches } from '../src/engine/gpu/timer';
import { PRESETS, type PresetName } from '../src/engine/model/config';
import { LlamaGpu } from '../src/engine/model/llama';
import { flatten, initParams } from '../src/engine/model/params';
import { defaultLoraSpec, initLoraTensors, loraAdapters, type LoraSpec } from '../src/engine/lora/spec';
import { loraBuffers, type LoraPlan } from '../src/engine/lora/plan';
import type { PlanOverrides } from '../src/engine/model/plan';
import { resolvePlan } from '../src/engine/plan/run-plan';
import { Rng } from '../src/engine/util/rng';
import { gemmPathSummary } from '../src/engine/model/int8-gemms';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { f16DeviceFeatures, Trainer } from '../src/engine/train/trainer';
import { benchStep, syntheticText } from '../src/lab/step';

const a = parseArgs({
  options: {
    json: { type: 'string' }, data: { type: 'string' }, reps: { type: 'string' }, warmup: { type: 'string' },
    models: { type: 'string' }, schemes: { type: 'string' }, 'fidelity-steps': { type: 'string' }, 'fidelity-model': { type: 'string' }, 'fidelity-schemes': { type: 'string' },
    'no-bench': { type: 'boolean' }, 'no-fidelity': { type: 'boolean' }, cpu: { type: 'boolean' }, toggles: { type: 'string' }, cells: { type: 'string' }, lean: { type: 'string' },
    'lora-cells': { type: 'string' }, 'f16-direct': { type: 'string' }, 'lora-reduce': { type: 'string' }, 'lora-direct': { type: 'string' },
  },
}).values;
const T0 = Date.now();
const log = (s: string) => console.log(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${s}`);
const out: Record<string, unknown> = { date: new Date().toISOString() };
const save = () => { if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2)); };

// --toggles a,b: extra Dawn toggles (e.g. disable_robustness) to time what the generated code pays for them.
const dawnFlags = (a.toggles ?? '').split(',').filter(Boolean)
  .reduce((f, t) => withDawnToggle(f, 'enable-dawn-features', t), ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization']);
const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags });
const rt = new Runtime(gpu);
out.adapter = gpu.adapterInfo;
out.dawnFlags = dawnFlags;
out.features = gpu.features;
const f16 = await f16DeviceFeatures(rt, { probe: true });
out.f16 = f16;
log(`adapter ${JSON.stringify(gpu.adapterInfo)}; shader-f16 ${f16.shaderF16}, f16 tensor cores ${f16.tensorCores}`);
let failed = false;

// (a) + (c): step benchmark and memory.
if (!a['no-bench']) {
  const models = (a.models ?? 'micro,base').split(',') as PresetName[];
  const schemes = (a.schemes ?? 'fp32,f16,int8-f16').split(',');
  const shape: Partial<Record<PresetName, { batch: number; seq: number }>> = { micro: { batch: 4, seq: 32 }, base: { batch: 16, seq: 512 } };
  const rows: unknown[] = [];
  out.bench = rows;
  for (const preset of models) {
    for (const name of schemes) {
      const scheme = SCHEME_PRESETS[name];
      if (!scheme) throw new Error(`unknown scheme ${name}`);
      try {
        const r = await benchStep(rt, { preset, scheme, ...shape[preset], warmup: Number(a.warmup ?? 3), reps: Number(a.reps ?? 10) });
        rows.push(r);
        const gpuPart = r.gpuTokensPerS === undefined ? '' : `, GPU ${Math.round(r.gpuTokensPerS)} tok/s (${r.gpuMsPerStep!.toFixed(2)} ms)`;
        log(`step ${preset} B${r.batch}xT${r.seq} ${name}: ${Math.round(r.tokensPerS)} tok/s (${r.msPerStep.toFixed(2)} ms/step)${gpuPart}`);
        log(`  paths ${r.gemmPathSummary}`);
        log(`  memory plan ${r.plan.total} B vs ledger ${r.mem.total} B (${JSON.stringify(r.plan)} vs ${JSON.stringify(r.mem)})`);
      } catch (e) {
        failed = true;
        rows.push({ preset, scheme: name, error: String(e) });
        log(`step ${preset} ${name}: FAIL ${String(e)}`);
      }
      save();
    }
  }
}

// (b) fidelity: fp32 vs f16 from the same init and batches.
if (!a['no-fidelity']) {
  const steps = Number(a['fidelity-steps'] ?? 80);
  const text = a.data ? readFileSync(a.data, 'utf8') : syntheticText(64, 512);
  const tokenizer = CharTokenizer.fromText(text);
  const losses: Record<string, number[]> = {};
  const info: Record<string, unknown> = {};
  const fidSchemes = (a['fidelity-schemes'] ?? 'fp32,f16').split(',');
  if (fidSchemes[0] !== 'fp32') throw new Error('--fidelity-schemes starts with fp32 (the reference)');
  for (const name of fidSchemes) {
    const fm = (a['fidelity-model'] ?? 'tiny') as PresetName;
    // `small` trains at B32×T256 (the issue's 600-step bound is on its validation loss).
    const shape = fm === 'micro' ? { batch: 2, seq: 16 } : fm === 'small' ? { batch: 32, seq: 256 } : { batch: 16, seq: 128 };
    const opts = defaultTrainOptions(fm, { ...shape, steps, evalEvery: 0, evalBatches: 20, model: { vocab_size: tokenizer.vocabSize }, scheme: SCHEME_PRESETS[name] });
    const t = await Trainer.create(rt, opts, text, { tokenizer });
    try {
      const l: number[] = [];
      let last;
      for (let s = 0; s < steps; s++) {
        last = await t.trainStep({ next: s + 1 < steps });
        l.push(last.loss);
      }
      losses[name] = l;
      info[name] = { paths: gemmPathSummary(t.computePaths()), lossScaling: t.plan.lossScaling, loss_scale: last?.loss_scale, skipped_steps: last?.skipped_steps, val: await t.evaluate() };
      log(`fidelity ${fm} ${name}: loss ${l[0].toFixed(4)} -> ${l[steps - 1].toFixed(4)}, val ${(info[name] as { val: number }).val.toFixed(4)}; ${JSON.stringify(info[name])}`);
    } catch (e) {
      failed = true;
      info[name] = { error: String(e) };
      log(`fidelity ${name}: FAIL ${String(e)}`);
    } finally {
      t.destroy();
    }
  }
  if (losses.fp32 && losses.f16) {
    const rel = losses.f16.map((x, i) => Math.abs(x - losses.fp32[i]) / losses.fp32[i]);
    const lastTen = (xs: number[]) => xs.slice(-10).reduce((p, q) => p + q, 0) / Math.min(10, xs.length);
    const final = { fp32: lastTen(losses.fp32), f16: lastTen(losses.f16) };
    const finalRel = Math.abs(final.f16 - final.fp32) / final.fp32;
    // The issue's bound for `small` is 0.5 % of validation loss; over a short run the step losses are noisier: 2 %.
    const ok = finalRel <= 0.02 && losses.f16.every(Number.isFinite);
    if (!ok) failed = true;
    // Every scheme's validation loss against fp32's.
    const ref = (info.fp32 as { val: number }).val;
    const vals = Object.fromEntries(fidSchemes.map((n) => [n, (info[n] as { val?: number }).val ?? null]));
    const valRel = Object.fromEntries(fidSchemes.slice(1).map((n) => [n, vals[n] === null ? null : Math.abs(vals[n]! - ref) / ref]));
    log(`fidelity validation loss ${JSON.stringify(vals)}; relative to fp32 ${JSON.stringify(valRel)}`);
    out.fidelity = { steps, losses, info, maxRel: Math.max(...rel), finalMeanLast10: final, finalRel, vals, valRel, ok };
    log(`fidelity ${ok ? 'PASS' : 'FAIL'}: max per-step rel diff ${(Math.max(...rel) * 100).toFixed(3)} %, mean of last 10 fp32 ${final.fp32.toFixed(4)} f16 ${final.f16.toFixed(4)} (${(finalRel * 100).toFixed(3)} %)`);
  } else {
    out.fidelity = { steps, info, ok: false };
  }
  save();
}
// (d) f16 cells as the operand copies vs separate copies, (e) the lean f16 workspace vs the full one: the same step bit for bit.
/**
 * One step (B2) per model of `presets` under each scheme, the wiring `ref` (plan overrides) against the
 * default plan, same init and batch: loss and every stored gradient bit for bit (failed if not), the
 * plans' bytes and dispatch counts; then forward + backward of both at the bench's shape, alternately.
 * `loraRef`, `loraGot`: the ref and the default wiring's LoraPlan switches (their lora.* buffers priced again). `tol`: the wirings round differently,
 * so loss and gradients need only agree within that relative error (gradients: the largest difference over the largest value).
 */
async function compareWirings(
  kind: 'cells' | 'lean' | 'lora-cells' | 'f16-direct' | 'lora-reduce' | 'lora-direct', presets: string, schemes: string[], ref: PlanOverrides, lora?: LoraSpec,
  loraRef?: Partial<LoraPlan>, tol?: number, loraGot?: Partial<LoraPlan>,
): Promise<void> {
  const rows: unknown[] = [];
  out[kind] = rows;
  for (const preset of presets.split(',') as PresetName[]) {
    const cfg = PRESETS[preset];
    if (!cfg) throw new Error(`unknown model ${preset}`);
    const [B, T] = [2, Math.min(512, cfg.max_position_embeddings)];
    const rng = new Rng(23);
    const tokens = Int32Array.from({ length: B * (T + 1) }, () => rng.int(cfg.vocab_size));
    for (const name of schemes) {
      const plan = (b: number, t: number, o: PlanOverrides) => {
        const p = resolvePlan(cfg, b, t, { scheme: SCHEME_PRESETS[name], f16Device: f16, ...o, lora });
        const sw = o === ref ? loraRef : loraGot;
        if (!sw) return p;
        const l = { ...p.lora!, ...sw };
        return { ...p, lora: l, buffers: [...p.buffers.filter((x) => !x.key.startsWith('lora.')), ...loraBuffers(l, p.dims, p.training)] };
      };
      // LoRA's B is zero at init (PEFT's), which would leave dA zero: random B instead.
      const adapters = lora && (() => {
        const t = initLoraTensors(cfg, lora, 3);
        const r = new Rng(4);
        for (const ad of loraAdapters(cfg, lora)) t.set(ad.b, r.uniformArray(ad.out * lora.rank, -0.05, 0.05));
        return t;
      })();
      const upload = (m: LlamaGpu) => {
        m.uploadParams(initParams(cfg, m.layout, 7));
        if (adapters) m.writeTrainable('weights', flatten(adapters, m.trainable.layout));
      };
      const run = async (o: PlanOverrides) => {
        const model = new LlamaGpu(rt, plan(B, T, o));
        try {
          upload(model);
          model.setBatch(tokens);
          rt.run([...model.forward, ...model.backward]);
          const keys = [...model.buf.keys()].filter((k) => k === 'grads' || k.startsWith('grads.') || k === 'lora.grads').sort();
          const grads = (await Promise.all(keys.map((k) => rt.readU32(model.b(k))))).flatMap((x) => Array.from(x));
          const bytes = model.plan.buffers.reduce((t, b) => t + b.bytes, 0);
          const what = kind === 'lean' ? `lean ${model.plan.f16Lean}, gate live in ${model.plan.f16Live.gate ?? 'live.gate'}`
            : kind === 'f16-direct' || kind === 'lora-direct'
              ? `SwiGLU over f16 storage in ${model.plan.swigluHalf.filter(Boolean).length} layers (fp32 dgate, dup in ${model.plan.swigluBwdHalf.filter(Boolean).length}), f16 only: ${[...model.plan.f16Only[0]].join(' ') || 'none'}`
              : `${model.plan.f16Cells[0].size} cells a layer${lora ? `, LoRA r${lora.rank}` : ''}`;
          return { loss: (await rt.readF32(model.b('loss'), 0, 1))[0], grads, bytes, what, dispatches: model.forward.length + model.backward.length };
        } finally {
          model.destroy();
        }
      };
      // forward + backward of both wirings at the bench's shape, alternately (the same GPU state for both).
      const time = async () => {
        const [TB, TT] = preset === 'base' ? [16, 512] : preset === 'micro' ? [4, 32] : [16, Math.min(128, cfg.max_position_embeddings)];
        const ms: Record<'ref' | 'got', number[]> = { ref: [], got: [] };
        const models = { ref: new LlamaGpu(rt, plan(TB, TT, ref)), got: new LlamaGpu(rt, plan(TB, TT, {})) };
        try {
          const trng = new Rng(5);
          const batch = Int32Array.from({ length: TB * (TT + 1) }, () => trng.int(cfg.vocab_size));
          for (const m of Object.values(models)) {
            upload(m);
            m.setBatch(batch);
          }
          for (let round = 0; round < 3; round++) {
            for (const k of ['ref', 'got'] as const) {
              const r = await timeDispatches(rt, [...models[k].forward, ...models[k].backward], { warmup: round ? 1 : Number(a.warmup ?? 3), reps: Number(a.reps ?? 10) });
              ms[k].push(r.medianMs);
            }
          }
          return { shape: `B${TB}xT${TT}`, refMs: median(ms.ref), gotMs: median(ms.got), rounds: ms, tokens: TB * TT };
        } finally {
          models.ref.destroy();
          models.got.destroy();
        }
      };
      const [refName, gotName] = {
        cells: ['separate copies', 'cells'], 'lora-cells': ['separate copies', 'cells'], lean: ['full workspace', 'lean'], 'f16-direct': ['fp32 outputs, packs and blocks', 'f16 direct'],
        'lora-reduce': ['a reduce each', 'batched reduces'], 'lora-direct': ['fp32 outputs, packs and blocks', 'f16 direct'],
      }[kind];
      try {
        const [r, g] = [await run(ref), await run({})];
        const diff = g.grads.findIndex((x, i) => x !== r.grads[i]);
        const f32 = (w: number[]) => new Float32Array(Uint32Array.from(w).buffer);
        const [gf, rf] = [f32(g.grads), f32(r.grads)];
        const rel = { loss: Math.abs(g.loss - r.loss) / Math.abs(r.loss), grads: gf.reduce((m, x, i) => Math.max(m, Math.abs(x - rf[i])), 0) / rf.reduce((m, x) => Math.max(m, Math.abs(x)), 0) };
        const agree = tol === undefined ? Object.is(g.loss, r.loss) && diff < 0 : rel.loss < tol && rel.grads < tol;
        const same = agree && g.grads.length === r.grads.length && g.grads.some((x) => x !== 0) && Number.isFinite(g.loss);
        if (!same) failed = true;
        rows.push({ preset, scheme: name, same, loss: [r.loss, g.loss], firstDiff: diff, rel, bytes: [r.bytes, g.bytes], dispatches: [r.dispatches, g.dispatches], what: g.what });
        const verdict = tol === undefined ? (same ? 'bit for bit' : `DIFFER (loss ${r.loss} vs ${g.loss}, first differing gradient word ${diff})`)
          : `${same ? 'within' : 'NOT within'} ${tol} (loss rel ${rel.loss.toExponential(2)}, gradients max rel ${rel.grads.toExponential(2)})`;
        log(`${kind} ${preset} B${B}xT${T} ${name}: ${verdict}; `
          + `${g.what}; model buffers ${r.bytes} -> ${g.bytes} B; dispatches ${r.dispatches} -> ${g.dispatches}`);
        const t = await time();
        (rows[rows.length - 1] as Record<string, unknown>).timing = t;
        log(`${kind} ${preset} ${t.shape} ${name} forward+backward: ${refName} ${t.refMs.toFixed(2)} ms (${Math.round(t.tokens / t.refMs * 1000)} tok/s), `
          + `${gotName} ${t.gotMs.toFixed(2)} ms (${Math.round(t.tokens / t.gotMs * 1000)} tok/s), ${(t.refMs / t.gotMs).toFixed(3)}x; rounds ${JSON.stringify(t.rounds)}`);
      } catch (e) {
        failed = true;
        rows.push({ preset, scheme: name, error: String(e) });
        log(`${kind} ${preset} ${name}: FAIL ${String(e)}`);
      }
      save();
    }
  }
}
if (a.cells) await compareWirings('cells', a.cells, ['f16', 'agoq-f16'], { shareF16: false });
if (a.lean) await compareWirings('lean', a.lean, ['agoq-f16'], { f16Lean: false });
if (a['lora-cells']) await compareWirings('lora-cells', a['lora-cells'], ['f16'], { shareF16: false }, defaultLoraSpec(16), undefined, 1e-2);
if (a['f16-direct']) await compareWirings('f16-direct', a['f16-direct'], ['f16'], { swigluHalf: false, f16Only: false });
if (a['lora-reduce']) await compareWirings('lora-reduce', a['lora-reduce'], ['f16', 'fp32'], {}, defaultLoraSpec(16), { batchReduce: false }, undefined, { batchReduce: true });
if (a['lora-direct']) await compareWirings('lora-direct', a['lora-direct'], ['f16'], { swigluHalf: false, f16Only: false }, defaultLoraSpec(16));
save();
log(failed ? 'done: FAILURES above' : 'done');
process.exit(failed ? 1 : 0);
