/**
 * Where a training step's GPU time goes: each dispatch of one step (forward, backward, AdamW) timed
 * on its own (profileDispatches), summed per kernel kind — labels with the layer index dropped
 * (`L3.q_proj` → `q_proj`, `L3.attn.bwd.rows0` → `attn.bwd.rows`), and per class (GEMM, attention,
 * quantization, elementwise, optimizer). With --host, where a step's wall clock goes besides the
 * GPU: the trainer's way (encode every dispatch, submit one command buffer, wait for the loss to map)
 * timed in parts, against the same step submitted in chunks of --chunk dispatches as they are encoded
 * (the GPU starts on the first chunk while the host encodes the rest).
 *
 *   node step-profile.mjs --model base --scheme fp32,agoq [--batch 16 --seq 512] [--json out.json] [--record rec.json]
 *                         [--host [--chunk 64,128]] [--no-tensor-cores] [--weight-codes per-gemm|per-step]
 * INT8 GEMMs run on tensor cores where the device has them (as `bench step` runs them).
 * Elementwise, cast and optimizer kinds also print the bytes their dispatches bind and the rate that
 * implies (boundBytes): how far each pass is from the memory's bandwidth (an H100 moves ~3 TB/s).
 *
 * --lora full,lora[,lora+ckpt,qlora-int4,lora/recompute-u/one-pass,lora/f16-epilogue[-fwd]]: issue 39's comparison instead of
 * a preset (variants: bench/lora-shape.ts parseLoraVariant) — SmolLM2-135M's
 * shape (bench/lora-shape.ts; --shape 360m, --layers, --shrink for a SwiftShader-sized check), B8×T512
 * unless --batch/--seq, full fine-tuning against LoRA r16 on all 7 linears, per --scheme (default
 * fp32,f16); the adapters' own dispatches (labels with `lora_`) are class `lora`, and each scheme ends
 * with every kind's ms side by side (a base GEMM carrying the adapter's low-rank epilogue shows as
 * that GEMM costing more under LoRA):
 *   node step-profile.mjs --lora full,lora --scheme fp32,f16 [--reps 3] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { commandLine, gpuOf, writeRecord } from './record';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Binding, type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { asSlice, bindingBytes } from '../src/engine/kernels/launch';
import { median, profileDispatches } from '../src/engine/gpu/timer';
import { enableI8TensorCores, i8TcLabel } from '../src/engine/kernels/qgemm/tc';
import type { PresetName } from '../src/engine/model/config';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';
import { parseScheme } from '../src/engine/scheme/scheme';
import { syntheticTrainer } from '../src/lab/step';
import { defaultTrainOptions } from '../src/engine/train/options';
import type { Trainer } from '../src/engine/train/trainer';
import { loraBenchModel, loraVariantTrainer, parseLoraVariant } from './lora-shape';

const a = parseArgs({ options: {
  model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' },
  json: { type: 'string' }, record: { type: 'string' }, reps: { type: 'string' }, cpu: { type: 'boolean' },
  host: { type: 'boolean' }, chunk: { type: 'string' }, 'no-tensor-cores': { type: 'boolean' }, 'weight-codes': { type: 'string' },
  lora: { type: 'string' }, shape: { type: 'string' }, layers: { type: 'string' }, shrink: { type: 'boolean' },
} }).values;

/**
 * Kernel kind of a dispatch label: layer prefix and trailing numbers dropped. Standalone f32 → f16
 * casts (matmul-f16/cast.ts, `…[f32→f16]`) are kinds of their own, `cast <operand>`, the weights'
 * copies (once per step) as one `cast f16.w`: what fusing casts into producers left is visible.
 */
export function kindOf(label: string): string {
  if (label.endsWith('[f32→f16]')) return label.startsWith('f16.w.') ? 'cast f16.w' : `cast ${label.replace(/^L\d+\./, '').replace(/\[.*\]$/, '')}`;
  return label.replace(/^L\d+\./, '').replace(/\d+/g, '').replace(/\[.*\]$/, '');
}

/** The classes whose kinds print bytes and GB/s: passes bound by memory, not arithmetic. */
export const MEMORY_BOUND_CLASSES = ['elementwise/norm/other', 'cast', 'optimizer'];

/** Bytes of a dispatch's storage bindings (a uniform buffer counts none). */
export function storageBindingBytes(bindings: Binding[]): number {
  return bindings.reduce((t, b) => t + (asSlice(b).buffer.usage & GPUBufferUsage.UNIFORM ? 0 : bindingBytes(b)), 0);
}

export function classOf(kind: string): string {
  if (kind.startsWith('cast ')) return 'cast';
  if (kind.includes('lora_') || kind.startsWith('lora.')) return 'lora';
  if (/quant|dequant|qdq|\.aq|\.gq|\.cq|\.tq|fake|wcodes/.test(kind)) return 'quantization';
  if (/_proj|lm_head|\.dw$|\.dx$|matmul|splitk/.test(kind)) return 'gemm';
  if (/attn/.test(kind)) return 'attention';
  if (/adam|grad_norm|clip/.test(kind)) return 'optimizer';
  return 'elementwise/norm/other';
}

/**
 * One step's host-side times (ms, medians over `reps`): encode = recording every dispatch and
 * finishing the command buffer; wait = submit until the loss readback is mapped; chunked = the whole
 * step with a submit after every `chunk` dispatches. The batch and step parameters stay as the last
 * trainStep left them: the same work every time.
 */
async function hostTimes(trainer: Awaited<ReturnType<typeof syntheticTrainer>>, chunks: number[], reps: number) {
  const list = trainer.stepDispatches();
  const rb = trainer.model.b('readback');
  const loss = trainer.model.b('loss');
  const copyLoss = (enc: GPUCommandEncoder) => enc.copyBufferToBuffer(loss, 0, rb, 0, 4);
  const mapLoss = async () => {
    await rb.mapAsync(GPUMapMode.READ);
    rb.unmap();
  };
  const encode: number[] = [];
  const wait: number[] = [];
  const whole: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    const cb = rt.record(list, copyLoss);
    const t1 = performance.now();
    rt.submit(cb);
    await mapLoss();
    const t2 = performance.now();
    encode.push(t1 - t0);
    wait.push(t2 - t1);
    whole.push(t2 - t0);
  }
  const chunked: Record<string, number> = {};
  for (const c of chunks) {
    const ms: number[] = [];
    for (let i = 0; i < reps; i++) {
      const t0 = performance.now();
      for (let j = 0; j < list.length; j += c) rt.run(list.slice(j, j + c), j + c >= list.length ? copyLoss : undefined);
      await mapLoss();
      ms.push(performance.now() - t0);
    }
    chunked[c] = median(ms);
  }
  return { dispatches: list.length, encodeMs: median(encode), waitMs: median(wait), wholeMs: median(whole), chunkedMs: chunked };
}

const dawnFlags = ['disable-dawn-features=timestamp_quantization', ...(a['no-tensor-cores'] ? [] : ['enable-dawn-features=allow_unsafe_apis'])];
const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags });
const rt = new Runtime(gpu);
const tensorCores = gpu.features.subgroupMatrix ? await enableI8TensorCores(rt) : undefined;
const tcLabel = tensorCores?.chosen ? i8TcLabel(tensorCores.chosen) : 'not used';
console.log(`int8 tensor cores: ${tcLabel}`);
const out: Record<string, unknown> = { date: new Date().toISOString(), adapter: gpu.adapterInfo, i8TensorCores: tcLabel, runs: [] as unknown[] };
/**
 * Bytes each dispatch binds, by the object rt.kernel returned (every kernel's bindings pass through it):
 * what a pass moves when it reads or writes each binding once in full. An in-place binding (read and
 * written) moves twice that, a binding read in part less: a lower bound for elementwise passes.
 */
const boundBytes = new WeakMap<Dispatch, number>();
const kernel = rt.kernel.bind(rt);
rt.kernel = (call) => {
  const d = kernel(call);
  boundBytes.set(d, storageBindingBytes(call.bindings));
  return d;
};
type Row = { kind: string; ms: number; dispatches: number; share: number; bytes: number; gbPerS: number };

/** Profiles one step of `trainer` (after 3 steps), prints it under `title` and records it. */
async function profile(trainer: Trainer, title: Record<string, string | number>): Promise<Row[]> {
  const { opts } = trainer;
  for (let i = 0; i < 3; i++) await trainer.trainStep();
  const list = trainer.stepDispatches();
  const ms = await profileDispatches(rt, list, Number(a.reps ?? 3));
  if (!ms) throw new Error('no timestamp queries on this adapter');
  const kinds = new Map<string, { ms: number; n: number; bytes: number }>();
  const classes = new Map<string, number>();
  list.forEach((d, i) => {
    const k = kindOf(d.label);
    const e = kinds.get(k) ?? { ms: 0, n: 0, bytes: 0 };
    e.ms += ms[i];
    e.n++;
    e.bytes += boundBytes.get(d) ?? 0;
    kinds.set(k, e);
    classes.set(classOf(k), (classes.get(classOf(k)) ?? 0) + ms[i]);
  });
  const total = ms.reduce((s, x) => s + x, 0);
  const rows = [...kinds.entries()].sort((x, y) => y[1].ms - x[1].ms)
    .map(([kind, e]) => ({ kind, ms: e.ms, dispatches: e.n, share: e.ms / total, bytes: e.bytes, gbPerS: e.bytes / (e.ms * 1e6) }));
  console.log(`\n${Object.values(title).join(' ')} B${opts.batch}xT${opts.seq}: ${list.length} dispatches, ${total.toFixed(2)} ms summed`);
  for (const [c, v] of [...classes.entries()].sort((x, y) => y[1] - x[1])) console.log(`  class ${c.padEnd(12)} ${v.toFixed(2).padStart(8)} ms ${(100 * v / total).toFixed(1)} %`);
  // Memory-bound kinds: MB bound a dispatch, µs a dispatch and the implied GB/s (boundBytes).
  const rate = (r: Row) => (MEMORY_BOUND_CLASSES.includes(classOf(r.kind))
    ? `  ${(r.bytes / r.dispatches / 1e6).toFixed(1).padStart(7)} MB ${(1000 * r.ms / r.dispatches).toFixed(1).padStart(7)} µs each ${r.gbPerS.toFixed(0).padStart(5)} GB/s` : '');
  for (const r of rows.slice(0, 40)) console.log(`  ${r.kind.padEnd(36)} ${r.ms.toFixed(3).padStart(8)} ms ×${r.dispatches} ${(100 * r.share).toFixed(1)} %${rate(r)}`);
  const memRows = rows.filter((r) => MEMORY_BOUND_CLASSES.includes(classOf(r.kind)));
  console.log(`  memory-bound kinds (${memRows.reduce((t, r) => t + r.ms, 0).toFixed(2)} ms): MB bound a dispatch, µs each, GB/s`);
  for (const r of memRows) console.log(`    ${r.kind.padEnd(36)} ${r.ms.toFixed(3).padStart(8)} ms ×${r.dispatches}${rate(r)}`);
  let host;
  if (a.host) {
    const chunks = (a.chunk ?? '64,128').split(',').map(Number);
    if (!chunks.every((c) => Number.isInteger(c) && c > 0)) throw new Error(`--chunk: positive integers, not ${a.chunk}`);
    host = await hostTimes(trainer, chunks, Number(a.reps ?? 3) * 3);
    console.log(`  host: ${host.dispatches} dispatches; one command buffer: encode ${host.encodeMs.toFixed(2)} ms + submit→loss mapped ${host.waitMs.toFixed(2)} ms = ${host.wholeMs.toFixed(2)} ms`);
    for (const [c, v] of Object.entries(host.chunkedMs)) console.log(`  host: a submit every ${c} dispatches: ${v.toFixed(2)} ms`);
  }
  (out.runs as unknown[]).push({ ...title, batch: opts.batch, seq: opts.seq, dispatches: list.length, totalMs: total, classes: Object.fromEntries(classes), kinds: rows, host });
  return rows;
}

if (a.lora !== undefined) {
  // Issue 39: full fine-tuning against LoRA r16 (all 7 linears) of SmolLM2's shape, per scheme.
  const model = loraBenchModel({ shape: a.shape, shrink: a.shrink, layers: a.layers === undefined ? undefined : Number(a.layers) });
  const [B, T] = [Number(a.batch ?? 8), Number(a.seq ?? 512)];
  const variants = a.lora.split(',').map(parseLoraVariant);
  for (const schemeName of (a.scheme ?? 'fp32,f16').split(',')) {
    const scheme = SCHEME_PRESETS[schemeName as keyof typeof SCHEME_PRESETS];
    if (!scheme) throw new Error(`--scheme: unknown ${schemeName} (have ${Object.keys(SCHEME_PRESETS).join(', ')})`);
    const byVariant = new Map<string, Row[]>();
    for (const v of variants) {
      const trainer = await loraVariantTrainer(rt, model, defaultTrainOptions('base', { batch: B, seq: T, steps: 1000, evalEvery: 0, scheme }), v);
      try {
        byVariant.set(v.name, await profile(trainer, { model: `smollm2-${a.shape ?? '135m'}${a.shrink ? '-shrunk' : ''}`, scheme: schemeName, variant: v.name }));
      } finally {
        trainer.destroy();
      }
    }
    // Every kind's ms per variant, side by side (largest first in the last variant).
    const names = [...byVariant.keys()];
    const at = new Map(names.map((n) => [n, new Map(byVariant.get(n)!.map((r) => [r.kind, r]))]));
    const kinds = [...new Set(names.flatMap((n) => byVariant.get(n)!.map((r) => r.kind)))];
    const last = at.get(names[names.length - 1])!;
    kinds.sort((x, y) => (last.get(y)?.ms ?? 0) - (last.get(x)?.ms ?? 0));
    const cell = (n: string, k: string) => { const r = at.get(n)!.get(k); return (r ? `${r.ms.toFixed(3)} ×${r.dispatches}` : '—').padStart(16); };
    console.log(`\n${schemeName}: ms summed per kind ×dispatches, ${names.join(' | ')}`);
    for (const n of names) console.log(`  total ${n.padEnd(30)} ${byVariant.get(n)!.reduce((s, r) => s + r.ms, 0).toFixed(2)} ms, ${byVariant.get(n)!.reduce((s, r) => s + r.dispatches, 0)} dispatches`);
    for (const k of kinds.slice(0, 50)) console.log(`  ${k.padEnd(36)}${names.map((n) => cell(n, k)).join('')}`);
  }
} else {
  for (const model of (a.model ?? 'base').split(',') as PresetName[]) {
    for (const schemeName of (a.scheme ?? 'fp32,agoq').split(',')) {
      const preset = SCHEME_PRESETS[schemeName as keyof typeof SCHEME_PRESETS];
      if (!preset) throw new Error(`unknown scheme ${schemeName}`);
      // --weight-codes: the INT8 GEMMs' weight codes per GEMM or once per step (default: the scheme's).
      const scheme = a['weight-codes'] === undefined ? preset : parseScheme({ ...preset, weight_codes: a['weight-codes'] });
      const batch = a.batch ? Number(a.batch) : undefined;
      const seq = a.seq ? Number(a.seq) : undefined;
      const trainer = await syntheticTrainer(rt, { preset: model, scheme, batch, seq, steps: 10 });
      try {
        await profile(trainer, { model, scheme: schemeName });
      } finally {
        trainer.destroy();
      }
    }
  }
}
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
// --record: the compact record a doc cites (bench/record.ts): per run, the step's GPU time per class.
if (a.record) {
  const runs = out.runs as { model: string; scheme: string; variant?: string; batch: number; seq: number; totalMs: number; classes: Record<string, number> }[];
  writeRecord(a.record, { command: commandLine('step-profile'), gpu: gpuOf(gpu.adapterInfo), baseline: null, figures: Object.fromEntries(runs.map((r) => [
    `${r.model} ${r.scheme}${r.variant ? ` ${r.variant}` : ''} B${r.batch}xT${r.seq} ms summed`, { total: r.totalMs, ...r.classes }])) });
}
process.exit(0);
