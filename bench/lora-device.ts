/**
 * LoRA fine-tuning on the lent GPU (issue 39), one command:
 *
 *  (a) step and memory: a SmolLM2-135M-shaped model (30 layers, d 576, 9/3 heads, F 1536, vocab
 *      49,152, tied embeddings; random weights, random tokens) at B×T (default 8×512): full
 *      fine-tuning against LoRA r16 on all linear layers, under fp32 and f16 compute — tokens/s
 *      (median of --reps pipelined steps after --warmup, and GPU timestamps of one step), plan vs
 *      ledger bytes per category;
 *      --variants picks the rows: full, lora (r16, fp32 base), qlora-int4 / qlora-nf4 / qlora-int8 (r16 over
 *      the base's block linears stored INT4 / NF4 / INT8, group 64; under f16 each linear is dequantized to f16 into
 *      one linear's scratch right before its GEMM); each row records layer 0's GEMM paths;
 *      a LoRA variant may add /recompute-u (the backward recomputes uᵀ instead of reading the forward's)
 *      and /one-pass (uᵀ, vᵀ never split over K): `lora/recompute-u/one-pass` is the step before both;
 *      /no-epilogue: the adapters' y and dX terms as GEMMs of their own (not in the base GEMMs' epilogue);
 *      by default an f16 base GEMM takes those terms where it multiplies them on the tensor cores (its layout's low-rank
 *      check passed), else they are fp32 GEMMs of their own; /f16-epilogue pins every f16 base GEMM to take them,
 *      /f16-epilogue-fwd the forward's only, /no-f16-epilogue none (the step before the tensor-core term);
 *      --shape 360m: SmolLM2-360M's shape (32 layers, d 960, 15/5 heads, F 2560), the issue's 2 GiB target;
 *      --checkpoint on|both: the rows with activation checkpointing (each layer's forward re-run in its
 *      backward; labels end in ` ckpt`), or each row both ways; a variant `NAME+ckpt` asks for one row;
 *  (b) fidelity on TinyShakespeare (--data): `small` trained --pre steps from its init, then --more
 *      steps of full fine-tuning, of LoRA r16 (all linear layers; each at the lrs in --lora-lrs) and of
 *      QLoRA r16 over the --fidelity-qlora formats at the same lrs (relToLora: against LoRA at that lr)
 *      from those weights, each with a fresh AdamW and the recipe's schedule; validation loss at the end;
 *      and each --fidelity-qlora format's reconstruction of those weights' block linears (relative RMS error
 *      of the codec's dequantized base, on the CPU: fidelity.reconstruction).
 *
 *   node lora-device.mjs --json out.json --data tinyshakespeare.txt [--batch 8 --seq 512] [--reps 10 --warmup 3]
 *        [--schemes fp32,f16] [--variants full,lora,qlora-int4,qlora-nf4,qlora-int8] [--shape 135m|360m] [--checkpoint off|on|both]
 *        [--pre 300 --more 300] [--lora-lrs 1e-3,2e-3] [--fidelity-qlora int4,nf4] [--no-bench] [--no-fidelity] [--cpu] [--shrink]
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { timeDispatches } from '../src/engine/gpu/timer';
import { defaultLoraSpec, type LoraSpec } from '../src/engine/lora/spec';
import { dequantizeRowGroupsRef, quantizeRowGroupsRef } from '../src/engine/kernels/qgemm/qgemm.ref';
import { defaultQloraSpec, QLORA_FORMATS, type QloraFormat, type QloraSpec, resolveQloraPlan } from '../src/engine/lora/qlora/plan';
import { paramLayout } from '../src/engine/model/params';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';
import { defaultTrainOptions, type TrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { f16DeviceFeatures, Trainer } from '../src/engine/train/trainer';
import { loraBenchModel, loraVariantTrainer, parseLoraVariant } from './lora-shape';

const a = parseArgs({
  options: {
    json: { type: 'string' }, data: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, reps: { type: 'string' }, warmup: { type: 'string' },
    schemes: { type: 'string' }, pre: { type: 'string' }, more: { type: 'string' }, 'lora-lrs': { type: 'string' },
    'no-bench': { type: 'boolean' }, 'no-fidelity': { type: 'boolean' }, cpu: { type: 'boolean' }, layers: { type: 'string' }, shrink: { type: 'boolean' },
    variants: { type: 'string' }, shape: { type: 'string' }, 'fidelity-qlora': { type: 'string' }, checkpoint: { type: 'string' },
  },
}).values;
const T0 = Date.now();
const log = (s: string) => console.log(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${s}`);
const out: Record<string, unknown> = { date: new Date().toISOString(), argv: process.argv.slice(2) };
const save = () => { if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2)); };
const median = (xs: number[]) => [...xs].sort((p, q) => p - q)[Math.floor(xs.length / 2)];

const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
out.adapter = gpu.adapterInfo;
const f16 = await f16DeviceFeatures(rt, { probe: true });
log(`adapter ${JSON.stringify(gpu.adapterInfo)}; shader-f16 ${f16.shaderF16}, f16 tensor cores ${f16.tensorCores}`);
const lora16 = defaultLoraSpec(16);
const qloraFormat = (flag: string, f: string): QloraFormat => {
  if (!(QLORA_FORMATS as readonly string[]).includes(f)) throw new Error(`${flag}: unknown QLoRA format ${f} (one of ${QLORA_FORMATS.join(', ')})`);
  return f as QloraFormat;
};
const fidelityFormats = (a['fidelity-qlora'] ?? 'int4,nf4').split(',').filter(Boolean).map((f) => qloraFormat('--fidelity-qlora', f));

if (!a['no-bench']) {
  const B = Number(a.batch ?? 8);
  const T = Number(a.seq ?? 512);
  // --shrink: the same shape family at a size SwiftShader runs (the script's own test).
  const model = loraBenchModel({ shape: a.shape, shrink: a.shrink, layers: a.layers === undefined ? undefined : Number(a.layers) });
  const rows: unknown[] = [];
  out.bench = rows;
  const reps = Number(a.reps ?? 10);
  const warmup = Number(a.warmup ?? 3);
  if (a.checkpoint !== undefined && !['off', 'on', 'both'].includes(a.checkpoint)) throw new Error(`--checkpoint expects off, on or both, got ${a.checkpoint}`);
  const variants = (a.variants ?? 'full,lora,qlora-int4,qlora-nf4,qlora-int8').split(',')
    .flatMap((v) => (a.checkpoint === 'both' ? [v, `${v}+ckpt`] : a.checkpoint === 'on' && !v.endsWith('+ckpt') ? [`${v}+ckpt`] : [v]));
  for (const scheme of (a.schemes ?? 'fp32,f16').split(',')) {
    for (const name of variants) {
      const v = parseLoraVariant(name);
      const lora: LoraSpec | undefined = v.kind === 'full' ? undefined : lora16;
      const qlora: QloraSpec | undefined = v.kind.startsWith('qlora-') ? defaultQloraSpec(v.kind.slice(6) as QloraFormat) : undefined;
      const label = `${scheme} ${v.kind === 'full' ? 'full' : `${v.name.replace(/\+ckpt$/, '').replace(/^([^/]*)/, '$1-r16-all')}`}${v.ckpt ? ' ckpt' : ''}`;
      const base = defaultTrainOptions('base', { batch: B, seq: T, steps: 1000, evalEvery: 0, scheme: SCHEME_PRESETS[scheme] });
      let t: Trainer | undefined;
      try {
        t = await loraVariantTrainer(rt, model, base, v);
        const samples: number[] = [];
        for (let i = 0; i < warmup + reps; i++) {
          const t0 = performance.now();
          await t.trainStep({ next: i + 1 < warmup + reps });
          if (i >= warmup) samples.push(performance.now() - t0);
        }
        const ms = median(samples);
        const g = rt.gpu.features.timestampQuery ? await timeDispatches(rt, t.stepDispatches(), { warmup: 1, reps: 5 }) : undefined;
        const row = {
          label, scheme, checkpoint: v.ckpt, lora: lora ?? null, qlora: qlora ?? null, batch: B, seq: T, msPerStep: ms, tokensPerS: (B * T) / (ms / 1000), samplesMs: samples,
          gpuMsPerStep: g?.method === 'timestamp' ? g.medianMs : undefined, plan: t.plan.memory, mem: t.memory(),
          trainable: lora ? t.model.trainable.layout.count : paramLayout(model).count, paths: t.computePaths()[0],
        };
        rows.push(row);
        log(`${label} B${B}xT${T}: ${Math.round(row.tokensPerS)} tok/s (${ms.toFixed(1)} ms; GPU ${row.gpuMsPerStep?.toFixed(1)} ms); plan ${(row.plan.total / 2 ** 20).toFixed(1)} MiB, ledger ${(row.mem.total / 2 ** 20).toFixed(1)} MiB ${JSON.stringify(row.mem)}; layer 0 ${JSON.stringify(row.paths)}`);
      } catch (e) {
        rows.push({ label, error: String(e) });
        log(`${label}: FAIL ${String((e as Error).stack ?? e)}`);
      } finally {
        t?.destroy();
      }
      save();
    }
  }
}

if (!a['no-fidelity']) {
  const text = a.data ? readFileSync(a.data, 'utf8') : readFileSync('tinyshakespeare.txt', 'utf8');
  const tokenizer = CharTokenizer.fromText(text);
  const pre = Number(a.pre ?? 300);
  const more = Number(a.more ?? 300);
  const small = (steps: number, o: Partial<TrainOptions> = {}, lr?: number): TrainOptions => ({
    ...defaultTrainOptions(a.shrink ? 'micro' : 'small', { steps, evalEvery: 0, evalBatches: 20, model: { vocab_size: tokenizer.vocabSize }, ...(lr ? { lr, minLr: lr / 10 } : {}) }), ...o,
  });
  const run = async (name: string, opts: TrainOptions, params?: Map<string, Float32Array>) => {
    const t = await Trainer.create(rt, opts, text, { tokenizer, params });
    try {
      const t0 = performance.now();
      const losses: number[] = [];
      const n = opts.optimizer.total_steps;
      for (let s = 0; s < n; s++) losses.push((await t.trainStep({ next: s + 1 < n })).loss);
      const val = await t.evaluate();
      const r = { name, steps: n, lr: opts.optimizer.lr, val, firstLoss: losses[0], lastLoss: losses[n - 1], seconds: (performance.now() - t0) / 1000, mem: t.memory() };
      log(`fidelity ${name}: loss ${losses[0].toFixed(4)} -> ${losses[n - 1].toFixed(4)}, val ${val.toFixed(4)} (${r.seconds.toFixed(1)} s)`);
      return { r, params: await t.parameters() };
    } finally {
      t.destroy();
    }
  };
  const fid: Record<string, unknown> = {};
  out.fidelity = fid;
  const p0 = await run(`small pre ${pre}`, small(pre));
  fid.pre = p0.r;
  // How well each format stores these weights: ‖W − deq(q(W))‖ / ‖W‖ over all block linears.
  const rec: Record<string, number> = {};
  fid.reconstruction = rec;
  for (const fmt of fidelityFormats) {
    let e = 0;
    let r = 0;
    for (const l of resolveQloraPlan(small(1).model, defaultQloraSpec(fmt)).linears) {
      const w = p0.params.get(l.name)!;
      const q = quantizeRowGroupsRef(w, l.rows, l.cols, fmt, l.G);
      const d = dequantizeRowGroupsRef(q.codes, q.scales, l.rows, l.cols, fmt, l.G);
      for (let i = 0; i < w.length; i++) {
        e += (w[i] - d[i]) ** 2;
        r += w[i] ** 2;
      }
    }
    rec[fmt] = Math.sqrt(e / r);
    log(`  ${fmt} base reconstruction: relative RMS error ${rec[fmt].toFixed(4)}`);
  }
  const full = await run(`full +${more}`, small(more), p0.params);
  fid.full = full.r;
  const loras: unknown[] = [];
  fid.lora = loras;
  for (const lr of (a['lora-lrs'] ?? '1e-3,2e-3').split(',').map(Number)) {
    const l = await run(`lora r16 all +${more} lr ${lr}`, small(more, { lora: lora16 }, lr), p0.params);
    loras.push({ ...l.r, relToFull: (l.r.val - full.r.val) / full.r.val });
    log(`  LoRA lr ${lr}: val ${l.r.val.toFixed(4)} vs full ${full.r.val.toFixed(4)} (${(((l.r.val - full.r.val) / full.r.val) * 100).toFixed(2)} %)`);
    save();
    for (const fmt of fidelityFormats) {
      const q = await run(`qlora-${fmt} r16 all +${more} lr ${lr}`, small(more, { lora: lora16, qlora: defaultQloraSpec(fmt) }, lr), p0.params);
      loras.push({ ...q.r, qlora: fmt, relToFull: (q.r.val - full.r.val) / full.r.val, relToLora: (q.r.val - l.r.val) / l.r.val });
      log(`  QLoRA-${fmt} lr ${lr}: val ${q.r.val.toFixed(4)} vs LoRA ${l.r.val.toFixed(4)} (${(((q.r.val - l.r.val) / l.r.val) * 100).toFixed(2)} %)`);
      save();
    }
  }
}
save();
log('done');
process.exit(0);
