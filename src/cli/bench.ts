/**
 * npm run bench -- <suite> [options]: speed of the engine on this machine's GPU (Dawn; SwiftShader
 * when none), as a table and, with --json, a file of every row plus the command line, date, adapter
 * and Dawn features. --baseline merges bench/torch_baseline.py's figures (same keys) and prints
 * ours/theirs. How to run both on the GPU machine: bench/README.md.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { chooseMatmulVariant, type MatmulShape } from '../engine/kernels/matmul';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { defaultTrainOptions } from '../engine/train/options';
import { fail, num, UsageError } from './common';
import { benchStep, SYNTHETIC_VOCAB } from '../../bench/step';
import {
  type BenchRow, modelGemmShapes, runAllReduce, runCodec, runGemm, runQgemm, stepKey, type SuiteOptions,
} from '../../bench/suites';

const SUITES = ['gemm', 'qgemm', 'codec', 'step', 'allreduce', 'all', 'report'] as const;
type Suite = (typeof SUITES)[number];

const HELP = `usage: npm run bench -- <suite> [options]
  suites: gemm       fp32 GEMM GFLOP/s: squares (--sizes) and the forward/dX/dW GEMMs of --model
          qgemm      INT8 dot4I8Packed (alone and with X quantization), weight-only INT4/INT8/FP8 GOP/s
          codec      TACO compress/decompress and FP8/INT4/INT8 group quantize GB/s (--sizes = elements)
          step       training step tokens/s and memory per --model and --scheme
          allreduce  mean all-reduce fp32/int8 over in-process loopback peers (--sizes = elements)
          all        every suite above
          report     no measurement: reprint --input FILE.json (with --baseline merged)
  --json FILE          write all rows, the command line, date, adapter and Dawn features
  --baseline FILE      merge bench/torch_baseline.py output; prints ours/theirs per matching row
  --input FILE         (report) rows written earlier by --json
  --sizes A,B,...      square sizes (gemm, qgemm) or element counts (codec, allreduce)
  --model P,...        presets micro|tiny|small|base, or none (default small,base)
  --scheme S,...       step: scheme presets or all (default fp32,agoq,w8a8g8,taco)
  --batch B --seq T    override the preset's batch and context (gemm model shapes, step)
  --variants V,...     gemm: matmul variants, all, or heuristic (default all)
  --ranks N            allreduce peers (default 4)
  --reps N --warmup N  timed repetitions (median) and untimed warm-up
  --quick              tiny shapes, few reps: seconds on SwiftShader (tests)
  --cpu                force the SwiftShader CPU adapter`;

interface Baseline {
  source: string;
  rows: { key: string; name?: string; value: number; unit?: string }[];
}

function list(name: string, v: string | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  const xs = v.split(',').map((s) => s.trim()).filter(Boolean);
  if (xs.length === 0) throw new UsageError(`--${name} expects a comma-separated list, got '${v}'`);
  return xs;
}

function ints(name: string, v: string | undefined): number[] | undefined {
  return list(name, v)?.map((s) => num(name, s, { int: true, min: 1 }) as number);
}

function readJson(flag: string, file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UsageError(`--${flag} ${file}: ${(e as Error).message}`);
  }
}

function loadBaseline(file: string): Baseline {
  const raw = readJson('baseline', file) as Partial<Baseline> | null;
  if (!raw || !Array.isArray(raw.rows) || raw.rows.some((r) => typeof r?.key !== 'string' || typeof r?.value !== 'number')) {
    throw new UsageError(`--baseline ${file}: expected {"source", "rows": [{"key", "value", ...}]} (bench/torch_baseline.py output)`);
  }
  return { source: String(raw.source ?? path.basename(file)), rows: raw.rows };
}

function mergeBaseline(rows: BenchRow[], b: Baseline): number {
  const byKey = new Map(b.rows.map((r) => [r.key, r]));
  let n = 0;
  for (const r of rows) {
    const t = r.key ? byKey.get(r.key) : undefined;
    if (!t || !(t.value > 0)) continue;
    r.baseline = { value: t.value, name: t.name ?? t.key, source: b.source };
    r.ratio = r.value / t.value;
    n++;
  }
  return n;
}

function fmt(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : x.toPrecision(3);
}

function printTable(rows: BenchRow[]): void {
  const shown = rows.filter((r) => r.show);
  const cells = shown.map((r) => [
    r.suite, r.name, `${fmt(r.value)} ${r.unit}`, r.ms === undefined ? '' : `${fmt(r.ms)} ms`, r.method ?? '',
    r.baseline ? `${fmt(r.baseline.value)} (${r.baseline.name})` : '', r.ratio === undefined ? '' : `${r.ratio.toFixed(2)}x`,
  ]);
  const head = ['suite', 'problem', 'ours', 'time', 'timer', 'baseline', 'ours/theirs'];
  const w = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => c.map((s, i) => s.padEnd(w[i])).join('  ').trimEnd();
  console.log(line(head));
  console.log(line(w.map((n) => '-'.repeat(n))));
  for (const c of cells) console.log(line(c));
}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        json: { type: 'string' }, baseline: { type: 'string' }, input: { type: 'string' }, sizes: { type: 'string' },
        model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' },
        variants: { type: 'string' }, ranks: { type: 'string' }, reps: { type: 'string' }, warmup: { type: 'string' },
        quick: { type: 'boolean' }, cpu: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: true,
    });
  } catch (e) {
    throw new UsageError(`${(e as Error).message} (see --help)`);
  }
  const a = parsed.values;
  if (a.help) {
    console.log(HELP);
    return;
  }
  if (parsed.positionals.length !== 1) throw new UsageError(`expected one suite (${SUITES.join(', ')}), got ${parsed.positionals.length} (see --help)`);
  const suite = parsed.positionals[0] as Suite;
  if (!SUITES.includes(suite)) throw new UsageError(`unknown suite '${suite}' (suites: ${SUITES.join(', ')})`);
  const quick = !!a.quick;
  const sizes = ints('sizes', a.sizes);
  const models = list('model', a.model) ?? (quick ? ['micro'] : ['small', 'base']);
  for (const m of models) {
    if (m !== 'none' && !PRESET_NAMES.includes(m as PresetName)) throw new UsageError(`--model: unknown preset '${m}' (${PRESET_NAMES.join(', ')}, none)`);
  }
  const presets = models.filter((m) => m !== 'none') as PresetName[];
  const schemeNames = list('scheme', a.scheme) ?? (quick ? ['fp32'] : ['fp32', 'agoq', 'w8a8g8', 'taco']);
  const schemes = (schemeNames.includes('all') ? Object.keys(SCHEME_PRESETS) : schemeNames).map((s) => {
    const sc = SCHEME_PRESETS[s];
    if (!sc) throw new UsageError(`--scheme: unknown preset '${s}' (${Object.keys(SCHEME_PRESETS).join(', ')}, all)`);
    return sc;
  });
  const batch = num('batch', a.batch, { int: true, min: 1 });
  const seq = num('seq', a.seq, { int: true, min: 1 });
  const ranks = num('ranks', a.ranks, { int: true, min: 1 }) ?? 4;
  const reps = num('reps', a.reps, { int: true, min: 1 });
  const warmup = num('warmup', a.warmup, { int: true, min: 0 });
  const variantsArg = list('variants', a.variants) ?? [quick ? 'heuristic' : 'all'];
  const baseline = a.baseline ? loadBaseline(a.baseline) : null;
  if (suite === 'report' && !a.input) throw new UsageError('report needs --input FILE.json');
  if (suite !== 'report' && a.input) throw new UsageError('--input is only for the report suite');

  // Check that the presets resolve before acquiring the GPU (a bad --batch/--seq is a usage error).
  const trainShape = (p: PresetName) => {
    try {
      const o = defaultTrainOptions(p, { batch, seq, model: { vocab_size: SYNTHETIC_VOCAB } });
      return { model: o.model, batch: o.batch, seq: o.seq };
    } catch (e) {
      throw new UsageError((e as Error).message.replace(/:?\n\s*/g, '; '));
    }
  };
  const shapes = presets.map(trainShape);

  const out: Record<string, unknown> = {
    command: ['bench', ...process.argv.slice(2)].join(' '),
    argv: process.argv.slice(2),
    date: new Date().toISOString(),
  };
  let rows: BenchRow[] = [];
  if (suite === 'report') {
    const prev = readJson('input', a.input as string) as { rows?: BenchRow[] } & Record<string, unknown>;
    if (!prev || !Array.isArray(prev.rows)) throw new UsageError(`--input ${a.input}: no "rows" (expected a file written by --json)`);
    rows = prev.rows;
    for (const r of rows) {
      delete r.baseline;
      delete r.ratio;
    }
    Object.assign(out, { measured: { command: prev.command, date: prev.date, adapter: prev.adapter } });
  } else {
    // Exact timestamps (Dawn rounds them otherwise); on SwiftShader keep node.ts's compile-time toggle too.
    const dawnFlags = [a.cpu
      ? 'disable-dawn-features=timestamp_quantization,use_vulkan_zero_initialize_workgroup_memory_extension'
      : 'disable-dawn-features=timestamp_quantization'];
    const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags });
    const rt = new Runtime(gpu);
    Object.assign(out, {
      node: process.version,
      dawnFlags,
      adapter: gpu.adapterInfo,
      features: gpu.features,
      dawnFeatures: [...gpu.device.features].sort(),
      limits: {
        maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
        maxComputeWorkgroupStorageSize: gpu.limits.maxComputeWorkgroupStorageSize,
        maxComputeInvocationsPerWorkgroup: gpu.limits.maxComputeInvocationsPerWorkgroup,
      },
    });
    console.error(`adapter: ${JSON.stringify(gpu.adapterInfo)} timestamps: ${gpu.features.timestampQuery}`);
    const so = (w: number, r: number): SuiteOptions => ({
      warmup: warmup ?? w, reps: reps ?? r,
      onRow: (row) => console.error(`  ${row.suite} ${row.name}: ${fmt(row.value)} ${row.unit}`),
    });
    const want = (s: Suite) => suite === s || suite === 'all';
    try {
      if (want('gemm')) {
        const sq: MatmulShape[] = (sizes ?? (quick ? [64] : [512, 1024, 2048, 4096, 8192])).map((n) => ({ M: n, N: n, K: n, transA: false, transB: false }));
        // --quick: one linear layer's three GEMMs per model (the shapes differ per layer, the code does not).
        const all = [...sq, ...shapes.flatMap((s) => modelGemmShapes(s.model, s.batch, s.seq).slice(0, quick ? 3 : undefined))];
        const variants = variantsArg.includes('all') ? undefined : variantsArg.includes('heuristic') ? [] : variantsArg;
        if (variants && variants.length === 0) {
          // Only the heuristic's pick per shape.
          for (const s of all) rows.push(...(await runGemm(rt, [s], { ...so(2, 5), variants: [chooseMatmulVariant(s, rt.device.limits)] })));
        } else {
          rows.push(...(await runGemm(rt, all, { ...so(3, 10), variants })));
        }
      }
      if (want('qgemm')) {
        const sq = (sizes ?? (quick ? [64] : [1024, 2048, 4096, 8192])).map((n) => ({ M: n, N: n, K: n }));
        const fwd = shapes.flatMap((s) => modelGemmShapes(s.model, s.batch, s.seq).filter((g) => !g.transA && g.transB).map(({ M, N, K }) => ({ M, N, K })).slice(0, quick ? 1 : undefined));
        rows.push(...(await runQgemm(rt, [...sq, ...fwd], so(2, quick ? 2 : 10))));
      }
      if (want('codec')) rows.push(...(await runCodec(rt, sizes ?? (quick ? [4096] : [1 << 22, 1 << 24, 1 << 26]), so(2, quick ? 2 : 10))));
      if (want('step')) {
        for (const p of presets) {
          for (const scheme of schemes) {
            const r = await benchStep(rt, { preset: p, scheme, batch, seq, warmup: warmup ?? (quick ? 1 : 3), reps: reps ?? (quick ? 2 : 10) });
            const row: BenchRow = {
              suite: 'step', name: `${p} ${r.scheme} B=${r.batch} T=${r.seq} (${(r.mem.total / 2 ** 20).toFixed(1)} MiB)`,
              key: stepKey(r.model, r.batch, r.seq), unit: 'tokens/s', value: r.tokensPerS, ms: r.msPerStep, method: 'wallclock', show: true,
              detail: { preset: p, scheme: r.scheme, batch: r.batch, seq: r.seq, model: r.model, optimizer: r.optimizer, samplesMs: r.samplesMs, mem: r.mem, plan: r.plan },
            };
            rows.push(row);
            so(0, 0).onRow?.(row);
          }
        }
      }
      if (want('allreduce')) rows.push(...(await runAllReduce(sizes ?? (quick ? [4096] : [1 << 16, 1 << 20, 1 << 22]), ranks, so(1, quick ? 2 : 5))));
    } finally {
      rt.destroy();
    }
  }
  if (baseline) {
    const n = mergeBaseline(rows, baseline);
    out.baseline = { file: a.baseline, source: baseline.source, matched: n };
  }
  out.rows = rows;
  printTable(rows);
  if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2) + '\n');
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then(() => {
  clearInterval(keepAlive);
  process.exit(0);
}, fail);
