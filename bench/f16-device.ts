/**
 * Device test and benchmark of the f16 GEMMs (src/engine/kernels/matmul-f16/) for the lent GPU,
 * where `shader-f16` exists (SwiftShader has none, so CI cannot run these kernels):
 *
 *  1. what the device offers: shader-f16 with and without Dawn's vulkan_enable_f16_on_nvidia, the
 *     subgroup-matrix configurations, and whether the global-norm reduction propagates inf and NaN
 *     (the loss scaler's found-inf check, optim/loss-scale.ts, relies on it);
 *  2. enableF16TensorCores: every tensor-core layout per form, checked against the reference;
 *  3. correctness, PASS/FAIL per case with the max error: SIMT and tensor cores (each form's
 *     chosen layout), awkward shapes (1, 7, 63, 65), alpha/accumulate, split-K, and the base
 *     model's GEMM shapes (sampled outputs);
 *  4. timing (GPU timestamps, median): 4096³ NT for the SIMT kernel, every tensor-core layout that
 *     passed its check, and our fp32 GEMM; the base model's shapes on the chosen kernels.
 * bench/torch_f16_gemm.py times cuBLAS fp16 on the same shapes in the same device call.
 *
 *   node f16-device.mjs [--json out.json] [--reps 10] [--sizes 4096] [--no-model] [--no-tune] [--tune-model]
 *                       [--budget-s 180] [--layout-s 20] [--model-top 6] [--cfgs 16x16x16,16x8x16]
 *                       [--toggles disable_robustness,...] [--layouts REGEX] [--no-checks]
 * The tune at 4096³ checks and times every layout of F16_TC_LAYOUTS with every f16 → f32
 * configuration (the largest tile first, the layouts after the form's first one first). Each layout
 * gets --layout-s seconds for its compile, check and timing (past that it is dropped, so one bad
 * layout cannot eat the device call), and no layout starts past --budget-s seconds from the start
 * (past 55% of it at 4096³ when --tune-model leaves the rest to the model's shapes). --cfgs limits the
 * configurations tried.
 * --tune-model times the --model-top fastest layouts at 4096³ (and each form's first) on the model's
 * shapes too and prints the fastest per shape as MEASURED_F16TC_LAYOUTS entries
 * (kernels/matmul-f16/plan.ts). The end prints the fastest layout per form and shape.
 * Exit status 1 when any correctness case fails. `--twin` (a device without shader-f16, e.g.
 * SwiftShader): runs this script's flow on the SIMT kernel's f32 twin, to test the script itself.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu, withDawnToggle } from '../src/engine/gpu/node';
import { type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { matmul } from '../src/engine/kernels/matmul/matmul';
import {
  buildMatmulF16, checkF16Tc, checkMatmulF16, enableF16TensorCores, f16PathFor, f16TensorCoreSpecFor, type F16GemmCase, uploadF16,
} from '../src/engine/kernels/matmul-f16/matmul-f16';
import {
  F16_TC_LAYOUTS, f16ConfigsOf, f16ShapeKey, f16TcLabel, f16TcLayoutOf, f16TcSpecError, type F16TcSpec, FORM_TRANS, formOf, type GemmForm, GEMM_FORMS,
  vec4Operands,
} from '../src/engine/kernels/matmul-f16/plan';
import { globalNorm, globalNormPartialsBytes } from '../src/engine/kernels/reduce/reduce';
import { subgroupSize } from '../src/engine/kernels/qgemm/sgmat';
import { Rng } from '../src/engine/util/rng';
import { msPer } from '../src/lab/quant';

const a = parseArgs({
  options: {
    json: { type: 'string' }, reps: { type: 'string' }, sizes: { type: 'string' },
    'no-model': { type: 'boolean' }, 'no-tune': { type: 'boolean' }, 'tune-model': { type: 'boolean' }, twin: { type: 'boolean' },
    'budget-s': { type: 'string' }, 'layout-s': { type: 'string' }, 'model-top': { type: 'string' }, cfgs: { type: 'string' },
    toggles: { type: 'string' }, layouts: { type: 'string' }, 'no-checks': { type: 'boolean' },
  },
}).values;
const budgetS = Number(a['budget-s'] ?? 180);
const layoutS = Number(a['layout-s'] ?? 20);
const modelTop = Number(a['model-top'] ?? 6);
for (const [n, v] of [['--budget-s', budgetS], ['--layout-s', layoutS], ['--model-top', modelTop]] as const) {
  if (!(v > 0)) throw new Error(`${n} must be a positive number, got ${v}`);
}
/** --cfgs 16x16x16,16x8x16: the f16 → f32 configurations the tune tries (default all the device offers). */
const cfgFilter = a.cfgs?.split(',').map((c) => {
  if (!/^\d+x\d+x\d+$/.test(c)) throw new Error(`--cfgs: '${c}' is not MxNxK (e.g. 16x16x16)`);
  return c;
});
// With --tune-model the 4096³ tune stops at 55% of the budget, so the model's shapes get the rest.
const cubeBudgetS = a['tune-model'] && !a['no-model'] ? budgetS * 0.55 : budgetS;
const reps = Number(a.reps ?? 10);
const sizes = (a.sizes ?? '4096').split(',').map(Number);
const T0 = Date.now();
const log = (s: string) => console.log(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${s}`);

// The base model at 16 × 512 tokens (hidden 768, intermediate 2560): forward Y = X·Wᵀ (NT),
// dX = dY·W (NN), dW = dYᵀ·X (TN); gate and up fused where the engine fuses them.
const T = 8192;
const MODEL: { name: string; form: GemmForm; M: number; N: number; K: number }[] = [
  { name: 'fwd qkvo', form: 'NT', M: T, N: 768, K: 768 },
  { name: 'fwd gate|up', form: 'NT', M: T, N: 2560, K: 768 },
  { name: 'fwd down', form: 'NT', M: T, N: 768, K: 2560 },
  { name: 'dX qkvo', form: 'NN', M: T, N: 768, K: 768 },
  { name: 'dX gate+up', form: 'NN', M: T, N: 768, K: 5120 },
  { name: 'dX down', form: 'NN', M: T, N: 2560, K: 768 },
  { name: 'dW qkvo', form: 'TN', M: 768, N: 768, K: T },
  { name: 'dW gate|up', form: 'TN', M: 2560, N: 768, K: T },
  { name: 'dW down', form: 'TN', M: 768, N: 2560, K: T },
];

// --toggles adds Dawn toggles (e.g. disable_robustness,disable_workgroup_init) to find what the generated code pays for.
const flags = (a.toggles ?? '').split(',').filter(Boolean)
  .reduce((f, t) => withDawnToggle(f, 'enable-dawn-features', t), ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization']);
/** --layouts REGEX: tune only the layouts whose label matches (with the form's chosen one, always timed). */
const layoutFilter = a.layouts ? new RegExp(a.layouts) : undefined;
const out: Record<string, unknown> = { date: new Date().toISOString() };
let failures = 0;

// 1. The toggle's effect: the same adapter without it (NVIDIA hides shader-f16 under Vulkan).
{
  const plain = await acquireNodeGpu({ dawnFlags: flags, f16: false });
  out.withoutToggle = { shaderF16: plain.features.shaderF16, configs: plain.subgroupMatrixConfigs };
  log(`without vulkan_enable_f16_on_nvidia: shader-f16 ${plain.features.shaderF16}, ${f16ConfigsOf(plain.subgroupMatrixConfigs).length} f16->f32 configs`);
  plain.device.destroy();
}
const gpu = await acquireNodeGpu({ dawnFlags: flags });
const rt = new Runtime(gpu);
out.dawnFlags = flags;
log(`dawn flags ${flags.join(' ')}`);
out.adapter = gpu.adapterInfo;
out.features = gpu.features;
out.configs = gpu.subgroupMatrixConfigs;
out.limits = { maxComputeWorkgroupStorageSize: gpu.limits.maxComputeWorkgroupStorageSize, subgroupMaxSize: gpu.subgroupMaxSize };
log(`adapter ${JSON.stringify(gpu.adapterInfo)}`);
log(`features ${JSON.stringify(gpu.features)}; configs ${gpu.subgroupMatrixConfigs.map((c) => `${c.componentType}->${c.resultComponentType} ${c.M}x${c.N}x${c.K}`).join(', ')}`);

// The loss scaler reads found-inf from the global norm: an inf or NaN gradient must make it non-finite.
{
  const n = 100_000;
  const rows: Record<string, number> = {};
  for (const [name, v] of [['inf', Infinity], ['-inf', -Infinity], ['nan', NaN], ['finite', 1]] as const) {
    const x = new Float32Array(n).fill(1e-3);
    x[n - 17] = v;
    const xb = rt.upload('workspace', 'norm.x', x);
    const partials = rt.createBuffer('workspace', 'norm.p', globalNormPartialsBytes(n));
    const o = rt.createBuffer('workspace', 'norm.o', 16);
    rt.run(globalNorm(rt, { x: xb, n, partials, out: o }));
    rows[name] = new Float32Array(await rt.read(o, 0, 4))[0];
    [xb, partials, o].forEach((b) => rt.mem.free(b));
  }
  const ok = !Number.isFinite(rows.inf) && !Number.isFinite(rows['-inf']) && Number.isNaN(rows.nan) && Number.isFinite(rows.finite);
  if (!ok) failures++;
  out.normPropagation = { ...rows, ok };
  log(`${ok ? 'PASS' : 'FAIL'} global norm with one inf / -inf / NaN gradient: ${rows.inf} / ${rows['-inf']} / ${rows.nan} (finite: ${rows.finite})`);
}

const twin = !!a.twin;
if (!gpu.features.shaderF16 && !twin) {
  log('no shader-f16 on this device: nothing f16 to test (the engine keeps fp32)');
  if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
  process.exit(0);
}

// 2. Tensor-core layouts per form.
const probe = await enableF16TensorCores(rt);
out.probe = { present: probe.present, chosen: Object.fromEntries(Object.entries(probe.chosen).map(([f, s]) => [f, f16TcLabel(s)])), tried: probe.tried, shapeLayouts: probe.shapeLayouts };
for (const t of probe.tried) log(`probe ${t.ok ? 'ok  ' : 'FAIL'} ${t.label}${t.failed ? `: ${t.failed}` : ''}`);
for (const f of GEMM_FORMS) log(`chosen ${f}: ${probe.chosen[f] ? f16TcLabel(probe.chosen[f]) : 'none (SIMT)'}`);

// 3. Correctness.
const rows: unknown[] = [];
out.checks = rows;
async function check(name: string, c: F16GemmCase, path: 'f16-simt' | 'f16-tensor-core', samples?: number): Promise<void> {
  const r = await checkMatmulF16(rt, c, { path, samples, elem: twin ? 'f32' : undefined });
  rows.push({ name, path, ...c, ...r });
  if (!r.ok) failures++;
  const form = formOf(c.transA, c.transB);
  log(`${r.ok ? 'PASS' : 'FAIL'} ${path} ${form} ${c.M}x${c.N}x${c.K}${c.alpha !== undefined ? ` alpha ${c.alpha}` : ''}${c.accumulate ? ' acc' : ''}${c.split ? ` split ${c.split}` : ''} ${name}: max err ${r.maxAbsErr.toExponential(2)}, ${r.worstRatio.toPrecision(3)}x tol${r.error ? ` (${r.error})` : ''}`);
}
const odd = [1, 7, 63, 65];
// --no-checks skips these cases (a timing-only call); the tune still checks every layout it times.
for (const form of a['no-checks'] ? [] : GEMM_FORMS) {
  const t = FORM_TRANS[form];
  const paths: ('f16-simt' | 'f16-tensor-core')[] = probe.chosen[form] ? ['f16-simt', 'f16-tensor-core'] : ['f16-simt'];
  for (const path of paths) {
    for (const M of odd) {
      for (const N of odd) {
        for (const K of [1, 63, 65, 200]) {
          if (!(M === N || K === 200)) continue;
          let c = { M, N, K, ...t };
          // The tensor-core kernel needs the stored rows in whole vec4s: round those dimensions up to 4.
          const r4 = (x: number) => Math.ceil(x / 4) * 4;
          if (path === 'f16-tensor-core') c = { ...c, M: t.transA ? r4(M) : M, N: t.transB ? N : r4(N), K: !t.transA ? r4(K) : K };
          if (path === 'f16-tensor-core' && !Object.values(vec4Operands(form, c)).every(Boolean)) throw new Error('vec4 rule');
          await check('awkward', c, path);
        }
      }
    }
    const tc = path === 'f16-tensor-core';
    const big = { M: tc ? 260 : 257, N: 252, K: tc && !t.transA ? 516 : 515, ...t };
    await check('alpha', { ...big, alpha: 0.125 }, path);
    await check('accumulate', { ...big, alpha: -1.5, accumulate: true }, path);
    await check('split-K', { ...big, split: 3 }, path);
    await check('split-K accumulate', { ...big, split: 2, alpha: 2, accumulate: true }, path);
  }
}
if (!a['no-model'] && !a['no-checks']) {
  for (const s of MODEL) {
    const path = twin ? 'f16-simt' : f16PathFor(rt, FORM_TRANS[s.form].transA, FORM_TRANS[s.form].transB, s);
    if (path === 'fp32') continue;
    await check(`model ${s.name}`, { M: s.M, N: s.N, K: s.K, ...FORM_TRANS[s.form] }, path, 2048);
    if (s.form === 'TN') await check(`model ${s.name}`, { M: s.M, N: s.N, K: s.K, ...FORM_TRANS[s.form], split: 4 }, path, 2048);
  }
}
log(`correctness: ${failures} failures`);

// 4. Timing.
const timings: unknown[] = [];
out.timings = timings;
async function time(name: string, shape: { M: number; N: number; K: number }, ds: Dispatch[]): Promise<number> {
  const { ms, method } = await msPer(rt, ds, { inner: 5, warmup: 2, reps, warmupMs: 200 });
  const tflops = (2 * shape.M * shape.N * shape.K) / (ms * 1e9);
  timings.push({ name, ...shape, ms, tflops, method });
  log(`time ${shape.M}x${shape.N}x${shape.K} ${name}: ${tflops.toFixed(1)} TFLOP/s (${ms.toFixed(3)} ms, ${method})`);
  return tflops;
}
const rng = new Rng(7);
const elapsedS = () => (Date.now() - T0) / 1000;
/** Label → passed its check (false also for a layout dropped past its deadline: not tried again). */
const checkedLayouts = new Map<string, boolean>();
/** Per GEMM key (MxNxK + form): the fastest tensor-core layout timed, for MEASURED_F16TC_LAYOUTS. */
const best = new Map<string, { tflops: number; spec: F16TcSpec; label: string }>();
/** The layout part of a label (without 'f16 NT'): the same layout in each form. */
const layoutKey = (s: F16TcSpec) => f16TcLabel(s).split(' ').slice(2).join(' ');
/** Layout key → TFLOP/s at the first size (ranks the layouts the model's shapes get). */
const cubeRank = new Map<string, number>();
const ORIGINAL = 8; // F16_TC_LAYOUTS' first eight (measured in the 2026-12-06 record); the rest are the newer forms

class Deadline extends Error {}
/** Rejects once the layout's deadline passes (the work itself keeps running on the device; its result is dropped). */
function within<T>(p: Promise<T>, until: number, what: string): Promise<T> {
  if (until === Infinity) return p;
  const left = until - Date.now();
  if (left <= 0) return Promise.reject(new Deadline(`${what}: past the ${layoutS} s layout deadline`));
  let timer: ReturnType<typeof setTimeout> | undefined;
  const t = new Promise<never>((_, rej) => { timer = setTimeout(() => rej(new Deadline(`${what}: past the ${layoutS} s layout deadline`)), left); });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

/** The layouts to tune on a form: largest configuration first; in each, the newer forms before the original ones (measured already). */
function tuneCandidates(form: GemmForm): F16TcSpec[] {
  const limits = rt.device.limits;
  const valid = (s: F16TcSpec) => !f16TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup);
  const order = F16_TC_LAYOUTS.map((_, i) => i).sort((x, y) => Number(x < ORIGINAL) - Number(y < ORIGINAL) || x - y);
  const cfgs = f16ConfigsOf(gpu.subgroupMatrixConfigs).filter((c) => !cfgFilter || cfgFilter.includes(`${c.M}x${c.N}x${c.K}`));
  return cfgs.flatMap((cfg) => order.map((i): F16TcSpec => ({
    cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, ...FORM_TRANS[form], sgSize: subgroupSize(rt), ...F16_TC_LAYOUTS[i],
  })).filter((s) => valid(s) && (!layoutFilter || layoutFilter.test(f16TcLabel(s)))));
}

async function timeShape(label: string, form: GemmForm, M: number, N: number, K: number, tune: 'all' | 'top' | 'none'): Promise<void> {
  const t = FORM_TRANS[form];
  const A = uploadF16(rt, 'A', rng.uniformArray(M * K));
  const B = uploadF16(rt, 'B', rng.uniformArray(K * N));
  const A32 = rt.upload('workspace', 'A32', rng.uniformArray(M * K));
  const B32 = rt.upload('workspace', 'B32', rng.uniformArray(K * N));
  const C = rt.createBuffer('workspace', 'C', M * N * 4);
  const ws = rt.createBuffer('workspace', 'ws', 8 * M * N * 4);
  const shape = { M, N, K };
  const key = f16ShapeKey(form, shape);
  const free: GPUBuffer[] = [A, B, A32, B32, C, ws];
  const run = async (name: string, path: 'f16-simt' | 'f16-tensor-core', spec?: F16TcSpec, workspace?: GPUBuffer, until = Infinity) => {
    try {
      const b = buildMatmulF16(rt, { label: name, M, N, K, a: twin ? A32 : A, b: twin ? B32 : B, c: C, ...t, path, spec, workspace, elem: twin ? 'f32' : undefined });
      free.push(...b.uniforms);
      const tflops = await within(time(`${label} ${name}${b.parts > 1 ? ` split ${b.parts}` : ''}`, shape, b.dispatches), until, name);
      if (spec && b.parts === 1) {
        if (tflops > (best.get(key)?.tflops ?? 0)) best.set(key, { tflops, spec, label: f16TcLabel(spec) });
        if (label === `${sizes[0]}^3` && !cubeRank.has(layoutKey(spec))) cubeRank.set(layoutKey(spec), tflops);
      }
    } catch (e) {
      if (e instanceof Deadline && spec) checkedLayouts.set(f16TcLabel(spec), false);
      log(`time ${label} ${name}: ${(e as Error).message}`);
    }
  };
  await time(`${label} fp32 ${form}`, shape, [matmul(rt, { label: 'fp32', a: A32, b: B32, c: C, M, N, K, ...t })]);
  await run(`f16-simt ${form}`, 'f16-simt');
  const chosen = f16TensorCoreSpecFor(rt, form, shape);
  if (chosen) {
    await run(`f16-tc ${f16TcLabel(chosen)}`, 'f16-tensor-core', chosen);
    if (form === 'TN') await run(`f16-tc ${f16TcLabel(chosen)}`, 'f16-tensor-core', chosen, ws);
  }
  if (tune !== 'none' && chosen) {
    // 'all': every layout of every configuration; 'top': the fastest at the first size (and the form's first layout).
    const top = new Set([...cubeRank].sort((x, y) => y[1] - x[1]).slice(0, modelTop).map(([k]) => k));
    const cands = tuneCandidates(form).filter((s) => f16TcLabel(s) !== f16TcLabel(chosen) && (tune === 'all' || top.has(layoutKey(s))));
    log(`tune ${label} ${form}: ${cands.length} layouts, ${layoutS} s each at most, ${Math.max(0, budgetS - elapsedS()).toFixed(0)} s of the budget left`);
    const stopS = tune === 'all' ? cubeBudgetS : budgetS;
    for (const [i, s] of cands.entries()) {
      const l = f16TcLabel(s);
      if (elapsedS() > stopS) {
        log(`tune ${label}: past ${stopS.toFixed(0)} s of the ${budgetS} s budget, ${cands.length - i} layouts not timed`);
        break;
      }
      const until = Date.now() + layoutS * 1000;
      if (!checkedLayouts.has(l)) {
        try {
          const c = await within(checkF16Tc(rt, s), until, `check ${l}`);
          checkedLayouts.set(l, c.ok);
          if (!c.ok) log(`tune skip ${c.label}: ${c.failed}`);
        } catch (e) {
          checkedLayouts.set(l, false);
          log(`tune skip ${l}: ${(e as Error).message}`);
        }
      }
      if (!checkedLayouts.get(l)) continue;
      await run(`f16-tc ${l}`, 'f16-tensor-core', s, undefined, until);
    }
  }
  free.forEach((b) => rt.mem.free(b));
}
for (const [i, n] of sizes.entries()) await timeShape(`${n}^3`, 'NT', n, n, n, a['no-tune'] ? 'none' : i === 0 ? 'all' : 'top');
if (!a['no-model']) for (const s of MODEL) await timeShape(s.name, s.form, s.M, s.N, s.K, a['tune-model'] ? 'top' : 'none');
if (best.size) {
  // Paste into MEASURED_F16TC_LAYOUTS (the entries that beat the form's first layout).
  const table = Object.fromEntries([...best].map(([k, { spec: x }]) => [k, { cfg: [x.cfg.M, x.cfg.N, x.cfg.K], layout: f16TcLayoutOf(x) }]));
  out.bestLayouts = table;
  log(`fastest tensor-core layout per GEMM: ${JSON.stringify(table)}`);
  for (const form of GEMM_FORMS) {
    for (const [k, b] of best) if (k.endsWith(form)) log(`best ${form} ${k.slice(0, -2)}: ${b.tflops.toFixed(1)} TFLOP/s ${b.label}`);
  }
  // The fastest of each kind of layout at the first size: what each new form gained over the first layout.
  const kinds = new Map<string, [string, number]>();
  for (const [k, v] of cubeRank) {
    const kind = k.split(/ direct ?/)[1] || `no options, ${/\((\d+x\d+) sg/.exec(k)?.[1] ?? '?'} subgroups`;
    if (v > (kinds.get(kind)?.[1] ?? 0)) kinds.set(kind, [k, v]);
  }
  out.bestPerKind = Object.fromEntries(kinds);
  for (const [kind, [k, v]] of kinds) log(`best of kind '${kind}' at ${sizes[0]}^3: ${v.toFixed(1)} TFLOP/s ${k}`);
}
log(`elapsed ${elapsedS().toFixed(0)} s`);

out.failures = failures;
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
log(`done: ${failures} correctness failures`);
process.exit(failures ? 1 : 0);
