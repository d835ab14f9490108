/**
 * One GEMM tuning run on this machine's GPU, sized for one device call (≤ 3 minutes on an H200):
 *   1. the adapter and its subgroup-matrix configs;
 *   2. every fp32 GEMM candidate that fits the device (variants × split-K choices) checked against
 *      the float64 reference on the device, on partial tiles, whole tiles (FULL_TILES) and split-K;
 *   3. GPU time (timestamp queries, warm-up, median) of every verified candidate on 4096³ NN/NT,
 *      the small and base models' forward/dX/dW shapes, 2048³, 4096³ TN, and the fastest few on 8192³;
 *      the table of per-shape picks is printed and written (--json) at this point;
 *   4. the fastest candidates again on a device with Dawn's robustness off (what bounds clamping costs);
 *   5. the subgroup-matrix probe (which WGSL spelling runs correctly) and GEMM, where a config runs.
 * Steps 4-5 come last because they are the likeliest to fail; the JSON is rewritten after each.
 * A time budget stops starting new timings cleanly before a device limit would.
 *
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/gemm-tune.ts dist-node/gemm-tune.mjs
 *   node dist-node/gemm-tune.mjs [--json out.json] [--quick] [--cpu] [--budget-s 170] [--variants a,b]
 *
 * M, N, K: C[M,N] = op(A)[M,K]·op(B)[K,N]; TFLOP/s counts 2·M·N·K.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { buildMatmul, matmulFlops } from '../src/engine/kernels/matmul/matmul';
import { chooseMatmulVariant } from '../src/engine/kernels/matmul/choice';
import { type MatmulShape, matmulWorkspaceBytes, MAX_STREAM_K, parseChoice, shapeKey } from '../src/engine/kernels/matmul/plan';
import { availableVariants, getVariant } from '../src/engine/kernels/matmul/variants';
import { fillPattern, gemmOperands, timeMatmul } from '../src/lab/gemm';
import { matmulRef } from '../src/engine/kernels/matmul/matmul.ref';
import {
  blockM, blockN, buildSgmat, checkSgmat, configLabel, isEightBit, subgroupMatrixConfigs, subgroupSize,
  type SgmatKernel, type SgmatType,
} from '../src/engine/kernels/qgemm/sgmat';
import { defaultTrainOptions } from '../src/engine/train/options';
import { Rng } from '../src/engine/util/rng';
import type { PresetName } from '../src/engine/model/config';
import { fail, num, UsageError } from '../src/cli/common';
import { modelGemmShapes } from '../src/lab/suites';
import { autotuneCandidates } from './autotune';
import { probeSubgroupMatrix, type SgmatProbe } from './sgmat-probe';

/** Split-K workspace the tuning allows (the model would reserve as much to use the picks). */
const WORKSPACE_BYTES = 64 << 20;
const TOP_FOR_BIG = 6;

const HELP = `usage: node gemm-tune.mjs [options]
  --json FILE        write every measurement, the probe and the per-shape picks
  --quick            tiny shapes, two small variants: seconds on SwiftShader
  --cpu              force the SwiftShader CPU adapter
  --budget-s S       stop starting new timings after S seconds (default 170)
  --reps N --warmup N  timed repetitions (median) and untimed warm-up (default 9, 2)
  --warmup-ms MS     then run each candidate until its time per run is steady, at least MS ms
                     (default 50; 0 with --quick): a GPU left idle while a candidate's pipeline
                     compiled clocks down, and a short GEMM timed from cold runs several times slow
  --variants V,...   restrict the fp32 candidates to these variants (split-K choices follow)
  --models P,...     model presets whose GEMM shapes are timed (default small,base; none)
  --stream-k W,...   also time stream-K over W workgroups (about what the GPU holds at once: an
                     H200 holds 264 of the 128x128 8x16 tiles), each W, every variant`;

const tr = (s: MatmulShape) => `${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'}`;
const label = (s: MatmulShape) => `${s.M}x${s.N}x${s.K} ${tr(s)}`;
const tflops = (s: MatmulShape, ms: number) => matmulFlops(s) / (ms * 1e9);

interface Timing {
  shape: string;
  key: string;
  choice: string;
  ms: number;
  tflops: number;
  method: string;
  fullTiles: boolean;
}

interface Verification {
  choice: string;
  checks: { shape: string; maxAbsErr: number; tol: number; ok: boolean }[];
  ok: boolean;
  error?: string;
}

function args() {
  let parsed;
  try {
    parsed = parseArgs({
      options: {
        json: { type: 'string' }, quick: { type: 'boolean' }, cpu: { type: 'boolean' }, 'budget-s': { type: 'string' },
        reps: { type: 'string' }, warmup: { type: 'string' }, 'warmup-ms': { type: 'string' }, variants: { type: 'string' }, models: { type: 'string' },
        'stream-k': { type: 'string' }, help: { type: 'boolean', short: 'h' },
      },
      strict: true,
    });
  } catch (e) {
    throw new UsageError(`${(e as Error).message} (see --help)`);
  }
  const a = parsed.values;
  return {
    help: !!a.help,
    json: a.json,
    quick: !!a.quick,
    cpu: !!a.cpu,
    budgetS: num('budget-s', a['budget-s'], { min: 1 }) ?? 170,
    reps: num('reps', a.reps, { int: true, min: 1 }) ?? (a.quick ? 2 : 9),
    warmup: num('warmup', a.warmup, { int: true, min: 0 }) ?? (a.quick ? 1 : 2),
    warmupMs: num('warmup-ms', a['warmup-ms'], { min: 0 }) ?? (a.quick ? 0 : 50),
    variants: a.variants?.split(',').map((s) => s.trim()).filter(Boolean),
    models: (a.models ?? (a.quick ? 'micro' : 'small,base')).split(',').map((s) => s.trim()).filter((s) => s && s !== 'none'),
    streamK: (a['stream-k']?.split(',') ?? []).map((s) => {
      const W = num('stream-k', s.trim(), { int: true, min: 1 })!;
      if (W > MAX_STREAM_K) throw new UsageError(`--stream-k: at most ${MAX_STREAM_K} workgroups, got ${W}`);
      return W;
    }),
  };
}

/** The shapes to time, most important first (the budget may cut the tail). */
function tuneShapes(quick: boolean, models: string[]): { shapes: MatmulShape[]; big: MatmulShape[] } {
  const sq = (n: number, transA = false, transB = false): MatmulShape => ({ M: n, N: n, K: n, transA, transB });
  const model = models.flatMap((p) => {
    const o = defaultTrainOptions(p as PresetName, { model: { vocab_size: 65 } });
    return modelGemmShapes(o.model, o.batch, o.seq);
  });
  if (quick) return { shapes: [sq(64), sq(64, false, true), ...model.slice(0, 3)], big: [] };
  return { shapes: [sq(4096), sq(4096, false, true), ...model, sq(2048), sq(4096, true, false)], big: [sq(8192)] };
}

/**
 * Checks every candidate on the transposes of the timed shapes against matmulRef: partial tiles
 * (vec4 access with bounds checks), whole tiles (FULL_TILES), a split-K dW form and, when stream-K
 * is tuned, stream-K over 7 workgroups (whole tiles, then shared ones; the count only moves the cuts).
 */
async function verify(rt: Runtime, choices: string[], transposes: [boolean, boolean][], quick: boolean, streamK: boolean): Promise<Map<string, Verification>> {
  const rng = new Rng(7);
  const cases: { shape: MatmulShape; choiceOf: (variant: string) => string | null }[] = [];
  const [pM, pN, pK] = quick ? [36, 20, 24] : [260, 132, 72];
  const [fM, fK] = quick ? [64, 32] : [512, 64];
  for (const [transA, transB] of transposes) {
    cases.push({ shape: { M: pM, N: pN, K: pK, transA, transB }, choiceOf: (v) => v });
    cases.push({ shape: { M: fM, N: fM, K: fK, transA, transB }, choiceOf: (v) => v });
  }
  const splitShape: MatmulShape = quick ? { M: 32, N: 32, K: 256, transA: true } : { M: 256, N: 128, K: 2048, transA: true };
  cases.push({ shape: splitShape, choiceOf: (v) => `${v}_sk4` });
  if (streamK) {
    for (const [transA, transB] of transposes) {
      const shape = quick ? { M: 96, N: 64, K: 40, transA, transB } : { M: 512, N: 384, K: 520, transA, transB };
      cases.push({ shape, choiceOf: (v) => (getVariant(v).swizzle > 1 ? null : `${v}_st7`) });
    }
  }
  const out = new Map<string, Verification>();
  for (const c of cases) {
    const { M, N, K } = c.shape;
    const a = rng.uniformArray(M * K);
    const b = rng.uniformArray(K * N);
    const want = matmulRef(a, b, M, N, K, { transA: c.shape.transA, transB: c.shape.transB, alpha: 0.5 });
    const tol = 2e-6 * K + 1e-6;
    // Four split-K partials, or stream-K's 7 workgroups × 2 slots of the largest tile.
    const ops = gemmOperands(rt, c.shape, 'verify', Math.max(4 * M * N * 4, 2 * 7 * 256 * 256 * 4));
    rt.write(ops.a, a);
    rt.write(ops.b, b);
    try {
      for (const choice of choices) {
        const variant = parseChoice(choice).variant.name;
        if (choice !== variant) continue; // split choices are verified through their variant's split case
        const name = c.choiceOf(variant);
        if (!name) continue;
        const v = out.get(variant) ?? { choice: variant, checks: [], ok: true };
        out.set(variant, v);
        if (!v.ok) continue;
        try {
          const built = await rt.checked(name, () => buildMatmul(rt, { label: 'verify', ...c.shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: name, alpha: 0.5 }));
          rt.run(built.dispatches);
          const got = await rt.readF32(ops.c, 0, M * N);
          built.uniforms.forEach((u) => rt.mem.free(u));
          let err = 0;
          for (let i = 0; i < want.length; i++) err = Math.max(err, Math.abs(got[i] - want[i]) || (Number.isNaN(got[i]) ? Infinity : 0));
          const ok = err <= tol;
          v.checks.push({ shape: `${label(c.shape)}${name !== variant ? ` ${name}` : ''}${built.fullTiles ? ' full' : ''}`, maxAbsErr: err, tol, ok });
          v.ok &&= ok;
        } catch (e) {
          v.ok = false;
          v.error = (e as Error).message;
        }
      }
    } finally {
      ops.free();
    }
  }
  return out;
}

async function timeShape(rt: Runtime, shape: MatmulShape, choices: string[], o: { warmup: number; reps: number; warmupMs: number }): Promise<Timing[]> {
  const need = Math.max(0, ...choices.map((n) => matmulWorkspaceBytes(shape, n)));
  const ops = gemmOperands(rt, shape, 'tune', need);
  const rows: Timing[] = [];
  try {
    for (const choice of choices) {
      // One candidate failing (a pipeline this driver rejects) must not cost the rest of the run.
      try {
        const built = await rt.checked(choice, () => buildMatmul(rt, { label: 'tune', ...shape, a: ops.a, b: ops.b, c: ops.c, workspace: ops.workspace, variant: choice }));
        try {
          const t = await timeMatmul(rt, built.dispatches, shape, o);
          rows.push({ shape: label(shape), key: shapeKey(shape), choice, ms: t.ms, tflops: tflops(shape, t.ms), method: t.method, fullTiles: built.fullTiles });
        } finally {
          built.uniforms.forEach((u) => rt.mem.free(u));
        }
      } catch (e) {
        console.error(`  ${label(shape)} ${choice}: ${(e as Error).message}`);
      }
    }
  } finally {
    ops.free();
  }
  return rows;
}

function pct(x: number): string {
  return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2);
}

/** Timing operands in a config's component type: fp32 patterns, or random bytes for 8-bit types. */
function operand(t: SgmatType, n: number, seed: number): ArrayBufferView {
  if (t === 'f32') return fillPattern(n, seed);
  const bytes = new Uint8Array(isEightBit(t) ? n : 4 * n);
  const rng = new Rng(seed);
  for (let i = 0; i < bytes.length; i++) bytes[i] = rng.int(isEightBit(t) ? 256 : 16);
  return bytes;
}

/** The subgroup-matrix GEMM on 4096³ (or a small square with --quick) for every config the probe ran. */
async function timeSgmat(rt: Runtime, probe: SgmatProbe, quick: boolean, o: { warmup: number; reps: number }) {
  const rows: { config: string; kernel: string; shape: string; ok: boolean; maxAbsErr?: number; ms?: number; tops?: number; error?: string }[] = [];
  const sgSize = subgroupSize(rt);
  const n = quick ? 256 : 4096;
  for (const r of probe.results.filter((x) => x.ok && x.syntax)) {
    for (const [tilesM, tilesN, sgM, sgN] of [[2, 4, 2, 2], [4, 4, 2, 2], [2, 2, 2, 4], [4, 2, 4, 2]]) {
      for (const transB of [false, true]) {
        const k: SgmatKernel = { cfg: r.config, syntax: r.syntax!, unitDiv: r.unitDiv ?? 1, transB, tilesM, tilesN, sgM, sgN, sgSize };
        const name = `${tilesM}x${tilesN} tiles, ${sgM}x${sgN} subgroups (${blockM(k)}x${blockN(k)})${transB ? ' NT' : ' NN'}`;
        const check = await checkSgmat(rt, k, { M: blockM(k) * 2, N: blockN(k) * 2, K: r.config.K * 4 });
        const row: (typeof rows)[number] = { config: configLabel(r.config), kernel: name, shape: `${n}^3`, ok: check.ok, maxAbsErr: check.maxAbsErr, error: check.error };
        rows.push(row);
        if (!check.ok) continue;
        const a = rt.upload('workspace', 'sgmat.a', operand(r.config.componentType, n * n, 1));
        const b = rt.upload('workspace', 'sgmat.b', operand(r.config.componentType, n * n, 2));
        const c = rt.createBuffer('workspace', 'sgmat.c', n * n * 4);
        try {
          const built = buildSgmat(rt, k, { label: 'sgmat', M: n, N: n, K: n, a, b, c });
          const t = await timeMatmul(rt, [built.dispatch], { M: n, N: n, K: n }, o);
          rt.mem.free(built.uniform);
          row.ms = t.ms;
          row.tops = (2 * n ** 3) / (t.ms * 1e9);
        } catch (e) {
          row.error = (e as Error).message;
        } finally {
          [a, b, c].forEach((x) => rt.mem.free(x));
        }
        console.error(`  sgmat ${row.config} ${name}: ${row.tops ? `${pct(row.tops)} T(FL)OP/s` : row.error ?? 'failed'}`);
      }
    }
  }
  return rows;
}

interface Pick {
  key: string;
  shape: string;
  best: Timing;
  single: Timing;
  heuristic: string;
  heuristicTflops?: number;
}

/** Per shape: fastest overall (split-K or stream-K within WORKSPACE_BYTES), fastest in one pass (no workspace), and the heuristic's pick. */
function picksOf(rt: Runtime, timings: Timing[], shapes: MatmulShape[]): Pick[] {
  return [...new Set(timings.map((t) => t.key))].map((key) => {
    const rows = timings.filter((t) => t.key === key);
    const s = shapes.find((x) => shapeKey(x) === key)!;
    const fastest = (xs: Timing[]) => xs.reduce((x, y) => (y.ms < x.ms ? y : x));
    const onePass = rows.filter((r) => matmulWorkspaceBytes(s, r.choice) === 0);
    const heuristic = chooseMatmulVariant(s, rt.device.limits, { workspaceBytes: WORKSPACE_BYTES });
    return {
      key, shape: label(s), best: fastest(rows), single: fastest(onePass.length ? onePass : rows), heuristic,
      heuristicTflops: rows.find((r) => r.choice === heuristic)?.tflops,
    };
  });
}

/**
 * Per shape whose fastest choice needs a workspace (split-K, stream-K): the ladder of choices that
 * are fastest for ever smaller workspaces (each needs less than the one before), down to the
 * fastest single pass.
 */
function rankedTable(timings: Timing[], shapes: MatmulShape[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const key of new Set(timings.map((t) => t.key))) {
    const s = shapes.find((x) => shapeKey(x) === key)!;
    const rows = timings.filter((t) => t.key === key).sort((x, y) => x.ms - y.ms);
    const ladder: string[] = [];
    let least = Infinity;
    for (const r of rows) {
      const need = matmulWorkspaceBytes(s, r.choice);
      if (need < least) {
        ladder.push(r.choice);
        least = need;
      }
      if (need === 0) break;
    }
    if (ladder.length > 1) out[key] = ladder;
  }
  return out;
}

function printPicks(picks: Pick[], timings: Timing[], refKey: string): void {
  const head = ['shape', 'best', 'TFLOP/s', 'ms', 'one-pass best', 'TFLOP/s', 'heuristic', 'TFLOP/s'];
  const cells = picks.map((p) => [
    p.shape, p.best.choice, pct(p.best.tflops), p.best.ms.toFixed(4), p.single.choice, pct(p.single.tflops), p.heuristic,
    p.heuristicTflops === undefined ? '-' : pct(p.heuristicTflops),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => c.map((x, i) => x.padEnd(w[i])).join('  ').trimEnd();
  console.log(`\n${line(head)}\n${line(w.map((n) => '-'.repeat(n)))}`);
  for (const c of cells) console.log(line(c));
  const all = timings.filter((t) => t.key === refKey).sort((x, y) => x.ms - y.ms);
  if (all.length) console.log(`\n${all[0].shape}, every candidate (TFLOP/s): ${all.map((t) => `${t.choice} ${pct(t.tflops)}`).join(', ')}`);
}

async function main(): Promise<void> {
  const a = args();
  if (a.help) {
    console.log(HELP);
    return;
  }
  const t0 = performance.now();
  const elapsed = () => (performance.now() - t0) / 1000;
  // allow_unsafe_apis exposes the subgroup-matrix feature; exact timestamps need quantization off.
  const flags = ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'];
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: flags });
  const rt = new Runtime(gpu);
  const info = (gpu.device as unknown as { adapterInfo?: { subgroupMinSize?: number; subgroupMaxSize?: number } }).adapterInfo;
  const header = {
    adapter: gpu.adapterInfo, features: gpu.features, subgroupSizes: [info?.subgroupMinSize, info?.subgroupMaxSize],
    limits: { maxComputeWorkgroupStorageSize: gpu.limits.maxComputeWorkgroupStorageSize, maxComputeInvocationsPerWorkgroup: gpu.limits.maxComputeInvocationsPerWorkgroup },
  };
  console.log(`adapter: ${JSON.stringify(header.adapter)}\nfeatures: ${JSON.stringify(header.features)} subgroup sizes ${header.subgroupSizes.join('..')}`);
  const configs = subgroupMatrixConfigs(rt);
  console.log(`subgroup matrix: ${header.features.subgroupMatrix ? `${configs.length} configs: ${configs.map(configLabel).join(', ')}` : 'absent'}`);

  const known = availableVariants(rt.device.limits).map((v) => v.name);
  const variants = a.variants ?? (a.quick ? ['32x32k16_4x4', '64x64k16_4x4'] : known);
  for (const v of variants) if (!known.includes(v)) throw new UsageError(`--variants: '${v}' is unknown or does not fit this device (${known.join(', ')})`);
  const { shapes, big } = tuneShapes(a.quick, a.models);
  const transposes = [...new Map([...shapes, ...big].map((s) => [tr(s), [!!s.transA, !!s.transB] as [boolean, boolean]])).values()];

  const verified = await verify(rt, variants, transposes, a.quick, a.streamK.length > 0);
  const good = variants.filter((v) => verified.get(v)?.ok);
  for (const v of variants) {
    const r = verified.get(v)!;
    if (!r.ok) console.log(`  VERIFY FAILED ${v}: ${r.error ?? r.checks.filter((c) => !c.ok).map((c) => `${c.shape} err ${c.maxAbsErr}`).join('; ')}`);
  }
  console.log(`verified ${good.length}/${variants.length} variants (${elapsed().toFixed(1)} s)`);

  const timings: Timing[] = [];
  const skipped: string[] = [];
  const o = { warmup: a.warmup, reps: a.reps, warmupMs: a.warmupMs };
  const timeAll = async (s: MatmulShape, choices: string[]) => {
    if (elapsed() > a.budgetS || choices.length === 0) {
      skipped.push(label(s));
      return;
    }
    const rows = await timeShape(rt, s, choices, o);
    timings.push(...rows);
    if (rows.length) {
      const best = rows.reduce((x, y) => (y.ms < x.ms ? y : x));
      console.error(`  ${label(s)}: best ${best.choice} ${pct(best.tflops)} TFLOP/s (${rows.length} candidates, ${elapsed().toFixed(0)} s)`);
    }
  };
  for (const s of shapes) {
    await timeAll(s, autotuneCandidates(rt, s, WORKSPACE_BYTES, a.streamK).filter((c) => good.includes(parseChoice(c).variant.name)));
  }
  // The big squares and the robustness check take only the fastest few on the first shape (4096³ NN).
  const refKey = shapeKey(shapes[0]);
  const top = timings.filter((t) => t.key === refKey).sort((x, y) => x.ms - y.ms).slice(0, TOP_FOR_BIG).map((t) => t.choice);
  for (const s of big) await timeAll(s, top);

  // Results so far are written before anything riskier runs (a second device, tensor-core kernels).
  const all = [...shapes, ...big];
  const out: Record<string, unknown> = {
    command: ['gemm_tune', ...process.argv.slice(2)].join(' '), date: new Date().toISOString(), ...header,
    workspaceBytes: WORKSPACE_BYTES, subgroupMatrixConfigs: configs, verification: [...verified.values()], timings, skipped,
  };
  const save = () => {
    const picks = picksOf(rt, timings, all);
    Object.assign(out, {
      picks: picks.map((p) => ({ key: p.key, shape: p.shape, best: p.best.choice, bestTflops: p.best.tflops, single: p.single.choice, singleTflops: p.single.tflops, heuristic: p.heuristic, heuristicTflops: p.heuristicTflops })),
      // loadTunedTable() / matmul-tables.ts input: calls with a split-K workspace of workspaceBytes, and one-pass calls.
      tunedTable: Object.fromEntries(picks.map((p) => [p.key, p.best.choice])),
      tunedTableOnePass: Object.fromEntries(picks.map((p) => [p.key, p.single.choice])),
      // matmul-tables.ts `ranked`: per shape, the choices that are fastest for ever smaller workspaces.
      rankedTable: rankedTable(timings, all),
    });
    if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 2) + '\n');
    return picks;
  };
  printPicks(save(), timings, refKey);
  if (skipped.length) console.log(`skipped (time budget): ${skipped.join(', ')}`);

  // Robustness off (a second device): what Dawn's index clamping still costs the fastest candidates.
  if (top.length && elapsed() < a.budgetS) {
    const gpu2 = await acquireNodeGpu({
      forceSwiftShader: a.cpu, dawnFlags: ['enable-dawn-features=allow_unsafe_apis,disable_robustness', 'disable-dawn-features=timestamp_quantization'],
    });
    const rt2 = new Runtime(gpu2);
    try {
      const rows = await timeShape(rt2, shapes[0], top.slice(0, 3), o);
      out.robustnessOff = rows;
      for (const r of rows) console.log(`robustness off: ${r.shape} ${r.choice} ${pct(r.tflops)} TFLOP/s`);
    } finally {
      rt2.destroy();
    }
    save();
  }

  // Subgroup matrices last: the probe runs kernels whose spelling and semantics are unverified here.
  if (header.features.subgroupMatrix) {
    const probe = await probeSubgroupMatrix(rt);
    out.probe = probe;
    for (const r of probe.results) console.log(`  ${configLabel(r.config)}: ${r.ok ? `runs (${r.syntax} syntax, unit ${r.unitDiv})` : 'fails'}; tried ${r.tried.join(' | ')}`);
    save();
    const sgmat = elapsed() < a.budgetS + 20 ? await timeSgmat(rt, probe, a.quick, o) : [];
    out.sgmat = sgmat;
    for (const r of sgmat) console.log(`sgmat ${r.config} ${r.kernel}: ${r.ok ? (r.tops ? `${pct(r.tops)} T(FL)OP/s` : r.error) : `check failed: ${r.error ?? `max err ${r.maxAbsErr}`}`}`);
    save();
  }
  console.log(`total ${elapsed().toFixed(1)} s`);
  rt.destroy();
}

// Dawn in plain Node: keep the event loop alive while GPU callbacks are pending.
const keepAlive = setInterval(() => {}, 1000);
main().then(() => {
  clearInterval(keepAlive);
  process.exit(0);
}, fail);
