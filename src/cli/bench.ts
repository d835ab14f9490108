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
import { adapterKeyOf, runTuningStatus } from '../engine/tune';
import { runTuneCache, tuneCachePath } from './tune-cache';
import { Runtime } from '../engine/gpu/runtime';
import { setI8SplitKMax } from '../engine/kernels/qgemm/splitk';
import { enableI8TensorCores, i8TcLabel } from '../engine/kernels/qgemm/tc';
import { I8_TC_LAYOUTS } from '../engine/kernels/qgemm/tc-tables';
import { setAttentionDqPath } from '../engine/kernels/attention/attention';
import { setTransposeQuantVariant, TQ_VARIANTS } from '../engine/kernels/qgemm/block';
import type { DqPath } from '../engine/kernels/attention/ds';
import type { MatmulShape } from '../engine/kernels/matmul/plan';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { SCHEME_PRESETS } from '../engine/scheme/presets';
import { parseScheme, WEIGHT_CODES } from '../engine/scheme/scheme';
import { fail, num, UsageError } from './common';
import {
  type Baseline, type BenchRow, formatFigure as fmt, type GemmVariants, gpuReport, mergeBaseline, parseBaseline, planDefaults, presetShape, runSuite, SUITE_NAMES, type SuitePlan,
} from '../lab/suites';

const SUITES = [...SUITE_NAMES, 'all', 'report'] as const;
type Suite = (typeof SUITES)[number];

const HELP = `usage: npm run bench -- <suite> [options]
  suites: gemm       fp32 GEMM GFLOP/s: squares (--sizes) and the forward/dX/dW GEMMs of --model
          qgemm      INT8 GEMM (tensor cores where present, else dot4I8Packed; alone and with X
                     quantization), weight-only INT4/INT8/FP8 GOP/s
          codec      TACO compress/decompress and FP8/INT4/INT8 group quantize GB/s (--sizes = elements)
          step       training step tokens/s and memory per --model and --scheme
          generate   KV-cache generation: decode tokens/s after a 16-token prompt per --model (--seq: context)
          allreduce  mean all-reduce fp32/int8 over in-process loopback peers (--sizes = elements)
          all        every suite above
          report     no measurement: reprint --input FILE.json (with --baseline merged)
  --json FILE          write all rows, the command line, date, adapter and Dawn features
  --baseline FILE      merge bench/torch_baseline.py output; prints ours/theirs per matching row
  --input FILE         (report) rows written earlier by --json
  --sizes A,B,...      square sizes (gemm, qgemm) or element counts (codec, allreduce)
  --shapes S,...       gemm: more shapes, MxNxK with an optional :XY for the stored layouts of A and B
                       (N or T; default NN), e.g. 4224x4096x4096,768x768x8192:TN (without --sizes: no squares)
  --model P,...        presets micro|tiny|small|base, or none (default small,base)
  --scheme S,...       step: scheme presets or all (default fp32,agoq,w8a8g8,taco)
  --batch B --seq T    override the preset's batch and context (gemm model shapes, step)
  --variants V,...     gemm: matmul variants, all, heuristic, or pick (the engine's choice per shape) (default all)
  --ranks N            allreduce peers (default 4)
  --reps N --warmup N  timed repetitions (median) and untimed warm-up
  --quick              tiny shapes, few reps: seconds on SwiftShader (tests)
  --cpu                force the SwiftShader CPU adapter
  --no-tensor-cores    leave Dawn's unsafe APIs off (no subgroup-matrix INT8 path)
  --i8-split-max S     at most S K slices for the INT8 dW GEMMs' split-K (1: never split; default: the engine's choice)
  --i8tc-layout I      try I8_TC_LAYOUTS[I] first for the INT8 tensor-core GEMM (default 0)
  --attn-dq PATH       the attention backward's dq: stored (from the dK/dV pass's dS) or recompute (default: the plan's choice)
  --tq-variant V       the INT8 transposed quantizers' form: direct1, direct4, staged1, staged4, regs (default: the engine's)
  --weight-codes W     step: the INT8 GEMMs' weight codes per-gemm (quantized before each GEMM) or per-step
                       (every weight once per step), for every --scheme (default: each scheme's weight_codes)`;

function list(name: string, v: string | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  const xs = v.split(',').map((s) => s.trim()).filter(Boolean);
  if (xs.length === 0) throw new UsageError(`--${name} expects a comma-separated list, got '${v}'`);
  return xs;
}

function ints(name: string, v: string | undefined): number[] | undefined {
  return list(name, v)?.map((s) => num(name, s, { int: true, min: 1 }) as number);
}

/** `--shapes`: MxNxK[:XY], X and Y the stored layout of A and B (N as is, T transposed). */
function parseGemmShapes(v: string | undefined): MatmulShape[] | undefined {
  return list('shapes', v)?.map((s) => {
    const m = /^(\d+)x(\d+)x(\d+)(?::([NT])([NT]))?$/.exec(s);
    const dims = m ? [m[1], m[2], m[3]].map(Number) : [];
    if (!m || dims.some((d) => !(d >= 1 && d <= 65536))) throw new UsageError(`--shapes: '${s}' is not MxNxK[:XY] with sizes 1..65536 and X, Y in N, T`);
    return { M: dims[0], N: dims[1], K: dims[2], transA: m[4] === 'T', transB: m[5] === 'T' };
  });
}

function readJson(flag: string, file: string): unknown {
  try {
    return JSON.parse(readFileSync(file, 'utf8'));
  } catch (e) {
    throw new UsageError(`--${flag} ${file}: ${(e as Error).message}`);
  }
}

function loadBaseline(file: string): Baseline {
  const raw = readJson('baseline', file);
  try {
    return parseBaseline(raw, path.basename(file));
  } catch (e) {
    throw new UsageError(`--baseline ${file}: ${(e as Error).message}`);
  }
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
        json: { type: 'string' }, baseline: { type: 'string' }, input: { type: 'string' }, sizes: { type: 'string' }, shapes: { type: 'string' },
        model: { type: 'string' }, scheme: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' },
        variants: { type: 'string' }, ranks: { type: 'string' }, reps: { type: 'string' }, warmup: { type: 'string' },
        quick: { type: 'boolean' }, cpu: { type: 'boolean' }, 'no-tensor-cores': { type: 'boolean' }, 'i8-split-max': { type: 'string' }, 'i8tc-layout': { type: 'string' }, 'attn-dq': { type: 'string' }, 'tq-variant': { type: 'string' },
        'weight-codes': { type: 'string' },
        help: { type: 'boolean', short: 'h' },
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
  const gemmShapes = parseGemmShapes(a.shapes);
  const defaults = planDefaults(quick);
  const models = list('model', a.model) ?? defaults.presets;
  for (const m of models) {
    if (m !== 'none' && !PRESET_NAMES.includes(m as PresetName)) throw new UsageError(`--model: unknown preset '${m}' (${PRESET_NAMES.join(', ')}, none)`);
  }
  const presets = models.filter((m) => m !== 'none') as PresetName[];
  const schemeNames = list('scheme', a.scheme) ?? defaults.schemes;
  const weightCodes = a['weight-codes'];
  if (weightCodes !== undefined && !(WEIGHT_CODES as readonly string[]).includes(weightCodes)) {
    throw new UsageError(`--weight-codes: '${weightCodes}' is not one of ${WEIGHT_CODES.join(', ')}`);
  }
  const schemes = (schemeNames.includes('all') ? Object.keys(SCHEME_PRESETS) : schemeNames).map((s) => {
    const sc = SCHEME_PRESETS[s];
    if (!sc) throw new UsageError(`--scheme: unknown preset '${s}' (${Object.keys(SCHEME_PRESETS).join(', ')}, all)`);
    return weightCodes === undefined ? sc : parseScheme({ ...sc, weight_codes: weightCodes });
  });
  const batch = num('batch', a.batch, { int: true, min: 1 });
  const seq = num('seq', a.seq, { int: true, min: 1 });
  const ranks = num('ranks', a.ranks, { int: true, min: 1 }) ?? 4;
  const reps = num('reps', a.reps, { int: true, min: 1 });
  const warmup = num('warmup', a.warmup, { int: true, min: 0 });
  const i8SplitMax = num('i8-split-max', a['i8-split-max'], { int: true, min: 1 });
  const i8TcLayout = num('i8tc-layout', a['i8tc-layout'], { int: true, min: 0 }) ?? 0;
  if (i8TcLayout >= I8_TC_LAYOUTS.length) throw new UsageError(`--i8tc-layout: ${i8TcLayout} is past the ${I8_TC_LAYOUTS.length} layouts`);
  const attnDq = a['attn-dq'] as DqPath | undefined;
  if (attnDq !== undefined && attnDq !== 'stored' && attnDq !== 'recompute') throw new UsageError(`--attn-dq: '${attnDq}' is not stored or recompute`);
  const tqVariant = a['tq-variant'];
  if (tqVariant !== undefined && !TQ_VARIANTS[tqVariant]) throw new UsageError(`--tq-variant: '${tqVariant}' is not one of ${Object.keys(TQ_VARIANTS).join(', ')}`);
  const variantsArg = list('variants', a.variants);
  const variants: GemmVariants = !variantsArg ? defaults.variants : variantsArg.includes('all') ? 'all' : variantsArg.includes('heuristic') ? 'heuristic' : variantsArg.includes('pick') ? 'pick' : variantsArg;
  const baseline = a.baseline ? loadBaseline(a.baseline) : null;
  if (suite === 'report' && !a.input) throw new UsageError('report needs --input FILE.json');
  if (suite !== 'report' && a.input) throw new UsageError('--input is only for the report suite');

  // Check that the presets resolve before acquiring the GPU (a bad --batch/--seq is a usage error).
  const trainShape = (p: PresetName) => {
    try {
      return presetShape(p, batch, seq);
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
    // allow_unsafe_apis exposes subgroup matrices (tensor cores) where the GPU has them.
    const dawnFlags = [a.cpu
      ? 'disable-dawn-features=timestamp_quantization,use_vulkan_zero_initialize_workgroup_memory_extension'
      : 'disable-dawn-features=timestamp_quantization', ...(a['no-tensor-cores'] ? [] : ['enable-dawn-features=allow_unsafe_apis'])];
    const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags });
    const rt = new Runtime(gpu);
    // What the user's tuning cache holds for this adapter applies, as in every run (npm run tune; empty: shipped tables, heuristic).
    const tuneApplied = runTuneCache(false).applyTo(rt.device, adapterKeyOf(gpu.adapterInfo));
    if (tuneApplied) console.error(`tuning cache ${tuneCachePath()}: ${tuneApplied} tuned choices for this adapter`);
    setI8SplitKMax(rt, i8SplitMax);
    setAttentionDqPath(rt, attnDq);
    setTransposeQuantVariant(rt, tqVariant === undefined ? undefined : TQ_VARIANTS[tqVariant]);
    const layouts = [I8_TC_LAYOUTS[i8TcLayout], ...I8_TC_LAYOUTS.filter((_, i) => i !== i8TcLayout)];
    const tcStart = performance.now();
    const tensorCores = gpu.features.subgroupMatrix ? await enableI8TensorCores(rt, layouts) : undefined;
    const tcSeconds = ((performance.now() - tcStart) / 1000).toFixed(1);
    if (tensorCores) console.error(`int8 tensor cores: ${tensorCores.chosen ? i8TcLabel(tensorCores.chosen) : `not used (${tensorCores.tried.map((t) => `${t.label}: ${t.error ?? `${t.mismatches} mismatches`}`).join('; ') || 'no i8 config'})`} (probed and checked in ${tcSeconds} s)`);
    Object.assign(out, {
      node: process.version,
      dawnFlags,
      ...gpuReport(gpu, tensorCores),
    });
    console.error(`adapter: ${JSON.stringify(gpu.adapterInfo)} timestamps: ${gpu.features.timestampQuery}`);
    const plan: SuitePlan = {
      quick, sizes: sizes && Object.fromEntries(SUITE_NAMES.map((s) => [s, sizes])), gemmShapes, shapes, schemes, variants, ranks, reps, warmup,
    };
    const onRow = (row: BenchRow) => console.error(`  ${row.suite} ${row.name}: ${fmt(row.value)} ${row.unit}`);
    try {
      for (const s of SUITE_NAMES) if (suite === s || suite === 'all') rows.push(...(await runSuite(rt, s, plan, onRow)));
      // Whether the figures ran on tuned kernels, partly, or defaults (shipped table, heuristic): docs/benchmarks.md says which.
      const tuning = runTuningStatus(rt);
      Object.assign(out, { tuning: { cache: tuneCachePath(), applied: tuneApplied, status: tuning.status, label: tuning.label, counts: tuning.counts } });
      console.error(`kernels: ${tuning.label}`);
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
