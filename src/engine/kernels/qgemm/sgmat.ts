/**
 * GEMM on subgroup matrices (Dawn's `chromium-experimental-subgroup-matrix`: tensor-core tiles
 * from WGSL; Vulkan cooperative matrices underneath). Present only where the adapter exposes it,
 * which Dawn does behind `enable-dawn-features=allow_unsafe_apis`; everything here checks first and
 * reports "absent" otherwise (SwiftShader, browsers without the flag).
 *
 * The adapter lists the configurations it can run (component type, result type, M×N×K tile).
 * f16 ones need `shader-f16`, so only f32/i32/u32 and the 8-bit i8/u8 configurations are used.
 * 8-bit matrices live packed four to a 32-bit word (array<i32> / array<u32>).
 *
 *   C[M,N] = A[M,K] · op(B)[K,N],  A row-major; B row-major [K,N], or [N,K] when transB.
 *
 * Each subgroup accumulates tilesM × tilesN result tiles straight from global memory (the loads go
 * through L1; no workgroup staging yet), sgM × sgN subgroups per workgroup. Shapes must be
 * multiples of the workgroup block: a benchmark path, not yet a general kernel. Two details differ
 * between Dawn versions or are unspecified, and bench/sgmat-probe.ts finds them on the device: the
 * WGSL spelling of the load/store layout (a template argument `row_major`/`col_major` in newer
 * Dawn, a bool argument before), and for 8-bit types whether offsets and strides count elements or
 * 32-bit words.
 */
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { wgslErrors } from '../../gpu/pipelines';
import { Uniforms } from '../../gpu/runtime';

export type SgmatType = 'f32' | 'f16' | 'i32' | 'u32' | 'i8' | 'u8';

export interface SubgroupMatrixConfig {
  componentType: SgmatType;
  resultComponentType: SgmatType;
  M: number;
  N: number;
  K: number;
}

/** The adapter's subgroup-matrix configurations (empty when the feature is absent). */
export function subgroupMatrixConfigs(rt: Runtime): SubgroupMatrixConfig[] {
  if (!rt.gpu.features.subgroupMatrix) return [];
  return rt.gpu.subgroupMatrixConfigs.map((c) => ({ ...c, componentType: c.componentType as SgmatType, resultComponentType: c.resultComponentType as SgmatType }));
}

/** Invocations per subgroup: Dawn requires a subgroup-matrix workgroup's x to be a multiple of it. */
export function subgroupSize(rt: Runtime): number {
  return rt.gpu.subgroupMaxSize || 32;
}

export function configLabel(c: SubgroupMatrixConfig): string {
  return `${c.componentType}->${c.resultComponentType} ${c.M}x${c.N}x${c.K}`;
}

/** Configurations this module can run: no f16 (needs shader-f16, absent on the H200's Dawn). */
export function usableConfig(c: SubgroupMatrixConfig): boolean {
  return c.componentType !== 'f16' && c.resultComponentType !== 'f16';
}

export const isEightBit = (t: SgmatType) => t === 'i8' || t === 'u8';

/** WGSL storage element of a matrix component type (8-bit types are packed into 32-bit words). */
function storageType(t: SgmatType): string {
  return t === 'i8' ? 'i32' : t === 'u8' ? 'u32' : t;
}

/** 'template': subgroupMatrixLoad<T, row_major>(p, off, stride); 'bool': subgroupMatrixLoad<T>(p, off, colMajor, stride). */
export type SgmatSyntax = 'template' | 'bool';

export interface SgmatKernel {
  cfg: SubgroupMatrixConfig;
  syntax: SgmatSyntax;
  /** 8-bit types: offsets and strides in 32-bit words (4) or in elements (1). Always 1 otherwise. */
  unitDiv: 1 | 4;
  transB: boolean;
  tilesM: number;
  tilesN: number;
  sgM: number;
  sgN: number;
  /** Invocations per subgroup (the adapter's subgroupMaxSize: Dawn requires workgroup x to be a multiple). */
  sgSize: number;
}

export const blockM = (k: SgmatKernel) => k.cfg.M * k.tilesM * k.sgM;
export const blockN = (k: SgmatKernel) => k.cfg.N * k.tilesN * k.sgN;

export function sgmatLoad(k: Pick<SgmatKernel, 'syntax'>, type: string, ptr: string, off: string, colMajor: boolean, stride: string): string {
  return k.syntax === 'template'
    ? `subgroupMatrixLoad<${type}, ${colMajor ? 'col_major' : 'row_major'}>(${ptr}, ${off}, ${stride})`
    : `subgroupMatrixLoad<${type}>(${ptr}, ${off}, ${colMajor}, ${stride})`;
}

export function sgmatStore(k: Pick<SgmatKernel, 'syntax'>, ptr: string, off: string, value: string, stride: string): string {
  return k.syntax === 'template'
    ? `subgroupMatrixStore<row_major>(${ptr}, ${off}, ${value}, ${stride});`
    : `subgroupMatrixStore(${ptr}, ${off}, ${value}, false, ${stride});`;
}

/** The WGSL of one kernel: every tile's load, multiply-accumulate and store written out (no arrays of matrices). */
export function sgmatCode(k: SgmatKernel): string {
  const { cfg } = k;
  const S = storageType(cfg.componentType);
  const R = storageType(cfg.resultComponentType);
  const u = (e: string) => (k.unitDiv === 1 ? e : `(${e}) / ${k.unitDiv}u`);
  const lines: string[] = [];
  const tiles: [number, number][] = [];
  for (let i = 0; i < k.tilesM; i++) for (let j = 0; j < k.tilesN; j++) tiles.push([i, j]);
  for (const [i, j] of tiles) lines.push(`  var c${i}_${j} = CT();`);
  lines.push(`  for (var k = 0u; k < P.K; k += ${cfg.K}u) {`);
  for (let i = 0; i < k.tilesM; i++) {
    lines.push(`    let a${i} = ${sgmatLoad(k, 'LT', '&A', u(`(m0 + ${i * cfg.M}u) * P.K + k`), false, u('P.K'))};`);
  }
  for (let j = 0; j < k.tilesN; j++) {
    const off = k.transB ? `(n0 + ${j * cfg.N}u) * P.K + k` : `k * P.N + n0 + ${j * cfg.N}u`;
    lines.push(`    let b${j} = ${sgmatLoad(k, 'RT', '&B', u(off), k.transB, u(k.transB ? 'P.K' : 'P.N'))};`);
  }
  for (const [i, j] of tiles) lines.push(`    c${i}_${j} = subgroupMatrixMultiplyAccumulate(a${i}, b${j}, c${i}_${j});`);
  lines.push('  }');
  for (const [i, j] of tiles) lines.push(`  ${sgmatStore(k, '&C', `(m0 + ${i * cfg.M}u) * P.N + n0 + ${j * cfg.N}u`, `c${i}_${j}`, 'P.N')}`);
  return `enable chromium_experimental_subgroup_matrix;
alias LT = subgroup_matrix_left<${cfg.componentType}, ${cfg.K}, ${cfg.M}>;
alias RT = subgroup_matrix_right<${cfg.componentType}, ${cfg.N}, ${cfg.K}>;
alias CT = subgroup_matrix_result<${cfg.resultComponentType}, ${cfg.N}, ${cfg.M}>;
@group(0) @binding(0) var<storage, read> A: array<${S}>;
@group(0) @binding(1) var<storage, read> B: array<${S}>;
@group(0) @binding(2) var<storage, read_write> C: array<${R}>;
struct Params { M: u32, N: u32, K: u32, _p: u32 }
@group(0) @binding(3) var<uniform> P: Params;

// Subgroup s of the workgroup owns result tiles rows m0.., columns n0.. (consecutive invocations
// form a subgroup on a 1-D workgroup).
@compute @workgroup_size(${k.sgSize * k.sgM * k.sgN})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let s = lid / ${k.sgSize}u;
  let m0 = wid.y * ${blockM(k)}u + (s / ${k.sgN}u) * ${k.tilesM * cfg.M}u;
  let n0 = wid.x * ${blockN(k)}u + (s % ${k.sgN}u) * ${k.tilesN * cfg.N}u;
${lines.join('\n')}
}
`;
}

export interface SgmatArgs {
  label: string;
  M: number;
  N: number;
  K: number;
  a: Binding;
  b: Binding;
  c: Binding;
}

/** Shapes the kernel runs: whole workgroup blocks, K a multiple of the tile depth (and of 4 for 8-bit packing). */
export function sgmatShapeError(k: SgmatKernel, s: { M: number; N: number; K: number }): string | null {
  if (s.M % blockM(k) || s.N % blockN(k)) return `M, N must be multiples of ${blockM(k)}, ${blockN(k)}`;
  if (s.K % k.cfg.K || (isEightBit(k.cfg.componentType) && s.K % 4)) return `K must be a multiple of ${k.cfg.K}`;
  return null;
}

export function buildSgmat(rt: Runtime, k: SgmatKernel, args: SgmatArgs): { dispatch: Dispatch; uniform: GPUBuffer } {
  const err = sgmatShapeError(k, args);
  if (err) throw new Error(`${args.label}: ${err}`);
  const uniform = rt.uniform(args.label, new Uniforms().u32(args.M).u32(args.N).u32(args.K).u32(0));
  const dispatch = rt.kernel({
    label: `${args.label}[sgmat ${configLabel(k.cfg)}]`,
    code: sgmatCode(k),
    bindings: [args.a, args.b, args.c, uniform],
    workgroups: [args.N / blockN(k), args.M / blockM(k)],
  });
  return { dispatch, uniform };
}

// ---- probe -----------------------------------------------------------------------------------

/** Test operands in a config's component type: small values, exact in every result type. */
export function sgmatTestData(t: SgmatType, n: number, seed: number): { values: number[]; bytes: ArrayBuffer } {
  const values: number[] = [];
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const r = (s >>> 24) % 9; // 0..8
    values.push(t === 'u8' || t === 'u32' ? r : t === 'f32' ? (r - 4) / 4 : r - 4);
  }
  if (isEightBit(t)) {
    const bytes = new Uint8Array(Math.ceil(n / 4) * 4);
    values.forEach((v, i) => (bytes[i] = v & 0xff));
    return { values, bytes: bytes.buffer };
  }
  const arr = t === 'f32' ? Float32Array.from(values) : t === 'i32' ? Int32Array.from(values) : Uint32Array.from(values);
  return { values, bytes: arr.buffer as ArrayBuffer };
}

/** C = A·op(B) in float64 (exact for the small integers and quarter-steps of sgmatTestData). */
export function sgmatRef(a: number[], b: number[], M: number, N: number, K: number, transB: boolean): Float64Array {
  const c = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += a[m * K + k] * b[transB ? n * K + k : k * N + n];
      c[m * N + n] = s;
    }
  }
  return c;
}

export interface SgmatCheck {
  ok: boolean;
  maxAbsErr: number;
  error?: string;
}

/** Runs one kernel on a small shape against sgmatRef. Compile and validation errors come back as `error`. */
export async function checkSgmat(rt: Runtime, k: SgmatKernel, s: { M: number; N: number; K: number }): Promise<SgmatCheck> {
  const t = k.cfg.componentType;
  const A = sgmatTestData(t, s.M * s.K, 11);
  const B = sgmatTestData(t, s.K * s.N, 12);
  const bufs: GPUBuffer[] = [];
  try {
    // A spelling this Dawn rejects is expected while probing: keep its error out of the console.
    const errors = await wgslErrors(rt.device, 'sgmat.check', sgmatCode(k), true);
    if (errors.length) return { ok: false, maxAbsErr: NaN, error: errors.join('; ') };
    const a = rt.upload('workspace', 'sgmat.a', new Uint8Array(A.bytes));
    const b = rt.upload('workspace', 'sgmat.b', new Uint8Array(B.bytes));
    const c = rt.createBuffer('workspace', 'sgmat.c', s.M * s.N * 4);
    bufs.push(a, b, c);
    const built = await rt.checked('sgmat.check', () => buildSgmat(rt, k, { label: 'sgmat.check', ...s, a, b, c }));
    bufs.push(built.uniform);
    rt.device.pushErrorScope('validation');
    rt.run([built.dispatch]);
    const err = await rt.device.popErrorScope();
    if (err) return { ok: false, maxAbsErr: NaN, error: err.message };
    const raw = await rt.read(c, 0, s.M * s.N * 4);
    const R = k.cfg.resultComponentType;
    const got = R === 'f32' ? new Float32Array(raw) : R === 'u32' ? new Uint32Array(raw) : new Int32Array(raw);
    const want = sgmatRef(A.values, B.values, s.M, s.N, s.K, k.transB);
    let maxAbsErr = 0;
    for (let i = 0; i < want.length; i++) maxAbsErr = Math.max(maxAbsErr, Math.abs(got[i] - want[i]));
    return { ok: maxAbsErr <= (R === 'f32' ? 1e-3 : 0), maxAbsErr };
  } catch (e) {
    return { ok: false, maxAbsErr: NaN, error: (e as Error).message };
  } finally {
    bufs.forEach((x) => rt.mem.free(x));
  }
}

/**
 * The f16 → f32 kernels' matrix types LT, RT, CT: subgroup matrices, or, emulated (emulatedSgmatWgsl),
 * row-major f32 arrays of M×K, K×N and M×N.
 */
export function f16MatrixTypes(cfg: { M: number; N: number; K: number }, emulated: boolean): string {
  const { M, N, K } = cfg;
  return emulated
    ? `alias LT = array<f32, ${M * K}>; // emulated: row-major M × K, every lane holds all of it
alias RT = array<f32, ${K * N}>;
alias CT = array<f32, ${M * N}>;`
    : `alias LT = subgroup_matrix_left<f16, ${K}, ${M}>;
alias RT = subgroup_matrix_right<f16, ${N}, ${K}>;
alias CT = subgroup_matrix_result<f32, ${N}, ${M}>;`;
}

/**
 * Plain-WGSL stand-ins for the subgroup-matrix operations, for a kernel's `emulate` twin (f32 storage
 * on devices without subgroup matrices, e.g. CI's SwiftShader): element (r, c) of a row_major matrix
 * at off + r·stride + c, col_major at off + c·stride + r. `loads`: the [array, matrix type] pairs the
 * kernel loads (emuLoad<T>_<array>); `stores`: the f32 arrays it stores to (emuStore_<array>); emuMMA
 * multiplies. The kernel declares LT, RT and CT as row-major f32 arrays of M×K, K×N and M×N.
 */
export function emulatedSgmatWgsl(cfg: { M: number; N: number; K: number }, loads: [string, 'LT' | 'RT' | 'CT'][], stores: string[]): string {
  const { M, N, K } = cfg;
  const ld = (arr: string, T: string) => {
    const [R, C] = T === 'LT' ? [M, K] : T === 'RT' ? [K, N] : [M, N];
    return `fn emuLoad${T}_${arr}(off: u32, stride: u32, col: bool) -> ${T} {
  var m: ${T};
  for (var r = 0u; r < ${R}u; r++) { for (var c = 0u; c < ${C}u; c++) { m[r * ${C}u + c] = ${arr}[select(off + r * stride + c, off + c * stride + r, col)]; } }
  return m;
}`;
  };
  const st = (arr: string) => `fn emuStore_${arr}(off: u32, v: CT, stride: u32) {
  for (var r = 0u; r < ${M}u; r++) { for (var c = 0u; c < ${N}u; c++) { ${arr}[off + r * stride + c] = v[r * ${N}u + c]; } }
}`;
  return `${loads.map(([a, T]) => ld(a, T)).join('\n')}
fn emuMMA(a: LT, b: RT, acc: CT) -> CT {
  var o = acc;
  for (var i = 0u; i < ${M}u; i++) {
    for (var j = 0u; j < ${N}u; j++) {
      var s = o[i * ${N}u + j];
      for (var k = 0u; k < ${K}u; k++) { s = fma(a[i * ${K}u + k], b[k * ${N}u + j], s); }
      o[i * ${N}u + j] = s;
    }
  }
  return o;
}
${stores.map(st).join('\n')}
`;
}
