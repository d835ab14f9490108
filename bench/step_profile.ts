/**
 * Where a training step's GPU time goes: each dispatch of one step (forward, backward, AdamW) timed
 * on its own (profileDispatches), summed per kernel kind — labels with the layer index dropped
 * (`L3.q_proj` → `q_proj`, `L3.attn.bwd.rows0` → `attn.bwd.rows`), and per class (GEMM, attention,
 * quantization, elementwise, optimizer).
 *
 *   node step_profile.mjs --model base --scheme fp32,agoq [--batch 16 --seq 512] [--json out.json]
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { profileDispatches } from '../src/engine/gpu/timer';
import type { PresetName } from '../src/engine/model/config';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';
import { syntheticTrainer } from './step';

const a = parseArgs({ options: {
  model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' },
  json: { type: 'string' }, reps: { type: 'string' }, cpu: { type: 'boolean' },
} }).values;

/** Kernel kind of a dispatch label: layer prefix and trailing numbers dropped. */
export function kindOf(label: string): string {
  return label.replace(/^L\d+\./, '').replace(/\d+/g, '').replace(/\[.*\]$/, '');
}

export function classOf(kind: string): string {
  if (/quant|dequant|qdq|\.aq|\.gq|fake/.test(kind)) return 'quantization';
  if (/_proj|lm_head|\.dw$|\.dx$|matmul|splitk/.test(kind)) return 'gemm';
  if (/attn/.test(kind)) return 'attention';
  if (/adam|grad_norm|clip/.test(kind)) return 'optimizer';
  return 'elementwise/norm/other';
}

const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const out: Record<string, unknown> = { date: new Date().toISOString(), adapter: gpu.adapterInfo, runs: [] as unknown[] };
for (const model of (a.model ?? 'base').split(',') as PresetName[]) {
  for (const schemeName of (a.scheme ?? 'fp32,agoq').split(',')) {
    const scheme = SCHEME_PRESETS[schemeName as keyof typeof SCHEME_PRESETS];
    if (!scheme) throw new Error(`unknown scheme ${schemeName}`);
    const batch = a.batch ? Number(a.batch) : undefined;
    const seq = a.seq ? Number(a.seq) : undefined;
    const trainer = await syntheticTrainer(rt, { preset: model, scheme, batch, seq, steps: 10 });
    const { opts } = trainer;
    try {
      for (let i = 0; i < 3; i++) await trainer.trainStep();
      const list = trainer.stepDispatches();
      const ms = await profileDispatches(rt, list, Number(a.reps ?? 3));
      if (!ms) throw new Error('no timestamp queries on this adapter');
      const kinds = new Map<string, { ms: number; n: number }>();
      const classes = new Map<string, number>();
      list.forEach((d, i) => {
        const k = kindOf(d.label);
        const e = kinds.get(k) ?? { ms: 0, n: 0 };
        e.ms += ms[i];
        e.n++;
        kinds.set(k, e);
        classes.set(classOf(k), (classes.get(classOf(k)) ?? 0) + ms[i]);
      });
      const total = ms.reduce((s, x) => s + x, 0);
      const rows = [...kinds.entries()].sort((x, y) => y[1].ms - x[1].ms).map(([kind, e]) => ({ kind, ms: e.ms, dispatches: e.n, share: e.ms / total }));
      console.log(`\n${model} ${schemeName} B${opts.batch}xT${opts.seq}: ${list.length} dispatches, ${total.toFixed(2)} ms summed`);
      for (const [c, v] of [...classes.entries()].sort((x, y) => y[1] - x[1])) console.log(`  class ${c.padEnd(12)} ${v.toFixed(2).padStart(8)} ms ${(100 * v / total).toFixed(1)} %`);
      for (const r of rows.slice(0, 40)) console.log(`  ${r.kind.padEnd(36)} ${r.ms.toFixed(3).padStart(8)} ms ×${r.dispatches} ${(100 * r.share).toFixed(1)} %`);
      (out.runs as unknown[]).push({ model, scheme: schemeName, batch: opts.batch, seq: opts.seq, totalMs: total, classes: Object.fromEntries(classes), kinds: rows });
    } finally {
      trainer.destroy();
    }
  }
}
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
process.exit(0);
