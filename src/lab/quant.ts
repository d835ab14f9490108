/**
 * Benchmarks of the TACO kernels and the quantized GEMMs, each against a baseline timed in the same
 * run: TACO vs the plain per-group FP8 quantizer (src/engine/kernels/quantize/quantize.ts), the quantized
 * GEMMs vs the fp32 matmul (src/engine/kernels/matmul/matmul.ts). No CLI: call from a script or the bench
 * entry point with a Runtime. Figures are GPU pass times (timestamp queries) where available,
 * otherwise wall clock; never assert on them.
 */
import type { Dispatch, Runtime } from '../engine/gpu/runtime';
import { median, type SteadyWarmup, timeDispatches, warmUntilSteady } from '../engine/gpu/timer';
import { matmul } from '../engine/kernels/matmul/matmul';
import { qgemmI8, qgemmQuantOut, qgemmWeightOnly, quantizeRowsI8 } from '../engine/kernels/qgemm/qgemm';
import { i8TensorCoreSpec } from '../engine/kernels/qgemm/tc';
import { buildQuantize, type QuantizePath } from '../engine/kernels/quantize/quantize';
import { tacoCompress, tacoDecompress, type TacoOptions } from '../engine/kernels/taco/taco';
import { BITS, type QuantFormat } from '../engine/quant/formats';
import { type Granularity, payloadBytes } from '../engine/quant/quantizer';
import { tacoCompressRef, tacoLayout, tacoPayload, tacoPayloadBytes } from '../engine/quant/taco';
import { Rng } from '../engine/util/rng';

export interface BenchOptions {
  warmup?: number;
  reps?: number;
  /** Dispatches per timed pass (amortises pass overhead on small problems). */
  inner?: number;
  /** Warm up until steady for at least this long (warmUntilSteady) before timing. */
  warmupMs?: number;
}

/**
 * Kernels timed in interleaved rounds (the probes' method): every round warms each kernel until
 * steady (200 ms to warmMaxMs) and times it with msPer and its own options, so no kernel is timed
 * on a GPU that cooled down while others compiled. Returns each kernel's ms per round, by name.
 */
export async function timeInterleaved(rt: Runtime, kernels: { name: string; d: Dispatch; bench?: BenchOptions }[], rounds: number,
  warmMaxMs: number): Promise<Map<string, number[]>> {
  const samples = new Map<string, number[]>(kernels.map((k) => [k.name, []]));
  for (let r = 0; r < rounds; r++) {
    for (const k of kernels) {
      await warmUntilSteady(rt, [k.d], 200, warmMaxMs);
      samples.get(k.name)!.push((await msPer(rt, [k.d], k.bench ?? {})).ms);
    }
  }
  return samples;
}

/** Median ms of one run of `ds`, timed `inner` times back to back per pass (small problems amortise the pass). */
export async function msPer(rt: Runtime, ds: Dispatch[], o: BenchOptions): Promise<{ ms: number; method: string; samplesMs: number[] }> {
  const inner = Math.max(1, o.inner ?? 10);
  const list: Dispatch[] = [];
  for (let i = 0; i < inner; i++) list.push(...ds);
  const r = await timeDispatches(rt, list, { warmup: o.warmup ?? 2, reps: o.reps ?? 5, warmupMs: o.warmupMs });
  return { ms: r.medianMs / inner, method: r.method, samplesMs: r.samplesMs.map((t) => t / inner) };
}

export interface TacoTiming {
  compressMs: number;
  decompressMs: number;
  /** Compress then decompress in one pass (the all-reduce's pair). */
  roundTripMs: number;
}

/**
 * How the first `groups` groups of a payload differ from tacoCompressRef's: differing code bytes,
 * s words and a words, and the first group with any difference. Tells a code-rounding difference
 * (a few codes, scales equal), a scale-rounding one (s or a, with most of that group's codes) and a
 * layout one (many codes of a group, the same ones in another order: `permuted`) apart.
 */
export interface TacoPayloadDiff {
  groups: number;
  codes: number;
  s: number;
  a: number;
  first?: {
    group: number;
    /** Differing codes in that group, and whether they are the reference's in another order. */
    codesInGroup: number;
    permuted: boolean;
    /** The first differing code (its index in the group), and s and a where they differ: bits, reference then variant. */
    code?: { index: number; ref: number; got: number };
    s?: { ref: number; got: number };
    a?: { ref: number; got: number };
  };
}

/** One kernel variant of the sweep (TACO_BENCH_SWEEP=1): encoder, words per invocation, workgroup size… */
export interface TacoVariantBench extends TacoTiming {
  variant: string;
  /** Its payload (codes and scales) is byte for byte the default kernel's. */
  samePayload: boolean;
  /** fp32 output words of its decompression that differ from the default's (first groups, as samePayload). */
  outputDiffWords: number;
  /** Its payload against tacoCompressRef on the first groups (≤ 2^20 elements). */
  refDiff: TacoPayloadDiff;
}

export interface TacoBench extends TacoTiming {
  n: number;
  G: number;
  payloadBytes: number;
  /** Compulsory traffic: 4n bytes in + payload out (compress), payload in + 4n out (decompress). */
  compressGBs: number;
  decompressGBs: number;
  /** fp32 bytes per second: 4n / time — compress's input, decompress's output, the pair's input. */
  compressFp32GBs: number;
  decompressFp32GBs: number;
  roundTripFp32GBs: number;
  /** The issue's figure: 4n / (compress + decompress), each timed alone. */
  pairFp32GBs: number;
  /**
   * The same kernels timed BACK_TO_BACK dispatches per pass (each waiting for the one before: they
   * rewrite the same buffers), per dispatch: the kernels' own time without the pass's timestamps
   * and start-up, which one dispatch per pass includes.
   */
  backToBack: TacoTiming & { dispatchesPerPass: number; pairFp32GBs: number };
  /** The warm-up before the first timing (warmUntilSteady). */
  warmup: SteadyWarmup;
  /** Sweep only: the default kernel's payload against tacoCompressRef on the first groups (≤ 2^20 elements). */
  refCheck?: TacoPayloadDiff;
  /** Baseline: plain per-group FP8 E4M3 absmax quantization of the same chunk (4n in + n + 4n/G out). */
  baselineFp8Ms: number;
  baselineFp8GBs: number;
  method: string;
  variants?: TacoVariantBench[];
}

/**
 * Variants timed when TACO_BENCH_SWEEP is set; the first is the default. `opts` apply to both
 * kernels, `decompress` replaces them for decompress only (so each kernel's layout can be tuned
 * on its own: the payload does not depend on it). 'encode=inline' is the per-element exact encoder
 * (same codes). `pieces` > 1 runs the default kernel as that many dispatches over consecutive slices
 * of the same buffers: equal throughput says the kernel scales with n, a gap says the size of one
 * dispatch matters.
 */
const TACO_SWEEP: { variant: string; opts: TacoOptions; decompress?: TacoOptions; pieces?: number }[] = [
  { variant: 'default', opts: {} },
  { variant: 'encode=inline', opts: { encode: 'inline' } },
  // Compress layouts (decompress stays the default).
  ...([[4, 64], [8, 64], [8, 128], [16, 32], [16, 128]] as const).map(([words, wg]) => ({
    variant: `compress words=${words} wg=${wg}`, opts: { words, workgroupSize: wg }, decompress: {},
  })),
  // Decompress layouts and decoders (compress stays the default).
  ...([[4, 64], [16, 64], [8, 128]] as const).map(([words, wg]) => ({
    variant: `decompress words=${words} wg=${wg}`, opts: {}, decompress: { words, workgroupSize: wg },
  })),
  { variant: 'decode=alu', opts: {}, decompress: { decode: 'alu' } },
  { variant: 'default, 1056 workgroups (tile loop)', opts: { maxWorkgroups: 1056 } },
  { variant: 'default, 4 dispatches of n/4', opts: {}, pieces: 4 },
];

function sweepRequested(): boolean {
  return typeof process !== 'undefined' && !!process.env?.TACO_BENCH_SWEEP;
}

/** Timing rounds of the default kernel: compress, decompress, round trip, interleaved; medians over all. */
const TACO_ROUNDS = 3;
const BACK_TO_BACK = 10;
/** Rounds over all sweep variants (each warmed until steady before each of its timings); medians over rounds. */
const TACO_SWEEP_ROUNDS = 3;


/**
 * The first k groups of a payload — codes, s, a — with k the same for every variant (at most a
 * quarter of the groups, so that it lies in the first of 4 pieces too, and at most 2^17 groups).
 */
async function payloadHead(rt: Runtime, payload: GPUBuffer, n: number, G: number, k: number): Promise<Uint8Array> {
  const L = tacoLayout(n, G);
  const parts = [
    new Uint8Array(await rt.read(payload, 0, k * G)),
    new Uint8Array(await rt.read(payload, 4 * L.sOff, 4 * k)),
    new Uint8Array(await rt.read(payload, 4 * L.aOff, 4 * k)),
  ];
  const out = new Uint8Array(k * (G + 8));
  out.set(parts[0]);
  out.set(parts[1], k * G);
  out.set(parts[2], k * G + 4 * k);
  return out;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((v, i) => v === b[i]);
}

/** `got` against `ref`, both heads of k groups in payloadHead's (= tacoPayload's) layout. */
export function diffPayloadHead(ref: Uint8Array, got: Uint8Array, k: number, G: number): TacoPayloadDiff {
  if (ref.length !== k * (G + 8) || got.length !== ref.length) throw new Error(`diffPayloadHead: heads of ${ref.length} and ${got.length} bytes, expected ${k * (G + 8)}`);
  const word = (b: Uint8Array, i: number) => new DataView(b.buffer, b.byteOffset).getUint32(i, true);
  const out: TacoPayloadDiff = { groups: k, codes: 0, s: 0, a: 0 };
  for (let g = 0; g < k; g++) {
    let codesInGroup = 0;
    let code: { index: number; ref: number; got: number } | undefined;
    for (let i = g * G; i < (g + 1) * G; i++) {
      if (ref[i] === got[i]) continue;
      codesInGroup++;
      code ??= { index: i - g * G, ref: ref[i], got: got[i] };
    }
    const scale = (off: number) => {
      const r = word(ref, off + 4 * g);
      const v = word(got, off + 4 * g);
      return r === v ? undefined : { ref: r, got: v };
    };
    const s = scale(k * G);
    const a = scale(k * G + 4 * k);
    out.codes += codesInGroup;
    out.s += s ? 1 : 0;
    out.a += a ? 1 : 0;
    if (!out.first && (codesInGroup || s || a)) {
      const sorted = (b: Uint8Array) => Array.from(b.subarray(g * G, (g + 1) * G)).sort((x, y) => x - y);
      const refSorted = sorted(ref);
      const gotSorted = sorted(got);
      const permuted = codesInGroup > 0 && refSorted.every((c, i) => c === gotSorted[i]);
      out.first = { group: g, codesInGroup, permuted, code, s, a };
    }
  }
  return out;
}

function formatPayloadDiff(d: TacoPayloadDiff, G: number): string {
  const hex = (v: number, digits: number) => `0x${v.toString(16).padStart(digits, '0')}`;
  let line = `vs ref (${d.groups} groups): codes ${d.codes}, s ${d.s}, a ${d.a}`;
  const f = d.first;
  if (!f) return line;
  line += `; first group ${f.group}: ${f.codesInGroup} of ${G} codes${f.permuted ? ' (the same codes permuted)' : ''}`;
  if (f.code) line += `, code[${f.code.index}] ref ${hex(f.code.ref, 2)} got ${hex(f.code.got, 2)}`;
  if (f.s) line += `, s ref ${hex(f.s.ref, 8)} got ${hex(f.s.got, 8)}`;
  if (f.a) line += `, a ref ${hex(f.a.ref, 8)} got ${hex(f.a.got, 8)}`;
  return line;
}

/**
 * TACO compress, decompress and the pair at n elements, with the plain FP8 quantizer beside them.
 * The default kernels are warmed up until steady (warmUntilSteady) on the buffers they are timed on,
 * then timed in TACO_ROUNDS interleaved rounds: every figure is a median of steady-state passes.
 * With the environment variable TACO_BENCH_SWEEP set, also every variant of TACO_SWEEP, printed to
 * stderr as a table with whether its payload is byte for byte the default's and how it (and the
 * default's) differs from the TS reference on the first groups (diffPayloadHead; the bench CLI
 * passes no options through, and the sweep is for tuning only).
 */
export async function benchTaco(rt: Runtime, n: number, G: number, opts: BenchOptions = {}): Promise<TacoBench> {
  const host = new Rng(1).normalArray(n, 0.02);
  const x = rt.upload('workspace', 'bench.taco.x', host);
  const bytes = tacoPayloadBytes(n, G);
  const payload = rt.createBuffer('workspace', 'bench.taco.payload', bytes);
  const y = rt.createBuffer('workspace', 'bench.taco.y', n * 4);
  const q = buildQuantize(rt, { format: 'fp8-e4m3', granularity: { kind: 'group', size: G }, n }, x);
  let method = '';
  const build = (k: TacoOptions, pieces = 1, kd: TacoOptions = k): { c: Dispatch[]; d: Dispatch[] } => {
    const m = n / pieces;
    const pb = tacoPayloadBytes(m, G);
    const slice = (buffer: GPUBuffer, i: number, size: number) => (pieces === 1 ? buffer : { buffer, offset: i * size, size });
    const c: Dispatch[] = [];
    const d: Dispatch[] = [];
    for (let i = 0; i < pieces; i++) {
      c.push(tacoCompress(rt, { label: 'bench.taco.compress', x: slice(x, i, 4 * m), payload: slice(payload, i, pb), n: m, G, ...k }));
      d.push(tacoDecompress(rt, { label: 'bench.taco.decompress', payload: slice(payload, i, pb), y: slice(y, i, 4 * m), n: m, G, ...kd }));
    }
    return { c, d };
  };
  const time = async ({ c, d }: { c: Dispatch[]; d: Dispatch[] }, rounds: number, inner = opts.inner): Promise<TacoTiming> => {
    const kinds: [keyof TacoTiming, Dispatch[]][] = [['compressMs', c], ['decompressMs', d], ['roundTripMs', [...c, ...d]]];
    const samples: Record<keyof TacoTiming, number[]> = { compressMs: [], decompressMs: [], roundTripMs: [] };
    for (let r = 0; r < rounds; r++) {
      for (const [key, ds] of kinds) {
        const t = await msPer(rt, ds, { ...opts, inner });
        method = t.method;
        samples[key].push(...t.samplesMs);
      }
    }
    return { compressMs: median(samples.compressMs), decompressMs: median(samples.decompressMs), roundTripMs: median(samples.roundTripMs) };
  };
  try {
    const def = build({});
    const warmup = await warmUntilSteady(rt, [...def.c, ...def.d]);
    const t = await time(def, TACO_ROUNDS);
    const b2b = await time(def, TACO_ROUNDS, BACK_TO_BACK);
    await warmUntilSteady(rt, q.dispatches);
    const b = await msPer(rt, q.dispatches, opts);
    const gbs = (by: number, ms: number) => by / (ms * 1e6);
    const out: TacoBench = {
      n, G, payloadBytes: bytes, ...t,
      compressGBs: gbs(4 * n + bytes, t.compressMs),
      decompressGBs: gbs(4 * n + bytes, t.decompressMs),
      compressFp32GBs: gbs(4 * n, t.compressMs),
      decompressFp32GBs: gbs(4 * n, t.decompressMs),
      roundTripFp32GBs: gbs(4 * n, t.roundTripMs),
      pairFp32GBs: gbs(4 * n, t.compressMs + t.decompressMs),
      backToBack: { ...b2b, dispatchesPerPass: BACK_TO_BACK, pairFp32GBs: gbs(4 * n, b2b.compressMs + b2b.decompressMs) },
      warmup,
      baselineFp8Ms: b.ms, baselineFp8GBs: gbs(4 * n + n + 4 * Math.ceil(n / G), b.ms),
      method,
    };
    const f = (v: number) => v.toPrecision(4);
    console.error(`TACO n=${n} G=${G} (${method}), fp32 GB/s = 4n / time: compress ${f(out.compressFp32GBs)}, decompress ${f(out.decompressFp32GBs)}, ` +
      `4n/(compress + decompress) ${f(out.pairFp32GBs)}, round trip in one pass ${f(out.roundTripFp32GBs)}; ` +
      `${BACK_TO_BACK} dispatches per pass: compress ${f(gbs(4 * n, b2b.compressMs))}, decompress ${f(gbs(4 * n, b2b.decompressMs))}, ` +
      `4n/(compress + decompress) ${f(out.backToBack.pairFp32GBs)}; ` +
      `warm-up ${warmup.runs} round trips in ${warmup.ms.toFixed(0)} ms, ${warmup.batchMsPerRun[0].toFixed(4)} → ` +
      `${warmup.batchMsPerRun[warmup.batchMsPerRun.length - 1].toFixed(4)} ms each (wall clock, per batch: ` +
      `${warmup.batchMsPerRun.map((t) => t.toPrecision(3)).join(' ')})`);
    if (sweepRequested()) {
      const groups = Math.ceil(n / G);
      const head = Math.min(Math.max(1, Math.floor(groups / 4)), 1 << 17);
      // The default's payload is in place: its round trips ran last on this buffer.
      const defaultHead = await payloadHead(rt, payload, n, G, head);
      // And its output (the variants' pieces are consecutive slices of y, so the head is at 0 for all).
      const outputHead = async () => rt.readU32(y, 0, Math.min(n, head * G));
      const defaultOutput = await outputHead();
      // The reference on the first refGroups groups of that head (≤ 2^20 elements: the TS reference is slow).
      const refGroups = Math.min(head, Math.floor((1 << 20) / G));
      const m = Math.min(n, refGroups * G);
      const ref = tacoCompressRef(host.subarray(0, m), G);
      const refHead = tacoPayload(ref);
      const defaultRefHead = await payloadHead(rt, payload, n, G, refGroups);
      out.refCheck = diffPayloadHead(refHead, defaultRefHead, refGroups, G);
      out.variants = [];
      // Slices hold whole groups and start at 256-byte offsets (storage binding alignment).
      const sliceable = (p: number) => p === 1 || (n % (p * G) === 0 && ((4 * n) / p) % 256 === 0 && tacoPayloadBytes(n / p, G) % 256 === 0);
      // Timing first, interleaved: every round times each variant after warming it until steady, so
      // no variant is timed on a GPU that cooled down while other pipelines compiled (timed one
      // after the other in a single pass, identical kernels came out far apart).
      const fits = (o?: TacoOptions) => (o?.words ?? 0) <= G / 4;
      const runs = TACO_SWEEP.filter((v) => sliceable(v.pieces ?? 1) && fits(v.opts) && fits(v.decompress))
        .map((v) => ({ v, built: build(v.opts, v.pieces ?? 1, v.decompress ?? v.opts), samples: [] as TacoTiming[] }));
      for (const r of runs) rt.run([...r.built.c, ...r.built.d]); // compile every pipeline up front
      await rt.sync();
      for (let round = 0; round < TACO_SWEEP_ROUNDS; round++) {
        for (const r of runs) {
          await warmUntilSteady(rt, [...r.built.c, ...r.built.d], 200, 1500);
          r.samples.push(await time(r.built, 1));
        }
      }
      for (const { v, built, samples } of runs) {
        const pieces = v.pieces ?? 1;
        rt.run([...built.c, ...built.d]); // this variant's payload and output in place
        const same = sameBytes(await payloadHead(rt, payload, n / pieces, G, head), defaultHead);
        const refDiff = diffPayloadHead(refHead, await payloadHead(rt, payload, n / pieces, G, refGroups), refGroups, G);
        const output = await outputHead();
        const outputDiffWords = output.reduce((k, w, i) => k + (w === defaultOutput[i] ? 0 : 1), 0);
        const med = (key: keyof TacoTiming) => median(samples.map((t) => t[key]));
        const timing = { compressMs: med('compressMs'), decompressMs: med('decompressMs'), roundTripMs: med('roundTripMs') };
        out.variants.push({ variant: v.variant, ...timing, samePayload: same, outputDiffWords, refDiff });
      }
      console.error(`TACO n=${n} G=${G}: default ${formatPayloadDiff(out.refCheck, G)}. Variants, fp32 GB/s = 4n / time; ` +
        `payload and fp32 output against the default on the first ${head} groups, payload against tacoCompressRef on the first ${refGroups}:`);
      for (const v of out.variants) {
        console.error(`  ${v.variant.padEnd(40)} compress ${f(gbs(4 * n, v.compressMs)).padStart(6)} (${v.compressMs.toFixed(4)} ms)` +
          `  decompress ${f(gbs(4 * n, v.decompressMs)).padStart(6)} (${v.decompressMs.toFixed(4)} ms)` +
          `  round trip ${f(gbs(4 * n, v.roundTripMs)).padStart(6)} (${v.roundTripMs.toFixed(4)} ms)` +
          `  4n/(c+d) ${f(gbs(4 * n, v.compressMs + v.decompressMs)).padStart(6)}  payload ${v.samePayload ? '== default' : 'DIFFERS'}` +
          `, output ${v.outputDiffWords ? `DIFFERS in ${v.outputDiffWords} words` : '== default'}` +
          `; ${formatPayloadDiff(v.refDiff, G)}`);
      }
    }
    return out;
  } finally {
    q.destroy();
    for (const buf of [x, payload, y]) rt.mem.free(buf);
  }
}

export interface GemmShape {
  M: number;
  N: number;
  K: number;
}

export interface QgemmBench extends GemmShape {
  /** GOP/s (2·M·N·K per GEMM) of each kernel; `fp32` is the matmul baseline. */
  gops: Record<string, number>;
  ms: Record<string, number>;
  method: string;
}

/**
 * For each shape: fp32 matmul (baseline), INT8×INT8 (GEMM alone, and with the X quantization),
 * weight-only INT4 / INT8 / FP8 (G = 128, or 32 when K is smaller), and the INT4 / INT8 quantized
 * epilogue (G = 128 along N, or 32). K must be a multiple of 8 and N of 8.
 */
export async function benchQgemm(rt: Runtime, shapes: GemmShape[], opts: BenchOptions = {}): Promise<QgemmBench[]> {
  const out: QgemmBench[] = [];
  for (const { M, N, K } of shapes) {
    const rng = new Rng(M + N + K);
    const bufs: GPUBuffer[] = [];
    const up = (label: string, data: Float32Array | Uint32Array) => {
      const b = rt.upload('workspace', `bench.qgemm.${label}`, data);
      bufs.push(b);
      return b;
    };
    const x = up('x', rng.normalArray(M * K));
    const w = up('w', rng.normalArray(N * K, 0.05));
    const c = up('c', new Float32Array(M * N));
    const words = (n: number, fmt: QuantFormat) => new Uint32Array(Math.ceil((n * BITS[fmt]) / 32)).map(() => rng.nextU32());
    const G = K % 128 === 0 ? 128 : 32;
    const GQ = N % 128 === 0 ? 128 : 32;
    const ws = up('ws', new Float32Array(N * Math.ceil(K / G)).fill(0.01));
    const sw = up('sw', new Float32Array(N).fill(0.01));
    const wq8 = up('wq8', words(N * K, 'int8'));
    const wq4 = up('wq4', words(N * K, 'int4'));
    const wqf8 = up('wqf8', words(N * K, 'int8').map((v) => v & 0xf7f7f7f7)); // no NaN codes
    const cq = up('cq', new Uint32Array((M * N) / 4));
    const cs = up('cs', new Float32Array(M * Math.ceil(N / GQ)));
    const qx = quantizeRowsI8(rt, { x, M, K });
    const i8 = qgemmI8(rt, { label: 'bench.qgemm.i8', xq: qx.words, sx: qx.scales, wq: wq8, sw, c, M, N, K });
    const kernels: Record<string, Dispatch[]> = {
      fp32: [matmul(rt, { label: 'bench.qgemm.fp32', a: x, b: w, c, M, N, K, transB: true })],
      'int8xint8': [i8],
      'int8xint8+quantX': [...qx.dispatches, i8],
      // Where tensor cores are on, int8xint8 runs on them; the dot4I8Packed kernel is timed beside it.
      ...(i8TensorCoreSpec(rt) && K % 16 === 0
        ? { 'int8xint8-dot4': [qgemmI8(rt, { label: 'bench.qgemm.i8dot4', xq: qx.words, sx: qx.scales, wq: wq8, sw, c, M, N, K, tiles: {} })] }
        : {}),
      'w-int4': [qgemmWeightOnly(rt, { label: 'bench.qgemm.w4', x, wq: wq4, ws, c, format: 'int4', G, M, N, K })],
      'w-int8': [qgemmWeightOnly(rt, { label: 'bench.qgemm.w8', x, wq: wq8, ws, c, format: 'int8', G, M, N, K })],
      'w-fp8': [qgemmWeightOnly(rt, { label: 'bench.qgemm.wf8', x, wq: wqf8, ws, c, format: 'fp8-e4m3', G, M, N, K })],
      'out-int8': [qgemmQuantOut(rt, { label: 'bench.qgemm.o8', x, w, cq, cs, bits: 8, G: GQ, M, N, K })],
      'out-int4': [qgemmQuantOut(rt, { label: 'bench.qgemm.o4', x, w, cq, cs, bits: 4, G: GQ, M, N, K })],
    };
    const r: QgemmBench = { M, N, K, gops: {}, ms: {}, method: '' };
    try {
      for (const [name, ds] of Object.entries(kernels)) {
        const t = await msPer(rt, ds, opts);
        r.ms[name] = t.ms;
        r.gops[name] = (2 * M * N * K) / (t.ms * 1e6);
        r.method = t.method;
      }
    } finally {
      qx.destroy();
      for (const b of bufs) rt.mem.free(b);
    }
    out.push(r);
  }
  return out;
}

/**
 * Quantize throughput in GB/s, counting the compulsory traffic once: N·4 bytes read plus the payload
 * (codes + scales) written. (The fused kernel moves exactly that; the passes read x twice — absmax,
 * then encode — so their DRAM traffic is about 2N·4 + payload.) GPU pass time from timestamp
 * queries where available (median of `reps`), else wall clock (see ../gpu/timer.ts). `path` picks
 * the kernels (default as buildQuantize). A benchmark figure, never a test assertion.
 */
export async function benchQuantize(
  rt: Runtime,
  n: number,
  opts: { format?: QuantFormat; granularity?: Granularity; reps?: number; path?: QuantizePath; warmupMs?: number } = {},
): Promise<number> {
  return (await benchQuantizeTimed(rt, n, opts)).GBs;
}

/** benchQuantize's figure with the median time it came from and the timer that measured it (the bench table shows both). */
export async function benchQuantizeTimed(
  rt: Runtime,
  n: number,
  opts: { format?: QuantFormat; granularity?: Granularity; reps?: number; path?: QuantizePath; warmupMs?: number } = {},
): Promise<{ GBs: number; ms: number; method: 'timestamp' | 'wallclock' }> {
  const format = opts.format ?? 'int8';
  const granularity = opts.granularity ?? { kind: 'group', size: 128 };
  const x = new Rng(1).normalArray(n);
  const xb = rt.upload('workspace', 'bench.quantize.x', x);
  const k = buildQuantize(rt, { format, granularity, n }, xb, { path: opts.path });
  try {
    const t = await timeDispatches(rt, k.dispatches, { warmup: 2, reps: opts.reps ?? 10, warmupMs: opts.warmupMs });
    return { GBs: (4 * n + payloadBytes(format, n, k.numScales)) / t.medianMs / 1e6, ms: t.medianMs, method: t.method };
  } finally {
    k.destroy();
    rt.mem.free(xb);
  }
}
