/**
 * Device test and benchmark of the f16 flash attention, forward and backward (src/engine/kernels/attention/f16/)
 * for the lent GPU, where `shader-f16` and subgroup matrices exist (SwiftShader has neither):
 *
 *  1. enableF16Attention: the candidates per head dim (32, 64) in order until one passes, forward and
 *     backward, checked against the reference (`--all`: every candidate, each checked, then timed);
 *  2. correctness, PASS/FAIL with the max error against the float64 reference on f16-rounded inputs:
 *     the forward (o, lse) at base's shape (B16 T512, 12 heads, head dim 64; the first 2 heads
 *     compared), a GQA case (12 query heads on 4 KV heads) and head dim 32, for the chosen spec (and
 *     with `--all` every other candidate that passed); the backward (dq, dk, dv relative to their
 *     largest magnitude) at T512 with 4 heads of 64, GQA, and head dim 32;
 *  3. timing (GPU timestamps, median) at base's shape, per layer, same process: the f16 forward and
 *     backward variants of the chosen layout (below), each first checked on f16AttnCheckCases' small
 *     cases; the fp32 forward and backward of src/engine/kernels/attention; the per-step figure for 12
 *     layers (the fastest variant of each pass; the issue's target: attention fwd+bwd ≤ 5 ms per base step).
 *
 *   node f16-attn-device.mjs [--json out.json] [--reps 10] [--twin] [--all] [--ds-mib 80] [--only REGEX] [--toggles disable_robustness,...]
 * `--toggles`: extra Dawn toggles (e.g. disable_robustness: what the index clamps cost these SIMT-heavy kernels).
 * `--only REGEX`: of the candidates (--all's forward and backward ones, the `BWDC` pairs) only those whose
 * label matches REGEX are checked and timed, beside the chosen ones (a full --all run takes over 100 s).
 * `BWDC` lines and the closing 'backward candidates, fastest first' list: the chosen backward pair beside
 * each new pair of F16_ATTN_BWD_LAYOUTS (stored dS; split, prefetched, dense or uniform dk/dv; dS in a scratch of --ds-mib MiB, default base's dF1 80),
 * ms a layer (whole, and per kernel) and max relative error at the first backward shape.
 * Variants (the chosen layout's cfg, subgroups and BKV): `previous` (fp32 q, k, v staged and cast, row
 * scan: the kernel before the f16 copies), `staged` (f16 copies staged by 16-byte loads through workgroup
 * memory, spec.load 'staged'), `direct` (f16 copies matrix-loaded from storage, load 'direct'). Read the `FWD <variant>` and `BWD <variant>` summary lines (ms a
 * layer; `+casts`: with the model's f16 copies' extra passes: v for the forward, q, k, v, dO for the backward).
 * Exit status 1 when a correctness case fails or no spec passes for head dim 64.
 * `--twin` (a device without shader-f16, e.g. SwiftShader): the same flow on the kernel's emulated
 * twin with a micro spec and micro shapes, to test the script itself.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu, withDawnToggle } from '../src/engine/gpu/node';
import { type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { attentionBackward, attentionBackwardWorkspaceBytes, attentionForward } from '../src/engine/kernels/attention/attention';
import { attentionBackwardF16, attentionForwardF16, type AttentionForwardF16Args, type F16AttnBwdInputs, type F16AttnInputs } from '../src/engine/kernels/attention/f16/attention-f16';
import {
  checkAttentionBackwardF16, checkAttentionF16, checkF16AttnBwdSpecs, checkF16AttnSpec, enableF16Attention, type F16AttnCase, f16AttnCheckCases,
} from '../src/engine/kernels/attention/f16/checks';
import { f16AttnInputElems, f16AttnLabel, type F16AttnSpec } from '../src/engine/kernels/attention/f16/code';
import { f16AttnBwdCandidates, f16AttnBwdLabel, type F16AttnBwdSpecs, f16AttnCandidates } from '../src/engine/kernels/attention/f16/layouts';
import { f16AttentionBackwardSpecs, f16AttentionSpec } from '../src/engine/kernels/attention/f16/picks';
import { f16AttnSpecError } from '../src/engine/kernels/attention/f16/code';
import { f16ConfigsOf } from '../src/engine/kernels/matmul-f16/plan';
import { castF16Operand, f16OperandBytes } from '../src/engine/kernels/matmul-f16/cast';
import { subgroupMatrixConfigs, subgroupSize } from '../src/engine/kernels/qgemm/sgmat';
import { Rng } from '../src/engine/util/rng';
import { msPer } from '../src/lab/quant';

const a = parseArgs({ options: { json: { type: 'string' }, reps: { type: 'string' }, twin: { type: 'boolean' }, all: { type: 'boolean' }, 'ds-mib': { type: 'string' }, only: { type: 'string' }, toggles: { type: 'string' } } }).values;
/** --only: the candidates' labels timed (the chosen specs always are). */
const only = a.only === undefined ? null : new RegExp(a.only);
const wanted = (label: string) => !only || only.test(label);
const reps = Number(a.reps ?? 10);
const twin = !!a.twin;
const T0 = Date.now();
const log = (s: string) => console.log(`[${((Date.now() - T0) / 1000).toFixed(1)}s] ${s}`);

const dawnFlags = (a.toggles ?? '').split(',').filter(Boolean)
  .reduce((f, t) => withDawnToggle(f, 'enable-dawn-features', t), ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization']);
const gpu = await acquireNodeGpu({ dawnFlags });
const rt = new Runtime(gpu);
const out: Record<string, unknown> = { date: new Date().toISOString(), adapter: gpu.adapterInfo, features: gpu.features, twin, dawnFlags };
log(`adapter ${JSON.stringify(gpu.adapterInfo)}; shader-f16 ${gpu.features.shaderF16}; subgroup matrices ${gpu.features.subgroupMatrix}; maxComputeWorkgroupStorageSize ${gpu.limits.maxComputeWorkgroupStorageSize}; dawn flags ${dawnFlags.join(' ')}`);
let failures = 0;

// Shapes: base's (B16 T512, 12 heads of 64), GQA, head dim 32; micro ones on the twin.
interface Shape extends F16AttnCase { D: number; name: string; heads?: number }
const SHAPES: Shape[] = twin
  ? [
    { name: 'base (micro)', B: 2, T: 40, nH: 2, nKV: 2, D: 16 },
    { name: 'GQA (micro)', B: 1, T: 40, nH: 6, nKV: 2, D: 16, heads: 3 },
  ]
  : [
    { name: 'base', B: 16, T: 512, nH: 12, nKV: 12, D: 64, heads: 2 },
    { name: 'GQA', B: 2, T: 512, nH: 12, nKV: 4, D: 64, heads: 6 },
    { name: 'D32', B: 2, T: 256, nH: 8, nKV: 8, D: 32, heads: 4 },
  ];
const TWIN_SPEC: F16AttnSpec = { cfg: { M: 8, N: 8, K: 8 }, D: 16, sgCount: 2, BKV: 8, sgSize: 16, PAD: 8 };
// The backward's reference is O(B·nH·T²·D) over every head: smaller shapes than the forward's.
const BWD_SHAPES: Shape[] = twin
  ? [{ name: 'bwd GQA (micro)', B: 1, T: 40, nH: 4, nKV: 2, D: 16 }]
  : [
    { name: 'bwd T512', B: 2, T: 512, nH: 4, nKV: 4, D: 64 },
    { name: 'bwd GQA', B: 1, T: 512, nH: 12, nKV: 4, D: 64 },
    { name: 'bwd D32', B: 2, T: 256, nH: 4, nKV: 4, D: 32 },
  ];
const bwdByD = new Map<number, F16AttnBwdSpecs>();

// 1. Verify-before-use.
let specsByD = new Map<number, F16AttnSpec[]>();
let tried: { label: string; ok: boolean; failed?: string }[] = [];
if (twin) {
  specsByD.set(16, [TWIN_SPEC]);
  bwdByD.set(16, { dq: TWIN_SPEC, dkdv: TWIN_SPEC });
} else {
  if (!gpu.features.shaderF16 || !gpu.features.subgroupMatrix) {
    log('FAIL no shader-f16 or no subgroup matrices on this device: the engine keeps fp32 attention (run with --twin to test this script)');
    process.exit(1);
  }
  const probe = await enableF16Attention(rt);
  out.probe = probe;
  tried = probe.tried;
  for (const t of probe.tried) log(`probe ${t.ok ? 'ok  ' : 'FAIL'} ${t.label}${t.failed ? `: ${t.failed}` : ''}`);
  for (const D of [32, 64]) log(`chosen D${D}: ${probe.chosen[D] ?? 'none (fp32 attention)'}; ${probe.chosenBackward[D] ?? 'no f16 backward (fp32 backward)'}`);
  if (!f16AttentionSpec(rt, 64)) failures++;
  if (!f16AttentionBackwardSpecs(rt, 64)) failures++;
  for (const D of [32, 64]) {
    const b = f16AttentionBackwardSpecs(rt, D);
    if (b) bwdByD.set(D, b);
  }
  // The chosen spec; with --all every candidate that passed (the chosen one first), each timed too.
  const lim = rt.device.limits;
  const valid = (s: F16AttnSpec) => !f16AttnSpecError(s, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, false, true);
  const cfgs = f16ConfigsOf(subgroupMatrixConfigs(rt));
  specsByD = new Map();
  for (const D of [32, 64]) {
    const chosen = f16AttentionSpec(rt, D);
    const list = chosen ? [chosen] : [];
    for (const s of a.all ? f16AttnCandidates(cfgs, D, subgroupSize(rt), valid) : []) {
      if ((chosen && f16AttnLabel(s) === f16AttnLabel(chosen)) || !wanted(f16AttnLabel(s))) continue;
      const r = probe.tried.find((t) => t.label === f16AttnLabel(s)) ?? await checkF16AttnSpec(rt, s);
      if (r.ok) list.push(s);
      else log(`skip ${r.label}: ${r.failed ?? 'failed'}`);
    }
    specsByD.set(D, list);
  }
}

// 2. Correctness.
const checks: unknown[] = [];
out.checks = checks;
for (const s of SHAPES) {
  for (const spec of specsByD.get(s.D) ?? []) {
    const r = await checkAttentionF16(rt, spec, s, { emulate: twin, heads: s.heads });
    checks.push({ shape: s, spec: f16AttnLabel(spec), ...r });
    if (!r.ok) failures++;
    log(`${r.ok ? 'PASS' : 'FAIL'} fwd ${s.name} B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D} ${f16AttnLabel(spec)}: max err o ${r.maxErrO.toExponential(2)}, lse ${r.maxErrLse.toExponential(2)}${r.error ? ` (${r.error})` : ''}`);
  }
}
for (const s of BWD_SHAPES) {
  const specs = bwdByD.get(s.D);
  if (!specs) continue;
  const r = await checkAttentionBackwardF16(rt, specs, s, { emulate: twin });
  checks.push({ shape: s, spec: f16AttnBwdLabel(specs), ...r });
  if (!r.ok) failures++;
  log(`${r.ok ? 'PASS' : 'FAIL'} ${s.name} B${s.B} T${s.T} nH${s.nH} nKV${s.nKV} D${s.D}: relative error dq ${r.relErr.dq.toExponential(2)}, dk ${r.relErr.dk.toExponential(2)}, dv ${r.relErr.dv.toExponential(2)}${r.error ? ` (${r.error})` : ''}`);
}
log(`correctness: ${failures} failures`);

// 3. Timing at base's shape (the twin: its micro shape, reps 1).
const timings: Record<string, unknown>[] = [];
out.timings = timings;
async function time(name: string, ds: Dispatch[], flops: number): Promise<number> {
  const { ms, method } = await msPer(rt, ds, { inner: twin ? 1 : 5, warmup: twin ? 0 : 2, reps: twin ? 1 : reps, warmupMs: twin ? 0 : 200 });
  timings.push({ name, ms, tflops: flops / (ms * 1e9), method });
  log(`time ${name}: ${ms.toFixed(3)} ms, ${(flops / (ms * 1e9)).toFixed(1)} TFLOP/s (${method})`);
  return ms;
}
/** A variant is timed only once it passes f16AttnCheckCases' small cases (or the probe passed its label); failures count. */
async function checkedFwd(spec: F16AttnSpec, inputs: 'f16' | 'f32', rowMax?: 'scan'): Promise<string | null> {
  const lim = rt.device.limits;
  const err = f16AttnSpecError(spec, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, twin, inputs === 'f16');
  if (err) return err;
  if (inputs === 'f16' && !rowMax && tried.some((t) => t.ok && t.label === f16AttnLabel(spec))) return null;
  for (const c of f16AttnCheckCases(spec)) {
    const r = await checkAttentionF16(rt, spec, c, { emulate: twin, inputs, rowMax });
    if (!r.ok) return `B${c.B} T${c.T} nH${c.nH} nKV${c.nKV}: ${r.error ?? `max error o ${r.maxErrO.toExponential(2)}, lse ${r.maxErrLse.toExponential(2)}`}`;
  }
  return null;
}
{
  const s = SHAPES[0];
  const { B, T, nH, nKV, D } = s;
  const rng = new Rng(3);
  const nq = B * T * nH * D;
  const nk = B * T * nKV * D;
  const buf = (n: number, label: string) => rt.upload('workspace', label, rng.uniformArray(n));
  const [q, k, v, dO] = [buf(nq, 'q'), buf(nk, 'k'), buf(nk, 'v'), buf(nq, 'dO')];
  const o = rt.createBuffer('workspace', 'o', nq * 4);
  const lse = rt.createBuffer('workspace', 'lse', B * nH * T * 4);
  const [dq, dk, dv] = [rt.createBuffer('workspace', 'dq', nq * 4), rt.createBuffer('workspace', 'dk', nk * 4), rt.createBuffer('workspace', 'dv', nk * 4)];
  const ws = rt.createBuffer('workspace', 'di', attentionBackwardWorkspaceBytes(B, T, nH));
  // Causal: half of the T² scores; forward 2 GEMMs (QKᵀ, PV), backward 5 (with the recomputed S).
  const fwdFlops = (2 * 2 * B * nH * T * T * D) / 2;
  const shape = { label: 'bench', B, T, nH, nKV, D, q, k, v, o, lse };
  const fp32Fwd = await time(`${s.name} fp32 fwd`, attentionForward(rt, shape), fwdFlops);
  const fp32Bwd = await time(`${s.name} fp32 bwd`, attentionBackward(rt, { ...shape, dO, dq, dk, dv, workspace: ws }), 2.5 * fwdFlops);
  log(`FP32 fwd ${fp32Fwd.toFixed(3)} ms, bwd ${fp32Bwd.toFixed(3)} ms a layer`);
  // The f16 kernels read f16 copies of q, k, v (the model's: RoPE writes q's and k's, a cast v's), padded
  // rows included (f16AttnInputElems); the v cast is timed on its own (the model's extra pass).
  const elem = twin ? 'f32' : 'f16';
  const copy16 = (x: GPUBuffer, n: number, width: number, label: string) => {
    const out = rt.createBuffer('workspace', label, f16OperandBytes(f16AttnInputElems(B * T, width), twin));
    rt.run([castF16Operand(rt, { label, x, out, n, elem })]);
    return out;
  };
  const qkv16: F16AttnInputs = { q: copy16(q, nq, nH * D, 'q16'), k: copy16(k, nk, nKV * D, 'k16'), v: copy16(v, nk, nKV * D, 'v16'), elem };
  const vCast = await time(`${s.name} v cast to f16 (the model's extra pass a layer)`, [castF16Operand(rt, { label: 'v16', x: v, out: qkv16.v, n: nk, elem })], 0);
  let best = Infinity;
  // --all: every passing candidate as the model runs it.
  for (const spec of a.all ? specsByD.get(D) ?? [] : []) {
    const ms = await time(`${s.name} f16 fwd ${f16AttnLabel(spec)} (f16 q/k/v)`, attentionForwardF16(rt, { ...shape, spec, emulate: twin, qkv16 }), fwdFlops);
    best = Math.min(best, ms + vCast);
  }
  // The variants of the chosen layout, same process: previous, staged and direct from the f16 copies.
  const chosen = specsByD.get(D)?.[0];
  if (chosen) {
    const lanes: F16AttnSpec = { ...chosen, load: 'staged' };
    const variants: [string, F16AttnSpec, Partial<AttentionForwardF16Args>, boolean][] = [
      ['previous', lanes, { rowMax: 'scan', qkv16: undefined }, false],
      ['staged', lanes, { qkv16 }, true],
      ['direct', { ...lanes, load: 'direct' }, { qkv16 }, true],
    ];
    const got: Record<string, number> = {};
    for (const [name, spec, v, f16in] of variants) {
      const bad = await checkedFwd(spec, f16in ? 'f16' : 'f32', v.rowMax === 'scan' ? 'scan' : undefined);
      if (bad) {
        log(`FWD ${name}: not timed, ${f16AttnLabel(spec)}: ${bad}`);
        if (!/bytes of workgroup memory|pad rows/.test(bad)) failures++;
        continue;
      }
      const ms = await time(`${s.name} f16 fwd ${name} ${f16AttnLabel(spec)}`, attentionForwardF16(rt, { ...shape, spec, emulate: twin, ...v }), fwdFlops);
      got[name] = ms;
      if (f16in) best = Math.min(best, ms + vCast);
      log(`FWD ${name.padEnd(12)} ${ms.toFixed(3)} ms a layer${f16in ? `, +casts ${(ms + vCast).toFixed(3)} ms` : ''}${got.previous ? ` = ${(got.previous / (ms + (f16in ? vCast : 0))).toFixed(2)}x previous` : ''} (${f16AttnLabel(spec)})`);
    }
    out.forwardCompare = got;
  }
  let f16Bwd = Infinity;
  const chosenBwd = bwdByD.get(D);
  // The backward reads f16 copies of q, k, v, dO that the model casts before it (timed: 4 casts a layer).
  const bwd16: F16AttnBwdInputs = { ...qkv16, dO: copy16(dO, nq, nH * D, 'dO16') };
  const bwdCasts = await time(`${s.name} q, k, v, dO casts to f16 (the model's backward passes a layer)`, [
    castF16Operand(rt, { label: 'q16', x: q, out: bwd16.q, n: nq, elem }), castF16Operand(rt, { label: 'k16', x: k, out: bwd16.k, n: nk, elem }),
    castF16Operand(rt, { label: 'v16', x: v, out: bwd16.v, n: nk, elem }), castF16Operand(rt, { label: 'dO16', x: dO, out: bwd16.dO, n: nq, elem })], 0);
  // The stored-dS candidates' scratch: the model's dF1 at base (N·F fp32: 80 MiB, every pair's dS in one chunk) unless --ds-mib.
  const dsScratch = rt.createBuffer('workspace', 'dsScratch', Math.round(Number(a['ds-mib'] ?? (twin ? 1 : 80)) * 2 ** 20));
  const bwdArgs = { ...shape, dO, dq, dk, dv, workspace: ws, emulate: twin, dsScratch };
  /** The pairs the `BWDC` comparison below times (per kernel and whole): the stored-dS ones and those with a dk/dv option. */
  const comparedPair = (c: F16AttnBwdSpecs) => !!(c.dq.ds || c.dkdv.split || c.dkdv.prefetch || c.dkdv.dense || c.dkdv.uniform);
  // --all: every other backward candidate that passes its check (tuning data for F16_ATTN_BWD_LAYOUTS' order); the compared pairs are timed below.
  if (a.all && !twin && chosenBwd) {
    const lim = rt.device.limits;
    for (const c of f16AttnBwdCandidates(f16ConfigsOf(subgroupMatrixConfigs(rt)), D, subgroupSize(rt), lim)) {
      if (f16AttnBwdLabel(c) !== f16AttnBwdLabel(chosenBwd) && (!wanted(f16AttnBwdLabel(c)) || comparedPair(c))) continue;
      const r = f16AttnBwdLabel(c) === f16AttnBwdLabel(chosenBwd) ? { ok: true, label: '', failed: '' } : await checkF16AttnBwdSpecs(rt, c);
      if (!r.ok) {
        log(`skip ${r.label}: ${r.failed}`);
        continue;
      }
      const ms = await time(`${s.name} f16 bwd ${f16AttnBwdLabel(c)} (f16 q/k/v/dO)`, attentionBackwardF16(rt, { ...bwdArgs, specs: c, qkv16: bwd16 }), 2.5 * fwdFlops);
      f16Bwd = Math.min(f16Bwd, ms + bwdCasts);
    }
  }
  // The chosen layout's variants: previous (fp32 q, k, v, dO staged and cast), staged and direct from the f16 copies; dq and dk/dv each.
  // A stored-dS choice: its dk/dv layout recomputing (both kernels), the kernels these variants compare.
  if (chosenBwd) {
    const lay = chosenBwd.dq.ds ? { ...chosenBwd.dkdv, ds: undefined } : undefined;
    // dk/dv's own options (and, read direct, those that need staged rows) stay off the kernels that cannot take them.
    const staged = { split: undefined, prefetch: undefined, colwise: undefined, nomask: undefined };
    const as = (load: 'staged' | 'direct'): F16AttnBwdSpecs => ({
      dq: { ...(lay ?? chosenBwd.dq), ...staged, contig: undefined, load },
      dkdv: { ...(lay ?? chosenBwd.dkdv), ...(load === 'direct' ? staged : {}), load },
    });
    const got: Record<string, number> = {};
    for (const [name, specs, h] of [['previous', as('staged'), undefined], ['staged', as('staged'), bwd16], ['direct', as('direct'), bwd16]] as const) {
      const r = await checkF16AttnBwdSpecs(rt, specs, twin, h ? 'f16' : 'f32');
      if (!r.ok) {
        log(`BWD ${name}: not timed, ${r.label}: ${r.failed}`);
        if (!/bytes of workgroup memory|pad rows/.test(r.failed ?? '')) failures++;
        continue;
      }
      const [dqK, dkdvK] = attentionBackwardF16(rt, { ...bwdArgs, specs, qkv16: h });
      const a1 = await time(`${s.name} f16 bwd ${name} dq kernel`, [dqK], 1.5 * fwdFlops);
      // dk/dv alone: it reads the Di the dq runs just left in the workspace.
      const a2 = await time(`${s.name} f16 bwd ${name} dk/dv kernel`, [dkdvK], 2 * fwdFlops);
      got[`${name} dq`] = a1;
      got[`${name} dkdv`] = a2;
      const sum = a1 + a2;
      got[name] = sum;
      if (h) f16Bwd = Math.min(f16Bwd, sum + bwdCasts);
      log(`BWD ${name.padEnd(12)} dq ${a1.toFixed(3)} + dkdv ${a2.toFixed(3)} = ${sum.toFixed(3)} ms a layer${h ? `, +casts ${(sum + bwdCasts).toFixed(3)} ms` : ''}${got.previous ? ` = ${(got.previous / (sum + (h ? bwdCasts : 0))).toFixed(2)}x previous` : ''} (${r.label})`);
    }
    out.backwardCompare = got;
  }
  // The backward candidates side by side: the chosen pair, then each pair of F16_ATTN_BWD_LAYOUTS with a
  // new option (stored dS: dk/dv storing it, dq a GEMM over it, Di its own pass; split, prefetched, dense or uniform dk/dv). Each checked on the small cases, then its error measured at
  // BWD_SHAPES[0], then timed per kernel and whole (ms a layer): the list, fastest first, decides the default.
  if (chosenBwd) {
    const lim = rt.device.limits;
    const pairs = twin
      ? [{ dq: { ...TWIN_SPEC, BKV: 16, ds: true }, dkdv: { ...TWIN_SPEC, ds: true } }, { dq: TWIN_SPEC, dkdv: { ...TWIN_SPEC, split: true } },
        { dq: { ...TWIN_SPEC, BKV: 16, wide: true, ds: true }, dkdv: { ...TWIN_SPEC, split: true, prefetch: true, contig: true, ds: true } },
        { dq: { ...TWIN_SPEC, BKV: 16, ds: true, dense: true }, dkdv: { ...TWIN_SPEC, split: true, ds: true, dense: true } },
        { dq: { ...TWIN_SPEC, BKV: 16, ds: true, uniform: true }, dkdv: { ...TWIN_SPEC, split: true, ds: true, uniform: true } }]
      : f16AttnBwdCandidates(f16ConfigsOf(subgroupMatrixConfigs(rt)), D, subgroupSize(rt), lim).filter(comparedPair);
    const rows: { label: string; ms: number; parts: string; err: number }[] = [];
    for (const c of [chosenBwd, ...pairs.filter((p) => f16AttnBwdLabel(p) !== f16AttnBwdLabel(chosenBwd) && wanted(f16AttnBwdLabel(p)))]) {
      const label = f16AttnBwdLabel(c);
      const r = await checkF16AttnBwdSpecs(rt, c, twin);
      if (!r.ok) {
        log(`BWDC ${label}: not timed, ${r.failed}`);
        failures++;
        continue;
      }
      const big = BWD_SHAPES[0];
      const e = await checkAttentionBackwardF16(rt, c, big, { emulate: twin });
      const err = Math.max(e.relErr.dq, e.relErr.dk, e.relErr.dv);
      if (!e.ok) {
        log(`BWDC ${label}: not timed, ${big.name}: ${e.error ?? `relative error dq ${e.relErr.dq.toExponential(2)}, dk ${e.relErr.dk.toExponential(2)}, dv ${e.relErr.dv.toExponential(2)}`}`);
        failures++;
        continue;
      }
      const ds = attentionBackwardF16(rt, { ...bwdArgs, specs: c, qkv16: bwd16 });
      // Each kernel alone (each reads what the one before it left: Di, dS), then the whole list.
      const each: string[] = [];
      for (const d of ds) each.push(`${d.label.replace(/^bench\./, '')} ${(await time(`${s.name} f16 bwd ${label}: ${d.label}`, [d], 0)).toFixed(3)}`);
      const ms = await time(`${s.name} f16 bwd ${label} (whole)`, ds, 2.5 * fwdFlops);
      f16Bwd = Math.min(f16Bwd, ms + bwdCasts);
      rows.push({ label, ms, parts: each.join(' + '), err });
      log(`BWDC ${ms.toFixed(3)} ms a layer, +casts ${(ms + bwdCasts).toFixed(3)}, max rel err ${err.toExponential(2)} (${big.name}): ${label} [${each.join(' + ')}]`);
    }
    rows.sort((x, y) => x.ms - y.ms);
    log(`backward candidates, fastest first (the first should be the default: first in F16_ATTN_BWD_LAYOUTS):`);
    const chosenMs = rows.find((x) => x.label === f16AttnBwdLabel(chosenBwd))?.ms;
    for (const r of rows) log(`  ${r.ms.toFixed(3)} ms a layer${chosenMs ? ` = ${(chosenMs / r.ms).toFixed(2)}x chosen` : ''}, max rel err ${r.err.toExponential(2)}: ${r.label}`);
    out.backwardCandidates = rows;
  }
  rt.mem.free(dsScratch);
  [qkv16.q, qkv16.k, qkv16.v, bwd16.dO].forEach((b) => rt.mem.free(b as GPUBuffer));
  const L = 12;
  // f16 figures include the model's casts (v for the forward; q, k, v, dO for the backward).
  const perStep = { fp32: L * (fp32Fwd + fp32Bwd), f16FwdFp32Bwd: L * (best + fp32Bwd), f16: L * (best + f16Bwd), targetMs: 5 };
  out.perStep = perStep;
  log(`per base step (${L} layers): fp32 attention ${perStep.fp32.toFixed(2)} ms; f16 forward + fp32 backward ${perStep.f16FwdFp32Bwd.toFixed(2)} ms; f16 forward + f16 backward ${perStep.f16.toFixed(2)} ms (target ≤ 5 ms${twin ? '; twin: micro shape, not a measurement' : ''})`);
  [q, k, v, dO, o, lse, dq, dk, dv, ws].forEach((b) => rt.mem.free(b));
}

out.failures = failures;
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
log(`done: ${failures} failures`);
process.exit(failures ? 1 : 0);
