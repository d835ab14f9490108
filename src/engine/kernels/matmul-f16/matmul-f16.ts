/**
 * f16 GEMMs with f32 accumulation:  C[M,N] (+)= alpha · op(A)[M,K] · op(B)[K,N],  A and B f16 in
 * storage (`array<f16>`, two bytes an element), C f32. Layouts and forms: ./plan.ts.
 *
 * Paths, per device: tensor cores (./tc.ts) where a layout for the GEMM's form passed
 * enableF16TensorCores's check on this device; else the SIMT kernel (./simt.ts) where the device
 * has `shader-f16`; else none — matmulF16 throws and the caller keeps the fp32 GEMM
 * (kernels/matmul). `f16PathFor` says which a GEMM gets, for run.json and the run view.
 *
 * Dawn exposes `shader-f16` on NVIDIA under Vulkan only with the toggle vulkan_enable_f16_on_nvidia
 * (gpu/node.ts passes it), and subgroup matrices only with allow_unsafe_apis.
 */
import splitKSrc from '../matmul/splitk.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { type LowRank, MAX_LOW_RANK } from '../matmul/matmul';
import { wgslErrors } from '../../gpu/pipelines';
import { Uniforms } from '../../gpu/runtime';
import { f32ArrayToF16, roundF16 } from '../../quant/f16';
import { Rng } from '../../util/rng';
import { adapterMatches } from '../../gpu/device';
import { asSlice, bindingBytes, grid2d } from '../launch';
import { subgroupMatrixConfigs, subgroupSize } from '../qgemm/sgmat';
import { compareF16Gemm, type F16GemmComparison, lowRankRef, matmulF16Ref, matmulF16RefAt } from './matmul-f16.ref';
import {
  chooseF16SplitK, F16_TC_LAYOUTS, f16ConfigsOf, f16KernelFor, f16SplitPlan, f16SplitWorkspaceBytes, f16TcBlockM, f16TcBlockN,
  f16TcCandidates, f16TcLabel, f16TcLowRankStaging, f16TcSpecError, f16TcSpecOfPick, f16TcThreads, type F16Path, type F16TcLayout, type F16TcSpec, formOf, type GemmForm,
  GEMM_FORMS, type GemmShape, MEASURED_F16TC_LAYOUTS, f16ShapeKey, SIMT_F16, vec4Operands,
} from './plan';
import { simtF16Code } from './simt';
import { noteChoice, tunedEntries, tunedPicks } from '../../tune/store';
import { f16TcCode } from './tc';

/** A buffer of f16 values (each rounded to nearest even), padded to whole vec4s. */
export function uploadF16(rt: Runtime, label: string, values: ArrayLike<number>): GPUBuffer {
  const bits = new Uint16Array(Math.max(4, Math.ceil(values.length / 4) * 4));
  bits.set(f32ArrayToF16(values));
  return rt.upload('workspace', label, bits);
}

export interface MatmulF16Args {
  label: string;
  M: number;
  N: number;
  K: number;
  /** f16 operands (uploadF16), C f32. */
  a: Binding;
  b: Binding;
  c: Binding;
  transA?: boolean;
  transB?: boolean;
  alpha?: number;
  accumulate?: boolean;
  /** Split-K partials (S·M·N f32, a buffer of its own): thin grids split over K when given. */
  workspace?: Binding;
  /** Force a kernel (tests and benchmarks): 'f16-simt', or 'f16-tensor-core' with `spec`. */
  path?: Exclude<F16Path, 'fp32'>;
  spec?: F16TcSpec;
  /** Force the slice count (1: one pass). Default: chooseF16SplitK when a workspace is given. */
  split?: number;
  /**
   * 'f32': the kernel's twin over f32 storage holding f16 values, runnable without shader-f16 (how CI
   * tests every index and bound of the generated code): the SIMT kernel, or with path
   * 'f16-tensor-core' and a spec the tensor-core kernel with emulated subgroup matrices. Default 'f16'.
   */
  elem?: 'f16' | 'f32';
  /** The low-rank epilogue (./epilogue.ts; the fp32 GEMM's `lowRank`): + scale·Uᵀ·op(V), f32 U and V. One pass only. */
  lowRank?: LowRank;
}

export interface BuiltMatmulF16 {
  /** The GEMM, then for split-K the sum of its slices: run in this order. */
  dispatches: Dispatch[];
  uniforms: GPUBuffer[];
  path: Exclude<F16Path, 'fp32'>;
  /** The tensor-core layout used, or 'simt'. */
  kernel: string;
  parts: number;
}

function checkArgs(a: MatmulF16Args): GemmForm {
  for (const [n, v] of [['M', a.M], ['N', a.N], ['K', a.K]] as const) {
    if (!Number.isInteger(v) || v < 1) throw new Error(`${a.label}: ${n} must be an integer ≥ 1, got ${v}`);
  }
  const form = formOf(!!a.transA, !!a.transB);
  if (!form) throw new Error(`${a.label}: both operands transposed is not a form the f16 GEMM runs`);
  const e = a.elem === 'f32' ? 4 : 2;
  for (const [n, b, bytes] of [['a', a.a, a.M * a.K * e], ['b', a.b, a.K * a.N * e], ['c', a.c, a.M * a.N * 4]] as const) {
    if (bindingBytes(b) < bytes) throw new Error(`${a.label}: binding ${n} has ${bindingBytes(b)} bytes, needs ${bytes}`);
  }
  if (a.workspace) {
    const ws = asSlice(a.workspace).buffer;
    if ([a.a, a.b, a.c].some((b) => asSlice(b).buffer === ws)) throw new Error(`${a.label}: the split-K workspace must be a buffer of its own`);
  }
  const lr = a.lowRank;
  if (lr) {
    if (!Number.isInteger(lr.rank) || lr.rank < 1 || lr.rank > MAX_LOW_RANK) throw new Error(`${a.label}: lowRank.rank must be an integer in 1..${MAX_LOW_RANK}, got ${lr.rank}`);
    if (!Number.isFinite(lr.scale)) throw new Error(`${a.label}: lowRank.scale must be a finite number, got ${lr.scale}`);
    if (a.workspace || (a.split ?? 1) > 1) throw new Error(`${a.label}: a low-rank epilogue runs in one pass: no split-K`);
    for (const [n, b, elems] of [['lowRank.u', lr.u, lr.rank * a.M], ['lowRank.v', lr.v, lr.rank * a.N]] as const) {
      if (bindingBytes(b) < elems * 4) throw new Error(`${a.label}: binding ${n} has ${bindingBytes(b)} bytes, needs ${elems * 4}`);
      if (asSlice(b).buffer === asSlice(a.c).buffer) throw new Error(`${a.label}: ${n} must be a different buffer from c`);
    }
  }
  return form;
}

/** The kernel a GEMM runs on this runtime (fp32: no f16 GEMM here, keep the fp32 one). */
export function f16PathFor(rt: Runtime, transA: boolean, transB: boolean, shape: { M: number; N: number; K: number }): F16Path {
  const form = formOf(transA, transB);
  if (!form) return 'fp32';
  return f16KernelFor({ shaderF16: rt.gpu.features.shaderF16, tensorCoreForm: !!f16TensorCoreSpecFor(rt, form, shape), form, shape });
}

interface ResolvedF16 {
  form: GemmForm;
  path: Exclude<F16Path, 'fp32'>;
  tc?: F16TcSpec;
  vec: { a: boolean; b: boolean };
  code: string;
}

/**
 * The spec without its direct epilogue where the grid has no whole block (the direct store never runs
 * there). A subgroupMatrixStore to C makes Dawn require C's binding to hold one result tile (16×16 f32:
 * 1024 bytes), which a small output (1×7) has not; the scratch epilogue writes C element by element.
 */
export function f16TcSpecForOutput(s: F16TcSpec, shape: { M: number; N: number }): F16TcSpec {
  return s.direct && (shape.M < f16TcBlockM(s) || shape.N < f16TcBlockN(s)) ? { ...s, direct: false } : s;
}

/** Whether a tensor-core GEMM stores whole tiles directly (the kernel's P.direct), which is also where its low-rank term runs on the tensor cores. */
function directStores(a: { N: number; alpha?: number; lowRank: boolean }, tc: F16TcSpec | undefined): boolean {
  return (a.alpha ?? 1) === 1 && a.N % 4 === 0 && (!a.lowRank || (!!tc && f16TcLowRankStaging(tc).fits));
}

/** The kernel and WGSL one GEMM runs (throws where it has none). */
function resolveF16(rt: Runtime, a: MatmulF16Args): ResolvedF16 {
  const form = checkArgs(a);
  const vec = vec4Operands(form, a);
  const lowRank = a.lowRank && { rank: a.lowRank.rank, transV: !!a.lowRank.transV };
  if (a.elem === 'f32') {
    if (a.path !== 'f16-tensor-core') return { form, path: 'f16-simt', vec, code: simtF16Code({ form, vecA: vec.a, vecB: vec.b, elem: 'f32', lowRank }) };
    // The tensor-core kernel with emulated matrices (tests without subgroup matrices): a spec is required.
    if (!a.spec) throw new Error(`${a.label}: the emulated tensor-core kernel needs a spec`);
    if (!vec.a || !vec.b) throw new Error(`${a.label}: the tensor-core f16 GEMM needs the operands' rows in whole vec4s`);
    if (a.spec.transA !== !!a.transA || a.spec.transB !== !!a.transB) throw new Error(`${a.label}: spec ${f16TcLabel(a.spec)} is for another form`);
    const spec = f16TcSpecForOutput(a.spec, a);
    return { form, path: 'f16-tensor-core', tc: spec, vec, code: f16TcCode(spec, { emulate: true, lowRank }) };
  }
  const path = a.path ?? f16PathFor(rt, !!a.transA, !!a.transB, a);
  if (path === 'fp32') throw new Error(`${a.label}: this device has no shader-f16: use the fp32 GEMM`);
  if (path === 'f16-simt') return { form, path, vec, code: simtF16Code({ form, vecA: vec.a, vecB: vec.b, lowRank }) };
  const chosen = a.spec ?? f16TensorCoreSpecFor(rt, form, a);
  const tc = chosen && f16TcSpecForOutput(chosen, a);
  if (!tc) throw new Error(`${a.label}: no tensor-core layout for ${form} on this device`);
  if (!vec.a || !vec.b) throw new Error(`${a.label}: the tensor-core f16 GEMM needs the operands' rows in whole vec4s`);
  if (tc.transA !== !!a.transA || tc.transB !== !!a.transB) throw new Error(`${a.label}: spec ${f16TcLabel(tc)} is for another form`);
  const err = f16TcSpecError(tc, rt.device.limits.maxComputeWorkgroupStorageSize, rt.device.limits.maxComputeInvocationsPerWorkgroup);
  if (err) throw new Error(`${a.label}: ${err}`);
  return { form, path, tc, vec, code: f16TcCode(tc, { lowRank }) };
}

/** Builds the f16 GEMM's dispatches (free `uniforms` with rt.mem.free when they are dropped). */
export function buildMatmulF16(rt: Runtime, a: MatmulF16Args): BuiltMatmulF16 {
  const { form, path, tc, vec, code } = resolveF16(rt, a);
  const BM = tc ? f16TcBlockM(tc) : SIMT_F16.BM;
  const BN = tc ? f16TcBlockN(tc) : SIMT_F16.BN;
  const BK = tc ? tc.BK : SIMT_F16.BK;
  const threads = tc ? f16TcThreads(tc) : SIMT_F16.threads;
  const wsBytes = a.workspace ? bindingBytes(a.workspace) : 0;
  const S = a.split ?? (a.workspace ? chooseF16SplitK({ M: a.M, N: a.N, K: a.K, BM, BN, BK, threads }, wsBytes) : 1);
  const { kChunk, parts } = f16SplitPlan(a, BK, S);
  if (parts > 1 && (!a.workspace || wsBytes < f16SplitWorkspaceBytes(a, parts))) {
    throw new Error(`${a.label}: split-K of ${parts} needs a workspace of ${f16SplitWorkspaceBytes(a, parts)} bytes`);
  }
  const split = parts > 1;
  const alpha = split ? 1 : a.alpha ?? 1;
  const accumulate = !split && !!a.accumulate;
  const u = new Uniforms().u32(a.M).u32(a.N).u32(a.K).f32(alpha).u32(accumulate ? 1 : 0).u32(split ? kChunk : a.K)
    // Direct tile stores (accumulate by starting from C's tiles): alpha 1, C's rows 16-byte aligned (N a multiple of 4);
    // with a low-rank term only where it runs on the tensor cores (the kernel's tcLr), not through lowRank().
    .u32(directStores({ N: a.N, alpha, lowRank: !!a.lowRank }, tc) ? 1 : 0);
  // The last word is padding, or the low-rank epilogue's scale (./epilogue.ts bitcasts it).
  if (a.lowRank) u.f32(a.lowRank.scale);
  else u.u32(0);
  const ub = rt.uniform(`${a.label}.f16`, u);
  const uniforms = [ub];
  const kernel = tc ? f16TcLabel(tc) : `simt ${form} ${vec.a ? 'v' : 's'}${vec.b ? 'v' : 's'}`;
  const dispatches: Dispatch[] = [rt.kernel({
    label: `${a.label}[f16 ${kernel}${split ? ` split-K ${parts}` : ''}${a.lowRank ? ` +lr${a.lowRank.rank}` : ''}]`,
    code,
    bindings: [a.a, a.b, split ? a.workspace! : a.c, ub, ...(a.lowRank ? [a.lowRank.u, a.lowRank.v] : [])],
    workgroups: [Math.ceil(a.N / BN), Math.ceil(a.M / BM), parts],
  })];
  if (split) {
    const count = a.M * a.N;
    const ru = rt.uniform(`${a.label}.f16.splitk`, new Uniforms().u32(count).u32(parts).f32(a.alpha ?? 1).u32(a.accumulate ? 1 : 0));
    uniforms.push(ru);
    dispatches.push(rt.kernel({ label: `${a.label}[f16 split-K reduce ${parts}]`, code: splitKSrc, bindings: [a.workspace!, a.c, ru], workgroups: grid2d(rt, Math.ceil(count / 256)) }));
  }
  return { dispatches, uniforms, path, kernel, parts };
}

// ---- checking a kernel on the device ---------------------------------------------------------------

export interface F16GemmCase {
  M: number;
  N: number;
  K: number;
  transA: boolean;
  transB: boolean;
  alpha?: number;
  accumulate?: boolean;
  split?: number;
  /** A low-rank term (random U [rank, M] and V in ±1): + scale·Uᵀ·op(V). */
  lowRank?: { rank: number; transV: boolean; scale: number };
}

export interface F16GemmCheck extends F16GemmComparison {
  error?: string;
}

/**
 * Runs one GEMM on seeded f16 data (values in ±1, C0 for accumulate) and compares with
 * matmulF16Ref within f16GemmTolerance. Compile and validation errors come back as `error`.
 */
export async function checkMatmulF16(rt: Runtime, c: F16GemmCase, o: {
  path?: Exclude<F16Path, 'fp32'>; spec?: F16TcSpec; seed?: number; elem?: 'f16' | 'f32';
  /** Compare this many outputs (spread over C, corners included) instead of all: big shapes. */
  samples?: number;
} = {}): Promise<F16GemmCheck> {
  const rng = new Rng(o.seed ?? c.M * 7 + c.N * 13 + c.K);
  const A = rng.uniformArray(c.M * c.K);
  const B = rng.uniformArray(c.K * c.N);
  const c0 = c.accumulate ? rng.uniformArray(c.M * c.N) : undefined;
  const lr = c.lowRank && { ...c.lowRank, u: rng.uniformArray(c.lowRank.rank * c.M), v: rng.uniformArray(c.lowRank.rank * c.N) };
  const bufs: GPUBuffer[] = [];
  const fail = (error: string): F16GemmCheck => ({ ok: false, maxAbsErr: NaN, worstRatio: NaN, bad: c.M * c.N, error });
  try {
    // The f32 twin reads the same f16 values from f32 storage (padded to whole vec4s likewise).
    const up = (label: string, x: Float32Array) => (o.elem === 'f32'
      ? rt.upload('workspace', label, Float32Array.from({ length: Math.max(4, Math.ceil(x.length / 4) * 4) }, (_, i) => (i < x.length ? roundF16(x[i]) : 0)))
      : uploadF16(rt, label, x));
    const a = up('f16.check.a', A);
    const b = up('f16.check.b', B);
    const out = rt.upload('workspace', 'f16.check.c', c0 ?? new Float32Array(c.M * c.N).fill(NaN));
    bufs.push(a, b, out);
    const parts = c.split ?? 1;
    const ws = parts > 1 ? rt.createBuffer('workspace', 'f16.check.ws', parts * c.M * c.N * 4) : undefined;
    const lrBufs = lr && [rt.upload('workspace', 'f16.check.u', lr.u), rt.upload('workspace', 'f16.check.v', lr.v)];
    bufs.push(...(ws ? [ws] : []), ...(lrBufs ?? []));
    const args: MatmulF16Args = {
      label: 'f16.check', ...c, a, b, c: out, path: o.path, spec: o.spec, elem: o.elem, split: parts, workspace: ws,
      lowRank: lr && lrBufs && { u: lrBufs[0], v: lrBufs[1], rank: lr.rank, transV: lr.transV, scale: lr.scale },
    };
    const { code, tc } = resolveF16(rt, args);
    // A layout this device rejects is expected while probing: keep its error out of the console.
    const errors = await wgslErrors(rt.device, 'f16.check', code, true);
    if (errors.length) return fail(errors.join('; '));
    const built = await rt.checked('f16.check', () => buildMatmulF16(rt, args));
    bufs.push(...built.uniforms);
    rt.device.pushErrorScope('validation');
    rt.run(built.dispatches);
    const err = await rt.device.popErrorScope();
    if (err) return fail(err.message);
    const got = new Float32Array(await rt.read(out, 0, c.M * c.N * 4));
    const refOpts = { transA: c.transA, transB: c.transB, alpha: c.alpha, c0 };
    if (o.samples && o.samples < c.M * c.N) {
      const last = c.M * c.N - 1;
      const at = Uint32Array.from({ length: o.samples }, (_, i) => (i < 2 ? i * last : rng.int(last + 1)));
      return compareF16Gemm(Float32Array.from(at, (i) => got[i]), matmulF16RefAt(A, B, c.M, c.N, c.K, at, refOpts), c.K);
    }
    const ref = matmulF16Ref(A, B, c.M, c.N, c.K, refOpts);
    if (!lr) return compareF16Gemm(got, ref, c.K);
    const t = lowRankRef(lr.u, lr.v, c.M, c.N, lr.rank, { transV: lr.transV, scale: lr.scale, tensorCores: !!tc && directStores({ ...c, lowRank: true }, tc) });
    return compareF16Gemm(got, { c: ref.c.map((x, i) => x + t.c[i]), absSum: ref.absSum.map((x, i) => x + t.absSum[i]) }, c.K + lr.rank);
  } catch (e) {
    return fail((e as Error).message);
  } finally {
    bufs.forEach((x) => rt.mem.free(x));
  }
}

/**
 * The cases a tensor-core spec must pass: partial blocks in M and N and a partial last K step (the
 * dimensions a form leaves free of the vec4 rule made odd), whole blocks (the direct store), alpha
 * with accumulate, and split over K in two slices.
 */
export function f16TcCheckCases(s: F16TcSpec): { name: string; c: F16GemmCase }[] {
  const BM = f16TcBlockM(s);
  const BN = f16TcBlockN(s);
  const t = { transA: s.transA, transB: s.transB };
  const odd = { ...t, M: BM + (s.transA ? 4 : 5), N: BN + (s.transB ? 3 : 4), K: 3 * s.BK + (s.transA ? 5 : 4) };
  return [
    { name: 'partial', c: odd },
    { name: 'whole', c: { ...t, M: 2 * BM, N: BN, K: 2 * s.BK } },
    { name: 'alpha+accumulate', c: { ...odd, alpha: 0.5, accumulate: true } },
    { name: 'whole+accumulate', c: { ...t, M: 2 * BM, N: BN, K: 2 * s.BK, accumulate: true } },
    { name: 'split-K', c: { ...odd, split: 2 } },
  ];
}

/**
 * The cases of a spec's low-rank epilogue (LoRA's term in the forward NT, V [N, r], and the dX NN, V [r, N];
 * dW never takes one): whole blocks accumulating, where the term runs on the tensor cores, and partial blocks
 * of ranks past one K pass (N a multiple of 4 in NN: tensor cores and the scratch store; N odd in NT: lowRank()).
 */
export function f16TcLowRankCheckCases(s: F16TcSpec): { name: string; c: F16GemmCase }[] {
  const form = formOf(s.transA, s.transB);
  if (form !== 'NT' && form !== 'NN') return [];
  const t = { transA: s.transA, transB: s.transB };
  const transV = form === 'NT';
  const BM = f16TcBlockM(s);
  const BN = f16TcBlockN(s);
  return [
    { name: 'whole+lowRank', c: { ...t, M: 2 * BM, N: BN, K: 2 * s.BK, accumulate: true, lowRank: { rank: 16, transV, scale: 0.5 } } },
    { name: 'partial+lowRank', c: { ...t, M: BM + 5, N: BN + (transV ? 3 : 4), K: s.BK + 4, lowRank: { rank: s.cfg.K + 4, transV, scale: -2 } } },
  ];
}

// ---- choosing the path on a device -------------------------------------------------------------------

const enabled = new WeakMap<Runtime, Partial<Record<GemmForm, F16TcSpec>>>();

/** The tensor-core spec verified for a form on this runtime (enableF16TensorCores), if any. */
export function f16TensorCoreSpec(rt: Runtime, form: GemmForm): F16TcSpec | undefined {
  return enabled.get(rt)?.[form];
}

/**
 * The spec for one GEMM: the layout tuned for it on this device (tune/f16-gemm.ts) once verified on
 * this runtime, else its measured layout where one passed the device check, else its form's. The
 * source is noted for the run's tuning status (tune/store.ts, family 'f16gemm').
 */
export function f16TensorCoreSpecFor(rt: Runtime, form: GemmForm, shape: GemmShape): F16TcSpec | undefined {
  const key = f16ShapeKey(form, shape);
  const base = f16TensorCoreSpec(rt, form);
  if (!base) return undefined;
  const tuned = tunedF16Spec(rt, form, shape);
  const table = shapeSpecs.get(rt)?.get(key);
  noteChoice(rt.device, 'f16gemm', key, tuned ? 'tuned' : table ? 'table' : 'heuristic');
  return tuned ?? table ?? base;
}

/** Labels of the tensor-core specs that passed checkF16Tc on a runtime (only those serve a GEMM). */
const verified = new WeakMap<Runtime, Set<string>>();
/** Of those, the ones whose low-rank cases passed too (f16TcLowRankCheckCases). */
const verifiedLowRank = new WeakMap<Runtime, Set<string>>();

/**
 * Whether a GEMM of this form and shape runs on this device's tensor cores with its low-rank term
 * multiplied there too (alpha 1, N a multiple of 4, the staging fits, the spec's low-rank cases passed):
 * where LoRA's terms ride in the f16 GEMM's epilogue by default (model/linear-gemms.ts lowRankFits).
 */
export function f16LowRankOnTensorCores(rt: Runtime, form: GemmForm, shape: GemmShape): boolean {
  if (f16PathFor(rt, form === 'TN', form === 'NT', shape) !== 'f16-tensor-core') return false;
  const spec = f16TensorCoreSpecFor(rt, form, shape);
  return !!spec && !!verifiedLowRank.get(rt)?.has(f16TcLabel(spec)) && directStores({ N: shape.N, lowRank: true }, f16TcSpecForOutput(spec, shape));
}

/** The first tuned pick for this GEMM (plan.ts f16TcPick names) that passed its check on this runtime. */
function tunedF16Spec(rt: Runtime, form: GemmForm, shape: GemmShape): F16TcSpec | undefined {
  const ok = verified.get(rt);
  for (const pick of tunedPicks(rt.device, 'f16gemm', f16ShapeKey(form, shape)) ?? []) {
    const s = f16TcSpecOfPick(pick, subgroupSize(rt));
    if (s && ok?.has(f16TcLabel(s)) && formOf(s.transA, s.transB) === form) return s;
  }
  return undefined;
}

/**
 * Checks the tuned f16 layouts this device holds (a cache applied after enableF16TensorCores, or
 * picks from an earlier session) that this runtime has not checked yet, so those that pass serve
 * their GEMMs. Returns the labels checked and whether each passed.
 */
export async function verifyTunedF16Layouts(rt: Runtime): Promise<F16TcTried[]> {
  const out: F16TcTried[] = [];
  if (!rt.gpu.features.shaderF16 || !rt.gpu.features.subgroupMatrix) return out;
  const limits = rt.device.limits;
  const done = new Set([...(verified.get(rt) ?? [])]);
  for (const picks of Object.values(tunedEntries(rt.device, 'f16gemm'))) {
    for (const pick of picks) {
      const s = f16TcSpecOfPick(pick, subgroupSize(rt));
      const label = s ? f16TcLabel(s) : pick;
      if (done.has(label)) continue;
      done.add(label);
      if (!s || f16TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup)) {
        out.push({ label, ok: false, failed: 'not a layout this build and device can run' });
        continue;
      }
      out.push(await checkF16Tc(rt, s));
    }
  }
  return out;
}

const shapeSpecs = new WeakMap<Runtime, Map<string, F16TcSpec>>();

/** Turns the path off again (benchmarks time both on one runtime). */
export function disableF16TensorCores(rt: Runtime): void {
  enabled.delete(rt);
  shapeSpecs.delete(rt);
}

/** Checks this adapter's measured per-shape layouts (forms with a verified spec only); the passing ones serve their shapes. */
async function enableMeasuredShapes(rt: Runtime, cfgs: F16TcSpec['cfg'][], out: F16TcProbe, tables = MEASURED_F16TC_LAYOUTS): Promise<void> {
  const specs = new Map<string, F16TcSpec>();
  const checked = new Map<string, boolean>();
  const limits = rt.device.limits;
  for (const t of tables) {
    if (!adapterMatches(rt.gpu, t.match)) continue;
    for (const [key, e] of Object.entries(t.table)) {
      const form = key.slice(-2) as GemmForm;
      const base = out.chosen[form];
      const cfg = cfgs.find((c) => c.M === e.cfg[0] && c.N === e.cfg[1] && c.K === e.cfg[2]);
      if (!base || !cfg || !GEMM_FORMS.includes(form)) continue;
      // The form and subgroup size of the verified spec, the layout the table names (none of the base's optional fields).
      const s: F16TcSpec = { transA: base.transA, transB: base.transB, sgSize: base.sgSize, cfg: { M: cfg.M, N: cfg.N, K: cfg.K }, ...e.layout };
      if (f16TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup)) continue;
      const label = f16TcLabel(s);
      if (!checked.has(label)) {
        const r = await checkF16Tc(rt, s);
        checked.set(label, r.ok);
        out.tried.push(r);
      }
      if (checked.get(label)) specs.set(key, s);
    }
  }
  shapeSpecs.set(rt, specs);
  out.shapeLayouts = Object.fromEntries([...specs].map(([k, v]) => [k, f16TcLabel(v)]));
}

export interface F16TcTried {
  label: string;
  ok: boolean;
  /** The first failing case and what it found. */
  failed?: string;
  /** A spec that passed, but not its low-rank cases (f16TcLowRankCheckCases): its LoRA terms stay GEMMs of their own. */
  lowRankFailed?: string;
}

export interface F16TcProbe {
  /** shader-f16, subgroup matrices, and an f16 → f32 configuration. */
  present: boolean;
  chosen: Partial<Record<GemmForm, F16TcSpec>>;
  tried: F16TcTried[];
  /** The GEMMs that run a measured layout of their own (MEASURED_F16TC_LAYOUTS), with it. */
  shapeLayouts?: Record<string, string>;
}

/**
 * Runs every case of f16TcCheckCases on a spec; the first failure stops it. `elem: 'f32'`: the emulated kernel.
 * A spec that passes then runs its low-rank cases: a failure there only keeps LoRA's terms out of its epilogue.
 */
export async function checkF16Tc(rt: Runtime, s: F16TcSpec, elem?: 'f16' | 'f32'): Promise<F16TcTried> {
  const first = async (cases: { name: string; c: F16GemmCase }[]) => {
    for (const { name, c } of cases) {
      const r = await checkMatmulF16(rt, c, { path: 'f16-tensor-core', spec: s, elem });
      if (!r.ok) return `${name}: ${r.error ?? `${r.bad} elements off, max error ${r.maxAbsErr}, ${r.worstRatio.toPrecision(3)}× tolerance`}`;
    }
    return undefined;
  };
  const failed = await first(f16TcCheckCases(s));
  if (failed) return { label: f16TcLabel(s), ok: false, failed };
  const lowRankFailed = await first(f16TcLowRankCheckCases(s));
  if (elem !== 'f32') {
    const add = (m: WeakMap<Runtime, Set<string>>) => {
      let ok = m.get(rt);
      if (!ok) m.set(rt, (ok = new Set()));
      ok.add(f16TcLabel(s));
    };
    add(verified);
    if (!lowRankFailed) add(verifiedLowRank);
  }
  return { label: f16TcLabel(s), ok: true, ...(lowRankFailed ? { lowRankFailed } : {}) };
}

/**
 * For each GEMM form, checks the candidates (every f16 → f32 configuration with each layout,
 * f16TcCandidates's order) against the reference and makes buildMatmulF16 use the first that
 * passes every case. A form none passes keeps the SIMT kernel; a device without shader-f16 or
 * subgroup matrices changes nothing.
 */
export async function enableF16TensorCores(rt: Runtime, layouts: F16TcLayout[] = F16_TC_LAYOUTS): Promise<F16TcProbe> {
  const cfgs = rt.gpu.features.shaderF16 ? f16ConfigsOf(subgroupMatrixConfigs(rt)) : [];
  const out: F16TcProbe = { present: cfgs.length > 0, chosen: {}, tried: [] };
  const limits = rt.device.limits;
  const valid = (s: F16TcSpec) => !f16TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup);
  const chosen: Partial<Record<GemmForm, F16TcSpec>> = {};
  for (const form of GEMM_FORMS) {
    for (const s of f16TcCandidates(form, cfgs, layouts, subgroupSize(rt), valid)) {
      const r = await checkF16Tc(rt, s);
      out.tried.push(r);
      if (r.ok) {
        chosen[form] = s;
        break;
      }
    }
  }
  enabled.set(rt, chosen);
  out.chosen = chosen;
  await enableMeasuredShapes(rt, cfgs, out);
  if (cfgs.length) out.tried.push(...await verifyTunedF16Layouts(rt));
  return out;
}
