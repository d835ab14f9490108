/**
 * INT8 × INT8 GEMM on tensor cores: the qgemmI8 problem (C = diag(sx)·(QX·QWᵀ)·diag(sw), X [M, K]
 * and W [N, K] K-contiguous int8 rows packed four to a u32) computed with subgroup matrices
 * (Dawn's `chromium-experimental-subgroup-matrix`, Vulkan cooperative matrices underneath), when
 * the adapter has an i8 → i32 configuration. Dawn exposes the feature only with
 * `enable-dawn-features=allow_unsafe_apis`; browsers without the flag, SwiftShader and most GPUs
 * keep the dot4I8Packed kernel (src/engine/kernels/qgemm/qgemm.wgsl), which computes the same numbers.
 *
 * Bit-for-bit the same result as qgemmI8's dot4 kernel: both accumulate exactly in i32, then
 * f32(acc) · sx[m] · sw[n] in that order. enableI8TensorCores checks that on the device (against a
 * CPU reference) before the path is used, so a driver that miscomputes simply keeps dot4.
 *
 * Layout per workgroup (BM × BN outputs, sgM × sgN subgroups, each tilesM × tilesN result tiles of
 * the config's M × N): a BK-byte slice of the X and W row blocks is staged in workgroup memory
 * (rows padded by PAD bytes so the tensor-core loads of 16 consecutive rows spread over banks),
 * the next slice is fetched into registers while the current one is multiplied, and W's rows
 * stored k-contiguous are read as the right matrix in column-major order (that is Wᵀ, for free).
 * The epilogue stores each i32 tile through workgroup memory (subgroup matrices have no element
 * access) and scales it while writing C, or, for a K slice of a split GEMM (./qgemm-splitk.ts),
 * writes the raw i32 sums to the slice's part of the workspace.
 */
import { adapterMatches, SUBGROUP_MATRIX_FEATURE, subgroupMatrixConfigsOf } from '../../gpu/device';
import { noteChoice, tunedEntries, tunedPicks } from '../../tune/store';
import { I8_TC_LAYOUTS, type I8TcLayout, MEASURED_I8TC_LAYOUTS } from './tc-tables';
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { wgslErrors } from '../../gpu/pipelines';
import { Uniforms } from '../../gpu/runtime';
import { Rng } from '../../util/rng';
import { qgemmI8ExactRef } from './qgemm.ref';
import { checkI8Workspace, I8_MAX_K, type I8Slices, i8SplitPlan, i8SplitReduce } from './splitk';
import { sgmatLoad, sgmatStore, subgroupMatrixConfigs, subgroupSize, type SgmatSyntax, type SubgroupMatrixConfig } from './sgmat';

export interface I8TcSpec extends I8TcLayout {
  cfg: SubgroupMatrixConfig;
  syntax: SgmatSyntax;
  /** 8-bit offsets/strides counted in elements (1, the spec) or in 32-bit words (4, older Dawn). */
  unitDiv: 1 | 4;
  sgSize: number;
}

const epiOf = (s: I8TcSpec) => s.EPI ?? 1;

export const tcBlockM = (s: I8TcSpec) => s.cfg.M * s.tilesM * s.sgM;
export const tcBlockN = (s: I8TcSpec) => s.cfg.N * s.tilesN * s.sgN;
const threads = (s: I8TcSpec) => s.sgSize * s.sgM * s.sgN;

/** Why a spec cannot be built (null when it can): whole vec4 staging per thread, scratch space, shared memory. */
export function i8TcSpecError(s: I8TcSpec, maxWorkgroupBytes = 49152, maxThreads = 1024): string | null {
  const BM = tcBlockM(s);
  const BN = tcBlockN(s);
  if (s.BK % 16 || s.BK % s.cfg.K) return `BK=${s.BK} must be a multiple of 16 and of K=${s.cfg.K}`;
  if (s.PAD % 16) return `PAD=${s.PAD} must be a multiple of 16`;
  const T = threads(s);
  if (T > maxThreads) return `${T} threads per workgroup`;
  if (((BM * s.BK) / 16) % T || ((BN * s.BK) / 16) % T) return `the ${BM}x${s.BK} and ${BN}x${s.BK} byte tiles do not split into whole vec4s per thread`;
  const words = ((BM + BN) * (s.BK + s.PAD)) / 4;
  if (words * 4 > maxWorkgroupBytes) return `${words * 4} bytes of workgroup memory`;
  if (s.tilesN % epiOf(s)) return `EPI=${epiOf(s)} must divide tilesN=${s.tilesN}`;
  if (words < s.sgM * s.sgN * epiOf(s) * s.cfg.M * s.cfg.N) return 'epilogue scratch does not fit in the staging memory';
  return null;
}

/**
 * The WGSL of one spec (subgroup-matrix sizes must be constants, so the code is generated).
 * `parts`: one K slice per workgroup z (vec4s [z·KC, min(KV, (z+1)·KC))), raw i32 sums to PARTS [S, M, N].
 */
export function qgemmI8TcCode(s: I8TcSpec, accumulate = false, parts = false): string {
  const { cfg } = s;
  const BM = tcBlockM(s);
  const BN = tcBlockN(s);
  const T = threads(s);
  const SK = s.BK + s.PAD; // staged row stride in bytes (= i8 elements)
  const SKW = SK / 4;
  const BKV = s.BK / 16;
  const APT = (BM * BKV) / T; // vec4s per thread per step
  const BPT = (BN * BKV) / T;
  const u = (e: string) => (s.unitDiv === 1 ? e : `(${e}) / 4u`);
  // The K range this workgroup runs: all of it, or its slice.
  const [kb, ke] = parts ? ['kb', 'ke'] : ['0u', 'P.KV'];
  const tiles: [number, number][] = [];
  for (let i = 0; i < s.tilesM; i++) for (let j = 0; j < s.tilesN; j++) tiles.push([i, j]);
  const L: string[] = [];
  const B0 = BM * SKW; // W's rows follow X's in the one staging array
  const stage = (base: number, reg: string, per: number) => {
    for (let t = 0; t < per; t++) {
      L.push(`    { let l = lid + ${t * T}u; let o = ${base}u + (l / ${BKV}u) * ${SKW}u + (l % ${BKV}u) * 4u; let v = ${reg}[${t}];`);
      L.push(`      S[o] = bitcast<i32>(v.x); S[o + 1u] = bitcast<i32>(v.y); S[o + 2u] = bitcast<i32>(v.z); S[o + 3u] = bitcast<i32>(v.w); }`);
    }
  };
  const fetch = (reg: string, per: number, src: string, r0: string, lim: string, indent: string) => {
    for (let t = 0; t < per; t++) {
      L.push(`${indent}{ let l = lid + ${t * T}u; let r = ${r0} + l / ${BKV}u; let c = kv + l % ${BKV}u;`);
      L.push(`${indent}  ${reg}[${t}] = select(vec4<u32>(), ${src}[min(r, ${lim} - 1u) * P.KV + min(c, P.KV - 1u)], r < ${lim} && c < ${ke}); }`);
    }
  };
  for (const [i, j] of tiles) L.push(`  var c${i}_${j} = CT();`);
  L.push(`  var ra: array<vec4<u32>, ${APT}>;`, `  var rb: array<vec4<u32>, ${BPT}>;`);
  if (parts) L.push('  let kb = wid.z * P.KC;', '  let ke = min(P.KV, kb + P.KC);');
  L.push('  {', `    let kv = ${kb};`);
  fetch('ra', APT, 'XQ', 'm0', 'P.M', '    ');
  fetch('rb', BPT, 'WQ', 'n0', 'P.N', '    ');
  L.push('  }');
  L.push(`  for (var k0 = ${kb}; k0 < ${ke}; k0 += ${BKV}u) {`);
  stage(0, 'ra', APT);
  stage(B0, 'rb', BPT);
  L.push('    workgroupBarrier();');
  L.push(`    if (k0 + ${BKV}u < ${ke}) {`, `      let kv = k0 + ${BKV}u;`);
  fetch('ra', APT, 'XQ', 'm0', 'P.M', '      ');
  fetch('rb', BPT, 'WQ', 'n0', 'P.N', '      ');
  L.push('    }');
  for (let kk = 0; kk < s.BK; kk += cfg.K) {
    for (let i = 0; i < s.tilesM; i++) {
      L.push(`    let a${i}_${kk} = ${sgmatLoad(s, 'LT', '&S', u(`(am + ${i * cfg.M}u) * ${SK}u + ${kk}u`), false, u(`${SK}u`))};`);
    }
    for (let j = 0; j < s.tilesN; j++) {
      L.push(`    let b${j}_${kk} = ${sgmatLoad(s, 'RT', '&S', u(`${B0 * 4}u + (bn + ${j * cfg.N}u) * ${SK}u + ${kk}u`), true, u(`${SK}u`))};`);
    }
    for (const [i, j] of tiles) L.push(`    c${i}_${j} = subgroupMatrixMultiplyAccumulate(a${i}_${kk}, b${j}_${kk}, c${i}_${j});`);
  }
  L.push('    workgroupBarrier();', '  }');
  // Epilogue: a strip of EPI i32 tiles of one tile row per subgroup at a time through the staging
  // memory (done with it now), row-major M × EPI·N.
  const EPI = epiOf(s);
  const SN = EPI * cfg.N;
  const SMN = cfg.M * SN;
  // Accumulating: the strip's C values are loaded into registers before its tiles are stored (all
  // loads in flight at once, over the store and barrier), not one dependent load per element.
  const NPER = accumulate && !parts && SMN % s.sgSize === 0 ? SMN / s.sgSize : 0;
  // Element e of the strip of tile row i from tile j0: its row and column of C.
  const rowCol = (i: number, j0: number) => `let row = m0 + am + ${i * cfg.M}u + e / ${SN}u; let col = n0 + bn + ${j0 * cfg.N}u + e % ${SN}u;`;
  const at = (e: string, i: number, j0: number) => `let e = ${e}; ${rowCol(i, j0)}`;
  if (NPER) L.push(`  var pc: array<f32, ${NPER}>;`);
  for (let i = 0; i < s.tilesM; i++) {
    for (let j0 = 0; j0 < s.tilesN; j0 += EPI) {
      for (let t = 0; t < NPER; t++) {
        L.push(`  { ${at(`lane + ${t * s.sgSize}u`, i, j0)} pc[${t}] = select(0.0, C[min(row, P.M - 1u) * P.N + min(col, P.N - 1u)], row < P.M && col < P.N); }`);
      }
      for (let jj = 0; jj < EPI; jj++) L.push(`  ${sgmatStore(s, '&S', `sg * ${SMN}u + ${jj * cfg.N}u`, `c${i}_${j0 + jj}`, `${SN}u`)}`);
      L.push('  workgroupBarrier();');
      const y = `f32(S[sg * ${SMN}u + e]) * SX[row] * SW[col]`;
      if (NPER) {
        for (let t = 0; t < NPER; t++) L.push(`  { ${at(`lane + ${t * s.sgSize}u`, i, j0)} if (row < P.M && col < P.N) { C[row * P.N + col] = pc[${t}] + ${y} * P.one; } }`);
      } else {
        L.push(`  for (var e = lane; e < ${SMN}u; e += ${s.sgSize}u) {`);
        L.push(`    ${rowCol(i, j0)}`);
        if (parts) L.push(`    if (row < P.M && col < P.N) { PARTS[(wid.z * P.M + row) * P.N + col] = S[sg * ${SMN}u + e]; }`);
        else L.push(`    if (row < P.M && col < P.N) { C[row * P.N + col] = ${accumulate ? `C[row * P.N + col] + ${y} * P.one` : y}; }`);
        L.push('  }');
      }
      L.push('  workgroupBarrier();');
    }
  }
  // Subgroup-matrix offsets must be uniform, and WGSL's analysis counts only workgroup-uniform
  // values: with one subgroup per workgroup they are; with several, each subgroup's offsets are
  // uniform within it (lid / subgroup size), which the analysis cannot see, so its rule is turned off.
  const one = s.sgM * s.sgN === 1;
  const ids = one
    ? '  let sg = 0u;\n  let am = 0u;\n  let bn = 0u;'
    : `  let sg = lid / ${s.sgSize}u;
  let am = (sg / ${s.sgN}u) * ${s.tilesM * cfg.M}u; // this subgroup's rows within the block
  let bn = (sg % ${s.sgN}u) * ${s.tilesN * cfg.N}u; // and columns`;
  return `enable chromium_experimental_subgroup_matrix;
${one ? '' : 'diagnostic(off, chromium.subgroup_matrix_uniformity);\n'}// Generated by src/engine/kernels/qgemm/tc.ts: ${BM}x${BN} block, ${s.sgM}x${s.sgN} subgroups of ${s.tilesM}x${s.tilesN} ${cfg.M}x${cfg.N}x${cfg.K} tiles, BK ${s.BK} B.
alias LT = subgroup_matrix_left<i8, ${cfg.K}, ${cfg.M}>;
alias RT = subgroup_matrix_right<i8, ${cfg.N}, ${cfg.K}>;
alias CT = subgroup_matrix_result<i32, ${cfg.N}, ${cfg.M}>;
${parts ? `struct Params { M: u32, N: u32, KV: u32, KC: u32 } // KV = K / 16 (vec4s per row), KC vec4s per slice
@group(0) @binding(0) var<storage, read> XQ: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> WQ: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> PARTS: array<i32>;
@group(0) @binding(3) var<uniform> P: Params;` : `struct Params { M: u32, N: u32, KV: u32, one: f32 } // KV = K / 16 (vec4s per row); one = 1.0 (qgemm.wgsl)
@group(0) @binding(0) var<storage, read> XQ: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> SX: array<f32>;
@group(0) @binding(2) var<storage, read> WQ: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read> SW: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;
@group(0) @binding(5) var<uniform> P: Params;`}
var<workgroup> S: array<i32, ${((BM + BN) * SK) / 4}>; // X rows, then W rows

@compute @workgroup_size(${T})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
${ids}
  let lane = lid % ${s.sgSize}u;
  let m0 = wid.y * ${BM}u;
  let n0 = wid.x * ${BN}u;
${L.join('\n')}
}
`;
}

export interface I8GemmArgs {
  label: string;
  xq: Binding;
  sx: Binding;
  wq: Binding;
  sw: Binding;
  c: Binding;
  M: number;
  N: number;
  K: number;
  /** C += the product instead of C = it. */
  accumulate?: boolean;
}

/** Shapes the tensor-core path takes: K a multiple of 16 (vec4 rows); M, N free (partial blocks are masked). */
export const i8TcShapeOk = (K: number) => K % 16 === 0 && K <= I8_MAX_K;

/** What split-K needs to know of a spec's kernel: its block, threads, and K in vec4s with one K step of BK bytes. */
export const i8TcSplitShape = (s: I8TcSpec, M: number, N: number, K: number) => ({
  M, N, BM: tcBlockM(s), BN: tcBlockN(s), threads: threads(s), kUnits: K / 16, step: s.BK / 16,
});

/** The GEMM on a spec, or with `split` one K slice per workgroup z into its workspace (qgemmI8Steps adds the reduction). */
export function qgemmI8Tc(rt: Runtime, s: I8TcSpec, a: I8GemmArgs, split?: I8Slices): Dispatch {
  if (!i8TcShapeOk(a.K)) throw new Error(`${a.label}: K=${a.K} must be a multiple of 16 for the tensor-core path`);
  const err = i8TcSpecError(s, rt.device.limits.maxComputeWorkgroupStorageSize, rt.device.limits.maxComputeInvocationsPerWorkgroup);
  if (err) throw new Error(`${a.label}: ${err}`);
  const u = new Uniforms().u32(a.M).u32(a.N).u32(a.K / 16);
  if (split) u.u32(split.kChunk);
  else u.f32(1);
  const ub = rt.uniform(a.label, u);
  return rt.kernel({
    label: `${a.label}[tc ${tcBlockM(s)}x${tcBlockN(s)}${split ? ` split-K ${split.parts}` : ''}]`,
    code: qgemmI8TcCode(s, a.accumulate, !!split),
    bindings: split ? [a.xq, a.wq, split.workspace, ub] : [a.xq, a.sx, a.wq, a.sw, a.c, ub],
    workgroups: [Math.ceil(a.N / tcBlockN(s)), Math.ceil(a.M / tcBlockM(s)), split ? split.parts : 1],
  });
}

// ---- choosing the path on a device ------------------------------------------------------------

const enabled = new WeakMap<Runtime, I8TcSpec>();
/** Per runtime, the labels (i8TcLabel) of the specs checkI8Tc found exact, and of those whose split over K was exact too. */
const verified = new WeakMap<Runtime, { ok: Set<string>; split: Set<string> }>();

/** Whether a spec passed checkI8Tc on this runtime, and its split too where `split`. */
const passedHere = (rt: Runtime, s: I8TcSpec, split: boolean) => {
  const v = verified.get(rt);
  return !!v?.ok.has(i8TcLabel(s)) && (!split || v.split.has(i8TcLabel(s)));
};

/** Whether split-K on the enabled spec was checked exact on this device. */
export function i8TcSplitOk(rt: Runtime): boolean {
  const s = enabled.get(rt);
  return !!s && passedHere(rt, s, true);
}

/** The spec qgemmI8 uses on this runtime (set by enableI8TensorCores), if any. */
export function i8TensorCoreSpec(rt: Runtime): I8TcSpec | undefined {
  return enabled.get(rt);
}

/** A GEMM shape's tensor-core spec, and whether it may split K (only a spec whose split was checked exact here). */
export interface I8TcChoice {
  spec: I8TcSpec;
  split: boolean;
}

/** The key of an INT8 GEMM shape (M×N×K, as MEASURED_I8TC_LAYOUTS and the tuner's jobs name it). */
export const i8TcShapeKey = (M: number, N: number, K: number) => `${M}x${N}x${K}`;

/**
 * The spec for one GEMM shape: the layout tuned for it on this device (tune/i8-gemm.ts) once verified
 * on this runtime, else its measured layout (unsplit), else the enabled one (split where its split was
 * checked). The source is noted for the run's tuning status (tune/store.ts, family 'i8tc').
 */
export function i8TcChoiceFor(rt: Runtime, M: number, N: number, K: number): I8TcChoice | undefined {
  const base = enabled.get(rt);
  if (!base) return undefined;
  const key = i8TcShapeKey(M, N, K);
  const tuned = tunedI8Choice(rt, base, key);
  const table = shapeSpecs.get(rt)?.get(key);
  noteChoice(rt.device, 'i8tc', key, tuned ? 'tuned' : table ? 'table' : 'heuristic');
  return tuned ?? (table ? { spec: table, split: false } : { spec: base, split: i8TcSplitOk(rt) });
}

/** The first tuned pick for this shape that passed its check on this runtime (its split too where the pick splits). */
function tunedI8Choice(rt: Runtime, base: I8TcSpec, key: string): I8TcChoice | undefined {
  for (const pick of tunedPicks(rt.device, 'i8tc', key) ?? []) {
    const p = i8TcPickParse(pick);
    if (!p) continue;
    const spec = i8TcSpecOfPick(base, p);
    if (passedHere(rt, spec, p.split)) return { spec, split: p.split };
  }
  return undefined;
}

/** A pick's spec in the spelling (syntax, 8-bit units, subgroup size) of the runtime's enabled spec. */
export function i8TcSpecOfPick(base: Pick<I8TcSpec, 'syntax' | 'unitDiv' | 'sgSize'>, p: I8TcPickParts): I8TcSpec {
  const { cfg, layout } = p;
  return { syntax: base.syntax, unitDiv: base.unitDiv, sgSize: base.sgSize, cfg: { componentType: 'i8', resultComponentType: 'i32', ...cfg }, ...layout };
}

/** What a tuned pick names: a configuration, a block layout, and whether the GEMM may split K. */
export interface I8TcPickParts {
  cfg: { M: number; N: number; K: number };
  layout: I8TcLayout;
  split: boolean;
}

/** The tuner's name of a spec (tune/i8-gemm.ts): configuration and layout, `.split` where it may split K; the spelling is the device's. */
export function i8TcPick(s: Pick<I8TcSpec, 'cfg' | keyof I8TcLayout>, split: boolean): string {
  return `i8.${s.cfg.M}x${s.cfg.N}x${s.cfg.K}.t${s.tilesM}x${s.tilesN}.sg${s.sgM}x${s.sgN}.bk${s.BK}.p${s.PAD}${(s.EPI ?? 1) > 1 ? `.e${s.EPI}` : ''}${split ? '.split' : ''}`;
}

/** i8TcPick's parts, or null for a name this build does not make (a stale or hostile cache entry). */
export function i8TcPickParse(pick: string): I8TcPickParts | null {
  const m = /^i8\.(\d{1,2})x(\d{1,2})x(\d{1,3})\.t(\d)x(\d)\.sg(\d)x(\d)\.bk(\d{2,3})\.p(\d{2})(?:\.e(\d))?(\.split)?$/.exec(pick);
  if (!m) return null;
  const n = m.slice(1, 11).map((x) => (x === undefined ? undefined : Number(x)));
  const layout: I8TcLayout = { tilesM: n[3]!, tilesN: n[4]!, sgM: n[5]!, sgN: n[6]!, BK: n[7]!, PAD: n[8]!, ...(n[9] !== undefined ? { EPI: n[9] } : {}) };
  if (Object.values(layout).some((x) => !(x! > 0)) || layout.EPI === 1) return null;
  return { cfg: { M: n[0]!, N: n[1]!, K: n[2]! }, layout, split: m[11] !== undefined };
}

/**
 * Checks the tuned INT8 layouts this device holds (a cache applied before enableI8TensorCores, or picks
 * from an earlier session) that this runtime has not checked yet, in the enabled spelling, so those that
 * pass serve their shapes (a pick that splits K has its split checked too).
 */
export async function verifyTunedI8Layouts(rt: Runtime): Promise<I8TcTried[]> {
  const out: I8TcTried[] = [];
  const base = enabled.get(rt);
  if (!base) return out;
  const limits = rt.device.limits;
  const done = new Set<string>();
  for (const picks of Object.values(tunedEntries(rt.device, 'i8tc'))) {
    for (const pick of picks) {
      const p = i8TcPickParse(pick);
      const spec = p && i8TcSpecOfPick(base, p);
      const label = spec ? i8TcLabel(spec) : pick;
      const id = `${label}${p?.split ? ' split' : ''}`;
      if (done.has(id) || (spec && passedHere(rt, spec, p!.split))) continue;
      done.add(id);
      const cfgOk = spec && i8Configs(rt).some((c) => c.M === spec.cfg.M && c.N === spec.cfg.N && c.K === spec.cfg.K);
      if (!spec || !cfgOk || i8TcSpecError(spec, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup)) {
        out.push({ label, ok: false, error: 'not a layout this build and device can run' });
        continue;
      }
      out.push(triedOf(await checkI8Tc(rt, spec, { split: p!.split })));
    }
  }
  return out;
}

/** Turns the path off again (benchmarks time both on one runtime). */
export function disableI8TensorCores(rt: Runtime): void {
  enabled.delete(rt);
  verified.delete(rt);
  shapeSpecs.delete(rt);
}

const shapeSpecs = new WeakMap<Runtime, Map<string, I8TcSpec>>();

/** Checks the measured layouts of this adapter in the enabled spelling; the exact ones serve their shapes. */
async function enableMeasuredShapes(rt: Runtime, base: I8TcSpec, out: I8TcProbe): Promise<void> {
  const specs = new Map<string, I8TcSpec>();
  const checked = new Map<string, boolean>();
  const limits = rt.device.limits;
  for (const t of MEASURED_I8TC_LAYOUTS) {
    if (!adapterMatches(rt.gpu, t.match)) continue;
    for (const [shape, e] of Object.entries(t.table)) {
      const cfg = i8Configs(rt).find((c) => c.M === e.cfg[0] && c.N === e.cfg[1] && c.K === e.cfg[2]);
      if (!cfg) continue;
      const s: I8TcSpec = { ...base, EPI: undefined, cfg, ...e.layout };
      if (i8TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup)) continue;
      const label = i8TcLabel(s);
      if (!checked.has(label)) {
        // A shape's own layout runs unsplit (qgemm.ts splitCount), so its split is not checked.
        const r = await checkI8Tc(rt, s, { split: false });
        checked.set(label, r.ok);
        out.tried.push(triedOf(r));
      }
      if (checked.get(label)) specs.set(shape, s);
    }
  }
  shapeSpecs.set(rt, specs);
  out.shapeLayouts = Object.fromEntries([...specs].map(([k, v]) => [k, i8TcLabel(v)]));
}

/** i8 → i32 configurations, largest tile first. */
export function i8Configs(rt: Runtime): SubgroupMatrixConfig[] {
  return i8ConfigsOf(subgroupMatrixConfigs(rt));
}

/** The i8 → i32 ones of an adapter's subgroup-matrix configurations, largest tile first (none: no INT8 tensor-core path). */
export function i8ConfigsOf<C extends Pick<SubgroupMatrixConfig, 'M' | 'N' | 'K'> & { componentType: string; resultComponentType: string }>(configs: C[]): C[] {
  return configs
    .filter((c) => c.componentType === 'i8' && c.resultComponentType === 'i32')
    .sort((a, b) => b.M * b.N * b.K - a.M * a.N * a.K);
}

/**
 * Whether an adapter offers the INT8 tensor-core path: subgroup matrices with an i8 → i32
 * configuration (what enableI8TensorCores tries; it still checks the results are exact first).
 */
export function adapterOffersI8TensorCores(adapter: { features: ReadonlySet<string>; info?: GPUAdapterInfo }): boolean {
  return adapter.features.has(SUBGROUP_MATRIX_FEATURE) && i8ConfigsOf(subgroupMatrixConfigsOf(adapter.info)).length > 0;
}

/** Deterministic int8 test data (−128..127 spread) packed four to a word. */
function packedI8(n: number, seed: number): { values: Int8Array; words: Uint32Array } {
  const rng = new Rng(seed);
  const values = Int8Array.from({ length: n }, () => (rng.nextU32() >>> 24) - 128);
  return { values, words: new Uint32Array(values.buffer.slice(0)) };
}

export interface I8TcCheck {
  spec: I8TcSpec;
  ok: boolean;
  mismatches?: number;
  error?: string;
  /** The same GEMM split over K in two slices (the second with a partial K step), bit for bit too. */
  splitOk?: boolean;
  splitError?: string;
  /** The accumulating kernel: C0 + the product, bit for bit (fp32 add after the scaled product). */
  accumulateOk?: boolean;
  accumulateError?: string;
}

/** checkI8Tc's accumulate part: `args.c` filled with C0, the accumulating kernel run, compared with C0 + want. */
async function checkAccumulate(rt: Runtime, s: I8TcSpec, args: I8GemmArgs, want: Float32Array): Promise<Pick<I8TcCheck, 'accumulateOk' | 'accumulateError'>> {
  const errors = await wgslErrors(rt.device, 'qgemm_tc.check.acc', qgemmI8TcCode(s, true), true);
  if (errors.length) return { accumulateOk: false, accumulateError: errors.join('; ') };
  const c0 = Float32Array.from(want, (_, i) => ((i * 37) % 101) / 64 - 0.75);
  rt.device.queue.writeBuffer(args.c as GPUBuffer, 0, c0);
  rt.device.pushErrorScope('validation');
  rt.run([qgemmI8Tc(rt, s, { ...args, accumulate: true })]);
  const err = await rt.device.popErrorScope();
  if (err) return { accumulateOk: false, accumulateError: err.message };
  const expected = new Uint32Array(Float32Array.from(want, (v, i) => c0[i] + v).buffer);
  const got = new Uint32Array(await rt.read(args.c as GPUBuffer, 0, want.length * 4));
  const bad = expected.reduce((n, w, i) => n + (got[i] !== w ? 1 : 0), 0);
  return bad ? { accumulateOk: false, accumulateError: `${bad} mismatches` } : { accumulateOk: true };
}

/**
 * Runs a spec on a shape with partial blocks in M and N and several K steps; compares bit for bit.
 * Where that passes, also split over K (./qgemm-splitk.ts), which must give the same bits (unless
 * `split: false`: splitOk stays unset).
 */
export async function checkI8Tc(rt: Runtime, s: I8TcSpec, o: { split?: boolean } = {}): Promise<I8TcCheck> {
  const r = await runI8TcCheck(rt, s, o);
  // What passed here may serve a GEMM on this runtime (a tuned pick is used only once its check passed).
  let v = verified.get(rt);
  if (!v) verified.set(rt, (v = { ok: new Set(), split: new Set() }));
  if (r.ok) v.ok.add(i8TcLabel(s));
  if (r.splitOk) v.split.add(i8TcLabel(s));
  return r;
}

async function runI8TcCheck(rt: Runtime, s: I8TcSpec, o: { split?: boolean }): Promise<I8TcCheck> {
  const M = tcBlockM(s) + 5;
  const N = tcBlockN(s) + 3;
  const K = Math.max(3 * s.BK, 96) + 16; // a partial last K step as well
  const X = packedI8(M * K, 1);
  const W = packedI8(N * K, 2);
  const sx = Float32Array.from({ length: M }, (_, i) => 0.01 + i * 1e-4);
  const sw = Float32Array.from({ length: N }, (_, i) => 0.02 - i * 1e-5);
  const bufs: GPUBuffer[] = [];
  try {
    const errors = await wgslErrors(rt.device, 'qgemm_tc.check', qgemmI8TcCode(s), true);
    if (errors.length) return { spec: s, ok: false, error: errors.join('; ') };
    const up = (label: string, d: Uint32Array | Float32Array) => {
      const b = rt.upload('workspace', `qgemm_tc.${label}`, d);
      bufs.push(b);
      return b;
    };
    const args = { label: 'qgemm_tc.check', M, N, K, xq: up('x', X.words), sx: up('sx', sx), wq: up('w', W.words), sw: up('sw', sw), c: up('c', new Float32Array(M * N).fill(NaN)) };
    rt.device.pushErrorScope('validation');
    const d = qgemmI8Tc(rt, s, args);
    rt.run([d]);
    const err = await rt.device.popErrorScope();
    if (err) return { spec: s, ok: false, error: err.message };
    const want = new Uint32Array(qgemmI8ExactRef(X.values, sx, W.values, sw, M, N, K).buffer);
    const mismatches = async () => {
      const got = new Uint32Array(await rt.read(args.c as GPUBuffer, 0, M * N * 4));
      return want.reduce((n, w, i) => n + (got[i] !== w ? 1 : 0), 0);
    };
    const m = await mismatches();
    if (m) return { spec: s, ok: false, mismatches: m };
    // The accumulating kernel (its own epilogue): C0 + the product, C0 what it held. Reported in
    // accumulateOk, not a condition of `ok`.
    const passed: I8TcCheck = { spec: s, ok: true, mismatches: 0, ...await checkAccumulate(rt, s, args, new Float32Array(want.buffer)) };
    if (o.split === false) return passed;
    try {
      const plan = i8SplitPlan(i8TcSplitShape(s, M, N, K), 2);
      const workspace = up('ws', new Uint32Array(plan.parts * M * N));
      checkI8Workspace('qgemm_tc.check', workspace, [args.c], M, N, plan.parts);
      const cerr = await wgslErrors(rt.device, 'qgemm_tc.check.split', qgemmI8TcCode(s, false, true), true);
      if (cerr.length) return { ...passed, splitOk: false, splitError: cerr.join('; ') };
      rt.device.queue.writeBuffer(args.c as GPUBuffer, 0, new Float32Array(M * N).fill(NaN));
      rt.device.pushErrorScope('validation');
      rt.run([qgemmI8Tc(rt, s, args, { ...plan, workspace }), i8SplitReduce(rt, { ...args, workspace, parts: plan.parts })]);
      const serr = await rt.device.popErrorScope();
      if (serr) return { ...passed, splitOk: false, splitError: serr.message };
      const sm = await mismatches();
      return { ...passed, splitOk: sm === 0, splitError: sm ? `${sm} mismatches` : undefined };
    } catch (e) {
      return { ...passed, splitOk: false, splitError: (e as Error).message };
    }
  } catch (e) {
    return { spec: s, ok: false, error: (e as Error).message };
  } finally {
    bufs.forEach((b) => rt.mem.free(b));
  }
}

/** One checked candidate as a probe reports it: its label and the check's findings. */
export type I8TcTried = Omit<I8TcCheck, 'spec'> & { label: string };

const triedOf = ({ spec, ...r }: I8TcCheck): I8TcTried => ({ label: i8TcLabel(spec), ...r });

export interface I8TcProbe {
  present: boolean;
  chosen?: I8TcSpec;
  tried: I8TcTried[];
  /** The GEMM shapes that run a measured layout of their own (MEASURED_I8TC_LAYOUTS), with it. */
  shapeLayouts?: Record<string, string>;
}

/**
 * The order enableI8TensorCores checks candidates in: first every spelling (configuration, syntax,
 * 8-bit units) with its first valid layout — a device that misreads a spelling fails every layout
 * in it, so this finds the spelling in one check each — then the remaining layouts of each spelling
 * in turn. `valid` filters specs the device cannot run.
 */
export function i8TcProbeOrder(cfgs: SubgroupMatrixConfig[], layouts: I8TcLayout[], sgSize: number, valid: (s: I8TcSpec) => boolean): I8TcSpec[] {
  const spellings: I8TcSpec[][] = [];
  for (const cfg of cfgs) {
    for (const syntax of ['template', 'bool'] as const) { // bool: the older, now deprecated spelling
      for (const unitDiv of [4, 1] as const) { // both unit conventions, each with its first layout early
        spellings.push(layouts.map((layout): I8TcSpec => ({ cfg, syntax, unitDiv, sgSize, ...layout })).filter(valid));
      }
    }
  }
  return [...spellings.map((l) => l[0]).filter(Boolean), ...spellings.flatMap((l) => l.slice(1))];
}

/**
 * Checks the candidates in i8TcProbeOrder and makes qgemmI8 use the first that computes exactly on
 * this device (the shapes with a measured layout then check theirs). Without an i8 → i32
 * configuration (the usual case) nothing changes.
 */
export async function enableI8TensorCores(rt: Runtime, layouts = I8_TC_LAYOUTS): Promise<I8TcProbe> {
  const out: I8TcProbe = { present: rt.gpu.features.subgroupMatrix, tried: [] };
  const limits = rt.device.limits;
  const valid = (s: I8TcSpec) => !i8TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup);
  for (const s of i8TcProbeOrder(i8Configs(rt), layouts, subgroupSize(rt), valid)) {
    const r = await checkI8Tc(rt, s);
    out.tried.push(triedOf(r));
    if (r.ok) {
      enabled.set(rt, s);
      out.chosen = s;
      await enableMeasuredShapes(rt, s, out);
      out.tried.push(...await verifyTunedI8Layouts(rt));
      return out;
    }
  }
  return out;
}

export function i8TcLabel(s: I8TcSpec): string {
  return `i8 ${s.cfg.M}x${s.cfg.N}x${s.cfg.K} ${s.syntax}/u${s.unitDiv} ${tcBlockM(s)}x${tcBlockN(s)} (${s.sgM}x${s.sgN} sg of ${s.tilesM}x${s.tilesN}) BK${s.BK}${epiOf(s) > 1 ? ` epi${epiOf(s)}` : ''}`;
}
