/**
 * The suites of `npm run bench`: each measures on a Runtime and returns rows in one shape
 * (BenchRow), so the CLI can print one table, write one JSON file and line rows up with a baseline
 * (bench/torch_baseline.py) by `key`. Figures are GPU pass times (timestamp queries) where
 * available, else wall clock; `method` says which. Never assert on them.
 * Shape letters: M, N, K of C[M,N] = op(A)[M,K]·op(B)[K,N]; for a linear layer of a model with
 * input width Cin, output width Cout and M = B·T tokens: forward Y = X·Wᵀ is (M, Cout, Cin, NT),
 * dX = dY·W is (M, Cin, Cout, NN), dW = dYᵀ·X is (Cout, Cin, M, TN).
 */
import { allReduceMean } from '../peers/collectives/allreduce';
import { PeerGroup } from '../peers/collectives/group';
import { LoopbackHub } from '../peers/transport/loopback';
import type { Gpu } from '../engine/gpu/device';
import type { Runtime } from '../engine/gpu/runtime';
import { chooseMatmulVariant, matmulChoice } from '../engine/kernels/matmul/choice';
import { type MatmulShape } from '../engine/kernels/matmul/plan';
import { i8TcLabel, type I8TcProbe } from '../engine/kernels/qgemm/tc';
import type { ModelConfig, PresetName } from '../engine/model/config';
import type { QuantFormat } from '../engine/quant/formats';
import type { Scheme } from '../engine/scheme/scheme';
import { defaultTrainOptions } from '../engine/train/options';
import { Rng } from '../engine/util/rng';
import { benchGemm, type GemmBenchOptions, type GemmBenchRow } from './gemm';
import { benchQgemm, benchQuantizeTimed, benchTaco, type GemmShape } from './quant';
import { benchGenerate } from './generate';
import { benchStep, SYNTHETIC_VOCAB } from './step';

export type Unit = 'GFLOP/s' | 'GOP/s' | 'GB/s' | 'tokens/s';

export interface BenchRow {
  suite: string;
  /** Human label for the table. */
  name: string;
  /** Identity for matching a baseline row (same key ⇒ same problem); absent: no baseline applies. */
  key?: string;
  unit: Unit;
  value: number;
  ms?: number;
  method?: string;
  /** Whether the table shows it (all rows go to the JSON). */
  show: boolean;
  detail?: Record<string, unknown>;
  baseline?: { value: number; name: string; source: string };
  /** ours / theirs (higher value is better in every unit used here). */
  ratio?: number;
}

export interface SuiteOptions {
  warmup: number;
  reps: number;
  /** Kernel suites: warm up until per-run time is steady for at least this long (0: counted warm-up only). */
  warmupMs?: number;
  onRow?: (r: BenchRow) => void;
}

const tr = (t: boolean | undefined) => (t ? 'T' : 'N');

export function gemmKey(s: MatmulShape): string {
  return `gemm/${s.M}x${s.N}x${s.K}/${tr(s.transA)}${tr(s.transB)}`;
}

export function i8Key(s: GemmShape): string {
  return `i8gemm/${s.M}x${s.N}x${s.K}`;
}

/** Baseline key of a training step: the model's shape and the batch, not its scheme. */
export function stepKey(c: ModelConfig, batch: number, seq: number): string {
  return `step/C${c.hidden_size}-L${c.num_hidden_layers}-H${c.num_attention_heads}-KV${c.num_key_value_heads}-F${c.intermediate_size}-V${c.vocab_size}${c.tie_word_embeddings ? '-tied' : ''}/B${batch}xT${seq}`;
}

/** Forward, dX and dW GEMMs of every linear layer of the model at M = batch·seq tokens (deduplicated). */
export function modelGemmShapes(c: ModelConfig, batch: number, seq: number): MatmulShape[] {
  const M = batch * seq;
  const C = c.hidden_size;
  const kv = (C / c.num_attention_heads) * c.num_key_value_heads;
  const linears: [number, number][] = [[C, C], [C, kv], [C, c.intermediate_size], [c.intermediate_size, C], [C, c.vocab_size]];
  const seen = new Map<string, MatmulShape>();
  for (const [cin, cout] of linears) {
    for (const s of [
      { M, N: cout, K: cin, transA: false, transB: true },
      { M, N: cin, K: cout, transA: false, transB: false },
      { M: cout, N: cin, K: M, transA: true, transB: false },
    ]) seen.set(gemmKey(s), s);
  }
  return [...seen.values()];
}

export async function runGemm(rt: Runtime, shapes: MatmulShape[], o: SuiteOptions & { variants?: GemmBenchOptions['variants'] }): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  // Rows go out shape by shape (the bench page's table fills as they come).
  const onShape = (raw: GemmBenchRow[]) => {
    for (const r of raw) {
      const row: BenchRow = {
        suite: 'gemm',
        name: `${r.M}x${r.N}x${r.K} ${tr(r.transA)}${tr(r.transB)} ${r.variant}${r.best ? ' (best)' : ''}${r.heuristic ? ' (heuristic)' : ''}`,
        key: r.best ? gemmKey(r) : undefined,
        unit: 'GFLOP/s', value: r.gflops, ms: r.ms, method: r.method, show: r.best || r.heuristic,
        detail: { M: r.M, N: r.N, K: r.K, transA: r.transA, transB: r.transB, variant: r.variant, best: r.best, heuristic: r.heuristic },
      };
      rows.push(row);
      o.onRow?.(row);
    }
  };
  await benchGemm(rt, shapes, { variants: o.variants, warmup: o.warmup, reps: o.reps, warmupMs: o.warmupMs, onShape });
  return rows;
}

/** benchQgemm needs K and N multiples of 8 (packed 4/8-bit words); other shapes are skipped. */
export function qgemmFits(s: GemmShape): boolean {
  return s.K % 8 === 0 && s.N % 8 === 0 && (s.M * s.N) % 4 === 0;
}

export async function runQgemm(rt: Runtime, shapes: GemmShape[], o: SuiteOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const s of shapes.filter(qgemmFits)) {
    const [r] = await benchQgemm(rt, [s], { warmup: o.warmup, reps: o.reps, warmupMs: o.warmupMs });
    for (const [kernel, gops] of Object.entries(r.gops)) {
      const row: BenchRow = {
        suite: 'qgemm', name: `${s.M}x${s.N}x${s.K} ${kernel}`,
        key: kernel === 'int8xint8' ? i8Key(s) : kernel === 'fp32' ? gemmKey({ ...s, transA: false, transB: true }) : undefined,
        unit: kernel === 'fp32' ? 'GFLOP/s' : 'GOP/s', value: gops, ms: r.ms[kernel], method: r.method, show: true,
        detail: { M: s.M, N: s.N, K: s.K, kernel },
      };
      rows.push(row);
      o.onRow?.(row);
    }
  }
  return rows;
}

/** TACO compress / decompress (with the plain FP8 quantizer as in-run baseline) and benchQuantize per format. */
export async function runCodec(rt: Runtime, sizes: number[], o: SuiteOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const push = (r: BenchRow) => (rows.push(r), o.onRow?.(r));
  const G = 128;
  for (const n of sizes) {
    const t = await benchTaco(rt, n, G, { warmup: o.warmup, reps: o.reps, inner: n < 1 << 20 ? 10 : 1 });
    const d = { n, G, payloadBytes: t.payloadBytes };
    push({ suite: 'codec', name: `taco compress n=${n} G=${G}`, unit: 'GB/s', value: t.compressGBs, ms: t.compressMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `taco decompress n=${n} G=${G}`, unit: 'GB/s', value: t.decompressGBs, ms: t.decompressMs, method: t.method, show: true, detail: d });
    // The issue's measure: fp32 bytes processed per second (input of compress, output of decompress).
    push({ suite: 'codec', name: `taco compress fp32 in n=${n} G=${G}`, unit: 'GB/s', value: t.compressFp32GBs, ms: t.compressMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `taco decompress fp32 out n=${n} G=${G}`, unit: 'GB/s', value: t.decompressFp32GBs, ms: t.decompressMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `taco compress+decompress fp32 n=${n} G=${G}`, unit: 'GB/s', value: t.pairFp32GBs, ms: t.compressMs + t.decompressMs, method: t.method, show: true, detail: { ...d, measure: '4n / (t_compress + t_decompress)' } });
    const b = t.backToBack;
    push({ suite: 'codec', name: `taco compress+decompress fp32, ${b.dispatchesPerPass} dispatches per pass n=${n} G=${G}`, unit: 'GB/s', value: b.pairFp32GBs, ms: b.compressMs + b.decompressMs, method: t.method, show: true, detail: { ...d, measure: '4n / (t_compress + t_decompress), each the median per dispatch of passes of back-to-back dispatches', compressMs: b.compressMs, decompressMs: b.decompressMs } });
    push({ suite: 'codec', name: `taco round trip fp32 n=${n} G=${G}`, unit: 'GB/s', value: t.roundTripFp32GBs, ms: t.roundTripMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `fp8-e4m3 quantize (taco's in-run baseline) n=${n} G=${G}`, unit: 'GB/s', value: t.baselineFp8GBs, ms: t.baselineFp8Ms, method: t.method, show: true, detail: d });
    for (const format of ['fp8-e4m3', 'int4', 'int8'] as QuantFormat[]) {
      const q = await benchQuantizeTimed(rt, n, { format, granularity: { kind: 'group', size: G }, reps: o.reps, warmupMs: o.warmupMs });
      push({ suite: 'codec', name: `quantize ${format} n=${n} G=${G}`, unit: 'GB/s', value: q.GBs, ms: q.ms, method: q.method, show: true, detail: { n, G, format } });
    }
  }
  return rows;
}

/**
 * Mean all-reduce of n fp32 values over `ranks` in-process peers (loopback transport): what the
 * protocol and codec cost in JS, not a network. GB/s counts the 4n-byte gradient once per call.
 */
export async function runAllReduce(sizes: number[], ranks: number, o: SuiteOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const n of sizes) {
    const xs = Array.from({ length: ranks }, (_, r) => new Rng(r + 1).normalArray(n, 0.02));
    for (const mode of ['fp32', 'int8'] as const) {
      const { transports } = LoopbackHub.group(ranks);
      const groups = transports.map((t) => new PeerGroup(t, { runId: 1, timeoutMs: 600_000 }));
      const samples: number[] = [];
      let sent = 0;
      try {
        for (let i = 0; i < o.warmup + o.reps; i++) {
          groups.forEach((g) => g.setStep(i));
          const t0 = performance.now();
          const res = await Promise.all(groups.map((g, r) => allReduceMean(g, xs[r], { mode })));
          if (i >= o.warmup) samples.push(performance.now() - t0);
          sent = res[0].bytesSent;
        }
      } finally {
        groups.forEach((g) => g.close());
      }
      samples.sort((a, b) => a - b);
      const ms = samples[samples.length >> 1];
      const row: BenchRow = {
        suite: 'allreduce', name: `${mode} n=${n} ranks=${ranks} (loopback)`, unit: 'GB/s', value: (4 * n) / (ms * 1e6), ms,
        method: 'wallclock', show: true, detail: { n, ranks, mode, bytesSentPerRank: sent },
      };
      rows.push(row);
      o.onRow?.(row);
    }
  }
  return rows;
}

/** A training step (src/lab/step.ts) per model and scheme: tokens/s, keyed by model shape and batch for the PyTorch baseline. */
export async function runStep(rt: Runtime, shapes: TrainShape[], schemes: Scheme[], o: SuiteOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const s of shapes) {
    for (const scheme of schemes) {
      const r = await benchStep(rt, { preset: s.preset, scheme, batch: s.batch, seq: s.seq, warmup: o.warmup, reps: o.reps });
      const row: BenchRow = {
        suite: 'step', name: `${s.preset} ${r.scheme} B=${r.batch} T=${r.seq} (${(r.mem.total / 2 ** 20).toFixed(1)} MiB)${r.gemmPathSummary.includes('int8') ? ` [${r.gemmPathSummary}; W codes ${r.weightCodes}]` : ''}`,
        key: stepKey(r.model, r.batch, r.seq), unit: 'tokens/s', value: r.tokensPerS, ms: r.msPerStep, method: 'wallclock', show: true,
        detail: {
          preset: s.preset, scheme: r.scheme, batch: r.batch, seq: r.seq, model: r.model, optimizer: r.optimizer, samplesMs: r.samplesMs, mem: r.mem, plan: r.plan,
          gemmPaths: r.gemmPathSummary, gemmSplits: r.gemmSplits, weightCodes: r.weightCodes,
        },
      };
      rows.push(row);
      o.onRow?.(row);
      if (r.gpuTokensPerS !== undefined) {
        // The same step's dispatches timed on the GPU alone (no readback, no host event-loop delay).
        const gpuRow: BenchRow = {
          suite: 'step', name: `${s.preset} ${r.scheme} B=${r.batch} T=${r.seq} GPU time`, unit: 'tokens/s', value: r.gpuTokensPerS,
          ms: r.gpuMsPerStep, method: 'timestamp', show: true, detail: { preset: s.preset, scheme: r.scheme, batch: r.batch, seq: r.seq },
        };
        rows.push(gpuRow);
        o.onRow?.(gpuRow);
      }
    }
  }
  return rows;
}

/** Generation with the KV-cache decoder per model: decode tokens/s after a prefill (src/lab/generate.ts). */
export async function runGenerate(rt: Runtime, shapes: TrainShape[], o: SuiteOptions & { prompt: number; tokens: number }): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const s of shapes) {
    const r = await benchGenerate(rt, { preset: s.preset, seq: s.seq, prompt: o.prompt, tokens: o.tokens, warmup: o.warmup, reps: o.reps });
    const row: BenchRow = {
      suite: 'generate', name: `${s.preset} decode ctx=${r.ctx} prompt=${r.prompt} (${r.steps} steps; prefill ${r.prefillMs.toFixed(1)} ms)`,
      unit: 'tokens/s', value: r.tokensPerS, ms: r.msPerToken, method: 'wallclock', show: true,
      detail: { preset: s.preset, ctx: r.ctx, prompt: r.prompt, steps: r.steps, prefillMs: r.prefillMs, samples: r.samples },
    };
    rows.push(row);
    o.onRow?.(row);
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// One bench run: which suites on which problems. Shared by `npm run bench` and the bench page
// (src/bench-page), so both measure the same problems with the same defaults.

/** The suites, in the order `all` runs them. */
export const SUITE_NAMES = ['gemm', 'qgemm', 'codec', 'step', 'generate', 'allreduce'] as const;
export type SuiteName = (typeof SUITE_NAMES)[number];

/** A preset's model and batch as the bench trains it: the recipe's batch and context unless overridden, vocab of the synthetic text. */
export interface TrainShape {
  preset: PresetName;
  model: ModelConfig;
  batch: number;
  seq: number;
}

/** Throws (defaultTrainOptions' message) when the batch or context does not fit the preset. */
export function presetShape(preset: PresetName, batch?: number, seq?: number): TrainShape {
  const o = defaultTrainOptions(preset, { batch, seq, model: { vocab_size: SYNTHETIC_VOCAB } });
  return { preset, model: o.model, batch: o.batch, seq: o.seq };
}

/**
 * gemm: every variant that fits the device; per shape only the heuristic's pick, or only the choice
 * the engine runs there (`pick`: tuned, else the GPU's measured table, else the heuristic; one pass,
 * as a call without a split-K workspace); or these choice names.
 */
export type GemmVariants = 'all' | 'heuristic' | 'pick' | string[];

/** Defaults of a full run (the CLI without options) and of a quick one (--quick: tiny shapes, seconds on SwiftShader). */
export function planDefaults(quick: boolean): { presets: PresetName[]; schemes: string[]; variants: GemmVariants; ranks: number } {
  return quick
    ? { presets: ['micro'], schemes: ['fp32'], variants: 'pick', ranks: 4 }
    : { presets: ['small', 'base'], schemes: ['fp32', 'agoq', 'w8a8g8', 'taco'], variants: 'all', ranks: 4 };
}

export interface SuitePlan {
  /** Tiny default sizes and few reps (what a size, rep or warm-up count given here overrides). */
  quick: boolean;
  /** Square sizes (gemm, qgemm) or element counts (codec, allreduce), per suite; absent: the suite's defaults. */
  sizes?: Partial<Record<SuiteName, number[]>>;
  /** gemm: shapes beyond the squares and the models' (given without `sizes`: no default squares). */
  gemmShapes?: MatmulShape[];
  /** Models whose GEMMs (gemm, qgemm) and training steps (step) are measured. */
  shapes: TrainShape[];
  /** step: one row per model and scheme. */
  schemes: Scheme[];
  variants: GemmVariants;
  /** allreduce: in-process peers. */
  ranks: number;
  reps?: number;
  warmup?: number;
}

/** Runs one suite of a plan; rows also go to `onRow` as each is measured. */
export async function runSuite(rt: Runtime, suite: SuiteName, plan: SuitePlan, onRow?: (r: BenchRow) => void): Promise<BenchRow[]> {
  const { quick, shapes } = plan;
  // Full runs warm each kernel until its time per run is steady (a fresh GPU clocks up for a while).
  const so = (warmup: number, reps: number): SuiteOptions => ({ warmup: plan.warmup ?? warmup, reps: plan.reps ?? reps, warmupMs: quick ? 0 : 300, onRow });
  const sizes = plan.sizes?.[suite];
  switch (suite) {
    case 'gemm': {
      const squares = (sizes ?? (plan.gemmShapes ? [] : quick ? [64] : [512, 1024, 2048, 4096, 8192]))
        .map((n): MatmulShape => ({ M: n, N: n, K: n, transA: false, transB: false }));
      // quick: one linear layer's three GEMMs per model (the shapes differ per layer, the code does not).
      const all = [...squares, ...(plan.gemmShapes ?? []), ...shapes.flatMap((s) => modelGemmShapes(s.model, s.batch, s.seq).slice(0, quick ? 3 : undefined))];
      if (plan.variants === 'heuristic') return runGemm(rt, all, { ...so(2, 5), variants: (s) => [chooseMatmulVariant(s, rt.device.limits)] });
      if (plan.variants === 'pick') return runGemm(rt, all, { ...so(2, 5), variants: (s) => [matmulChoice(rt, s)] });
      return runGemm(rt, all, { ...so(3, 10), variants: plan.variants === 'all' ? undefined : plan.variants });
    }
    case 'qgemm': {
      const squares = (sizes ?? (quick ? [64] : [1024, 2048, 4096, 8192])).map((n) => ({ M: n, N: n, K: n }));
      const forward = shapes.flatMap((s) =>
        modelGemmShapes(s.model, s.batch, s.seq).filter((g) => !g.transA && g.transB).map(({ M, N, K }) => ({ M, N, K })).slice(0, quick ? 1 : undefined));
      return runQgemm(rt, [...squares, ...forward], so(2, quick ? 2 : 10));
    }
    case 'codec':
      return runCodec(rt, sizes ?? (quick ? [4096] : [1 << 22, 1 << 24, 1 << 26]), so(2, quick ? 2 : 10));
    case 'step':
      return runStep(rt, shapes, plan.schemes, so(quick ? 1 : 3, quick ? 2 : 10));
    case 'generate':
      return runGenerate(rt, shapes, { ...so(quick ? 0 : 2, quick ? 1 : 5), prompt: quick ? 4 : 16, tokens: quick ? 8 : 200 });
    case 'allreduce':
      return runAllReduce(sizes ?? (quick ? [4096] : [1 << 16, 1 << 20, 1 << 22]), plan.ranks, so(1, quick ? 2 : 5));
  }
}

/**
 * What a bench JSON records about the GPU: adapter, the features the engine uses, the subgroup-matrix
 * configurations and whether the INT8 tensor-core path was enabled (`tensorCores`, enableI8TensorCores'
 * probe; absent without subgroup matrices), every device feature, the limits that shape the kernels.
 */
export function gpuReport(gpu: Gpu, tensorCores?: I8TcProbe) {
  return {
    adapter: gpu.adapterInfo,
    features: gpu.features,
    subgroupMatrixConfigs: gpu.subgroupMatrixConfigs,
    i8TensorCores: tensorCores && { chosen: tensorCores.chosen && i8TcLabel(tensorCores.chosen), tried: tensorCores.tried, shapeLayouts: tensorCores.shapeLayouts },
    dawnFeatures: [...gpu.device.features].sort(),
    limits: {
      maxStorageBufferBindingSize: gpu.limits.maxStorageBufferBindingSize,
      maxComputeWorkgroupStorageSize: gpu.limits.maxComputeWorkgroupStorageSize,
      maxComputeInvocationsPerWorkgroup: gpu.limits.maxComputeInvocationsPerWorkgroup,
    },
  };
}

// ---------------------------------------------------------------------------------------------
// Baselines: rows measured elsewhere (bench/torch_baseline.py, or another bench run's --json),
// lined up with ours by key.

export interface Baseline {
  source: string;
  rows: { key: string; name?: string; value: number; unit?: string }[];
}

/**
 * Checks a parsed baseline file: {"source"?, "rows": [{"key", "value", "name"?, "unit"?}]}. Rows
 * without a key (a bench run's rows that no baseline applies to) are dropped; anything else
 * malformed throws, saying what was expected.
 */
export function parseBaseline(raw: unknown, fallbackSource: string): Baseline {
  const file = raw as { source?: unknown; rows?: unknown } | null;
  const rows = file && typeof file === 'object' && Array.isArray(file.rows) ? (file.rows as unknown[]) : null;
  const valid = (r: unknown): r is { key?: unknown; value: number } =>
    !!r && typeof r === 'object' && typeof (r as { value?: unknown }).value === 'number' &&
    ['string', 'undefined'].includes(typeof (r as { key?: unknown }).key);
  if (!rows || !rows.every(valid)) throw new Error('expected {"source", "rows": [{"key", "value", ...}]} (bench/torch_baseline.py output)');
  return { source: String(file!.source ?? fallbackSource), rows: rows.filter((r): r is Baseline['rows'][number] => typeof r.key === 'string') };
}

/** A figure for a table: whole from 100, two decimals from 1, three significant digits below. */
export function formatFigure(x: number): string {
  if (!Number.isFinite(x)) return String(x);
  const a = Math.abs(x);
  return a >= 100 ? x.toFixed(0) : a >= 1 ? x.toFixed(2) : x.toPrecision(3);
}

/** Sets `baseline` and `ratio` on every row whose key the baseline has with a positive value; returns how many matched. */
export function mergeBaseline(rows: BenchRow[], b: Baseline): number {
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
