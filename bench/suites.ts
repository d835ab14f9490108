/**
 * The suites of `npm run bench`: each measures on a Runtime and returns rows in one shape
 * (BenchRow), so the CLI can print one table, write one JSON file and line rows up with a baseline
 * (bench/torch_baseline.py) by `key`. Figures are GPU pass times (timestamp queries) where
 * available, else wall clock; `method` says which. Never assert on them.
 * Shape letters: M, N, K of C[M,N] = op(A)[M,K]·op(B)[K,N]; for a linear layer of a model with
 * input width Cin, output width Cout and M = B·T tokens: forward Y = X·Wᵀ is (M, Cout, Cin, NT),
 * dX = dY·W is (M, Cin, Cout, NN), dW = dYᵀ·X is (Cout, Cin, M, TN).
 */
import { allReduceMean } from '../src/dist/allreduce';
import { PeerGroup } from '../src/dist/group';
import { LoopbackHub } from '../src/dist/loopback';
import type { Runtime } from '../src/engine/gpu/runtime';
import { benchQuantize } from '../src/engine/kernels/quantize';
import type { MatmulShape } from '../src/engine/kernels/matmul';
import type { ModelConfig } from '../src/engine/model/config';
import type { QuantFormat } from '../src/engine/quant/formats';
import { Rng } from '../src/engine/util/rng';
import { benchGemm } from './gemm';
import { benchQgemm, benchTaco, type GemmShape } from './quant';

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

export async function runGemm(rt: Runtime, shapes: MatmulShape[], o: SuiteOptions & { variants?: string[] }): Promise<BenchRow[]> {
  const raw = await benchGemm(rt, shapes, { variants: o.variants, warmup: o.warmup, reps: o.reps });
  const rows = raw.map((r): BenchRow => ({
    suite: 'gemm',
    name: `${r.M}x${r.N}x${r.K} ${tr(r.transA)}${tr(r.transB)} ${r.variant}${r.best ? ' (best)' : ''}${r.heuristic ? ' (heuristic)' : ''}`,
    key: r.best ? gemmKey(r) : undefined,
    unit: 'GFLOP/s', value: r.gflops, ms: r.ms, method: r.method, show: r.best || r.heuristic,
    detail: { M: r.M, N: r.N, K: r.K, transA: r.transA, transB: r.transB, variant: r.variant, best: r.best, heuristic: r.heuristic },
  }));
  rows.forEach((r) => o.onRow?.(r));
  return rows;
}

/** benchQgemm needs K and N multiples of 8 (packed 4/8-bit words); other shapes are skipped. */
export function qgemmFits(s: GemmShape): boolean {
  return s.K % 8 === 0 && s.N % 8 === 0 && (s.M * s.N) % 4 === 0;
}

export async function runQgemm(rt: Runtime, shapes: GemmShape[], o: SuiteOptions): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  for (const s of shapes.filter(qgemmFits)) {
    const [r] = await benchQgemm(rt, [s], { warmup: o.warmup, reps: o.reps });
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
    // The measure: fp32 bytes processed per second (input of compress, output of decompress).
    push({ suite: 'codec', name: `taco compress fp32 in n=${n} G=${G}`, unit: 'GB/s', value: t.compressFp32GBs, ms: t.compressMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `taco decompress fp32 out n=${n} G=${G}`, unit: 'GB/s', value: t.decompressFp32GBs, ms: t.decompressMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `taco round trip fp32 n=${n} G=${G}`, unit: 'GB/s', value: t.roundTripFp32GBs, ms: t.roundTripMs, method: t.method, show: true, detail: d });
    push({ suite: 'codec', name: `fp8-e4m3 quantize (taco's in-run baseline) n=${n} G=${G}`, unit: 'GB/s', value: t.baselineFp8GBs, ms: t.baselineFp8Ms, method: t.method, show: true, detail: d });
    for (const format of ['fp8-e4m3', 'int4', 'int8'] as QuantFormat[]) {
      const gbs = await benchQuantize(rt, n, { format, granularity: { kind: 'group', size: G }, reps: o.reps });
      push({ suite: 'codec', name: `quantize ${format} n=${n} G=${G}`, unit: 'GB/s', value: gbs, show: true, detail: { n, G, format } });
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
