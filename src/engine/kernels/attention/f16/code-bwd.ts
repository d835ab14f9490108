/**
 * Causal grouped-query flash attention, backward, on subgroup matrices: f16 operands, f32
 * accumulation, fp32 statistics (lse from the forward, Di = rowsum(dO∘O) in fp32). The maths is
 * ../attention.ref.ts attentionBackwardRef: P = exp(s − lse), dS = P∘(dP − Di), dP = dO·Vᵀ,
 * dq = scale·dS·K, dk = scale·dSᵀ·Q and dv = Pᵀ·dO summed over the G query heads of a KV head.
 * Two kernels, reading f16 copies of q, k, v, dO (`inputs: 'f16'`, the model's: it casts them first;
 * Di from dO's copy) staged through workgroup memory by 16-byte vector loads (spec.load 'staged', the
 * default) or straight from storage with the matrix loads (load 'direct'), or fp32 ones staged and
 * cast through workgroup memory (the earlier kernels, kept for side-by-side timing):
 *
 * - dq (runs first): a workgroup owns BQ = sgCount·M query rows of one (b, h); it writes Di for its
 *   rows (the dk/dv kernel reads it), holds Q's and dO's left tiles, and per key block of BKV keys
 *   computes S = Q·Kᵀ and dP = dO·Vᵀ into f32 scratch, dS in SIMT (written f16), and accumulates
 *   dq += dS·K in result matrices kept across the key loop (no rescale in the backward).
 * - dk/dv: a workgroup owns sgCount·M keys of one (b, KV head); it holds K's and V's left tiles and
 *   per query head of the group and block of BKV queries computes Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ, Pᵀ and
 *   dSᵀ in SIMT (f16), and accumulates dv += Pᵀ·dO, dk += dSᵀ·Q in result matrices.
 * Tiles wholly masked for a subgroup are skipped (not with spec.dense: straight-line products). `emulate`: the f32 twin, as the forward's.
 *
 * Stored dS (spec.ds, both kernels): Di comes from the fp32 Di pass first (../attention.ts attentionDi);
 * the dk/dv kernel also stores its dSᵀ blocks (f16) in a scratch of 16×16 tiles (f16AttnDsOffset), and
 * dq = scale·dS·K is a plain GEMM over them (f16AttnDqDsCode): no second S, P, dP (the dq kernel
 * above spends two of its three products rebuilding them).
 */
import { f16OutModule } from '../../matmul-f16/cast';
import { f16MatrixTypes, sgmatLoad, sgmatStore } from '../../qgemm/sgmat';
import { emulation, f16AttnBlockQ, f16AttnDirect, f16AttnSpecError, f16InputType, type F16AttnSpec, put8, type StageGen, sgIndex, stageRows, stageRows16, tileIf } from './code';

const SYNTAX = { syntax: 'template' } as const;

export type F16AttnBwdKernel = 'dq' | 'dkdv';

/** Strides and element counts of a backward kernel's workgroup arrays (f16 elements for A and P, f32 for S). */
export function f16AttnBwdStaging(kind: F16AttnBwdKernel, s: F16AttnSpec, direct = false) {
  const own = s.sgCount * s.cfg.M;
  const KST = s.D + s.PAD;
  const PST = s.BKV + s.PAD;
  // Per subgroup row: the S block and the dP block side by side; the final D-wide result after.
  const SST = Math.max(2 * s.BKV, s.D) + 4;
  // `direct` (f16 inputs read by the matrix loads): no staged rows; dk/dv's lanes read lse and Di themselves.
  // dk/dv's prefetch double-buffers Q's and dO's rows (two blocks' worth).
  const aElems = direct ? 0 : Math.max(2 * own, (kind === 'dkdv' && s.prefetch ? 4 : 2) * s.BKV) * KST;
  const pElems = (kind === 'dkdv' ? 2 : 1) * own * PST;
  const sElems = own * SST;
  const extra = kind === 'dkdv' && !direct ? 2 * s.BKV : 0; // lse and Di of the query block
  return { own, KST, PST, SST, aElems, pElems, sElems, extra };
}

/** The dq-from-dS kernel's workgroup arrays: K's block (A, f16), dSᵀ's block (Bs: BKV key rows of the own queries, f16; none with load 'direct'), the dq scratch (f32). */
export function f16AttnDqDsStaging(s: F16AttnSpec) {
  const own = f16AttnBlockQ(s);
  const KST = s.D + s.PAD;
  const BST = own + s.PAD;
  const SST = s.D + 4;
  // The dq scratch holds one row tile per subgroup at a time (wide: two rounds).
  return { own, KST, BST, SST, aElems: s.BKV * KST, bElems: s.load === 'direct' ? 0 : s.BKV * BST, sElems: s.sgCount * s.cfg.M * SST };
}

/** `inputs16`: reading f16 copies (staged, or direct with spec.load 'direct'). */
export function f16AttnBwdWorkgroupBytes(kind: F16AttnBwdKernel, s: F16AttnSpec, emulate = false, inputs16 = false): number {
  const e = emulate ? 4 : 2;
  const half = (n: number) => Math.ceil((n * e) / 4) * 4;
  if (kind === 'dq' && s.ds) {
    const ds = f16AttnDqDsStaging(s);
    return half(ds.aElems) + half(ds.bElems) + ds.sElems * 4;
  }
  const st = f16AttnBwdStaging(kind, s, f16AttnDirect(s, inputs16));
  return half(st.aElems) + half(st.pElems) + (st.sElems + st.extra) * 4;
}

/** Side of the stored dS's square tiles (queries and keys): a subgroup writes whole rows of them. */
export const F16_ATTN_DS_TILE = 16;

/** f16 elements of one head's stored dS: the 16×16 tiles (key tile kt, query tile qt ≥ kt) of ceil(T/16) tiles a side. */
export function f16AttnDsHeadElems(T: number): number {
  const nb = Math.ceil(T / F16_ATTN_DS_TILE);
  return ((nb * (nb + 1)) / 2) * F16_ATTN_DS_TILE * F16_ATTN_DS_TILE;
}

/**
 * Element of dS[query q, key j] (q ≥ j) in one head's stored dS: tiles key-tile-major (kt, then qt = kt ..
 * nb − 1), each 16 key rows of 16 queries (dSᵀ: rows are keys). Entries of a stored tile with j > q or past T are 0.
 */
export function f16AttnDsOffset(T: number, q: number, j: number): number {
  const nb = Math.ceil(T / F16_ATTN_DS_TILE);
  const kt = Math.floor(j / F16_ATTN_DS_TILE);
  const qt = Math.floor(q / F16_ATTN_DS_TILE);
  if (qt < kt) throw new Error(`stored dS has no tile for query ${q}, key ${j}`);
  return ((kt * (2 * nb - kt + 1)) / 2 + qt - kt) * F16_ATTN_DS_TILE * F16_ATTN_DS_TILE + (j % F16_ATTN_DS_TILE) * F16_ATTN_DS_TILE + (q % F16_ATTN_DS_TILE);
}

/** The WGSL of f16AttnDsOffset's tile start (elements), as u32 arithmetic on key tile kt, query tile qt and tiles a side nb. */
const dsTileStart = (kt: string, qt: string, nb: string) => `((${kt} * (2u * ${nb} - ${kt} + 1u)) / 2u + ${qt} - ${kt}) * ${F16_ATTN_DS_TILE * F16_ATTN_DS_TILE}u`;

/** Bytes of the stored dS of one (b, KV head) pair (its G query heads): f16, or the twin's f32. */
export const f16AttnDsPairBytes = (T: number, G: number, emulate = false) => G * f16AttnDsHeadElems(T) * (emulate ? 4 : 2);

/** Why a dq and dk/dv pair cannot run together (null when it can): both store dS or neither. */
export function f16AttnBwdPairError(s: { dq: F16AttnSpec; dkdv: F16AttnSpec }): string | null {
  return !!s.dq.ds === !!s.dkdv.ds ? null : 'dq and dk/dv must both use the stored dS (ds) or neither';
}

/** Why a spec cannot run a backward kernel (null when it can). */
export function f16AttnBwdSpecError(kind: F16AttnBwdKernel, s: F16AttnSpec, maxWorkgroupBytes = 49152, maxThreads = 1024, emulate = false, inputs16 = false): string | null {
  const base = f16AttnSpecError({ ...s, ds: undefined, split: undefined, prefetch: undefined, wide: undefined, contig: undefined, nomask: undefined, colwise: undefined }, Infinity, maxThreads, false, inputs16);
  if (base) return base;
  const lpr = s.sgSize / s.cfg.M;
  if ((s.D / 4) % lpr) return `D/4 = ${s.D / 4} must split over ${lpr} lanes per row`;
  if (s.wide && (kind !== 'dq' || !s.ds)) return 'wide is an option of the dq-from-dS kernel (dq with ds)';
  if (s.contig && kind !== 'dkdv') return 'contig is an option of the dk/dv kernel';
  if (s.nomask && (kind !== 'dkdv' || f16AttnDirect(s, inputs16))) return "nomask is an option of the staged dk/dv kernel (load 'staged')";
  if (s.colwise) {
    if (kind !== 'dkdv' || f16AttnDirect(s, inputs16)) return "colwise is an option of the staged dk/dv kernel (load 'staged')";
    if (s.contig) return 'colwise and contig are two ways of taking the columns: one at a time';
    const w = Math.min(s.BKV, s.sgSize);
    if (s.BKV % w || s.sgSize % w || s.cfg.M % (s.sgSize / w)) return `colwise: BKV ${s.BKV} and ${s.sgSize} lanes must split into columns, M ${s.cfg.M} rows over ${s.sgSize / w} lanes a column`;
  }
  if (s.prefetch) {
    if (kind !== 'dkdv') return 'prefetch is an option of the dk/dv kernel';
    if (!inputs16 || f16AttnDirect(s, inputs16)) return "prefetch: the dk/dv kernel prefetches f16 copies it stages (f16 inputs, load 'staged')";
  }
  if (s.split) {
    if (kind !== 'dkdv') return 'split is an option of the dk/dv kernel';
    if (s.sgCount % 2) return `split: ${s.sgCount} subgroups must pair up`;
    if (f16AttnDirect(s, inputs16)) return "split: the paired subgroups select their operands in workgroup memory (load 'staged')";
  }
  if (s.ds) {
    const own = f16AttnBlockQ(s);
    if (!inputs16) return 'ds (the stored dS) reads f16 copies of q, k, v, dO';
    if (own % F16_ATTN_DS_TILE) return `ds: ${own} own rows must be a multiple of ${F16_ATTN_DS_TILE} (the stored dS's tiles)`;
    if (s.BKV % 8) return `ds: BKV=${s.BKV} must be a multiple of 8 (16-byte rows of the stored dS)`;
    if (kind === 'dq' && s.load === 'direct') {
      // dS's tiles matrix-loaded as stored: a row tile and a key slice must be one stored tile.
      if (s.cfg.M !== F16_ATTN_DS_TILE || s.cfg.K !== F16_ATTN_DS_TILE) return `ds with load 'direct': dq's ${s.cfg.M}x${s.cfg.K} tiles must be the stored dS's ${F16_ATTN_DS_TILE}x${F16_ATTN_DS_TILE}`;
      if (s.dense) return "ds with load 'direct': dq skips the tiles never stored (no dense; uniform keeps the skips uniform)";
    }
  }
  const bytes = f16AttnBwdWorkgroupBytes(kind, s, emulate, inputs16);
  if (bytes > maxWorkgroupBytes) return `${bytes} bytes of workgroup memory`;
  return null;
}

/** Stages `rows` head rows from `src` (rows row0.., head `head` of `heads`; fp32 cast, or an f16 copy: `inputs16`) as f16 into A at element `dst` (code.ts stageRows, stageRows16). */
function stage(g: StageGen, inputs16: boolean, src: string, heads: string, head: string, rows: number, row0: string, dst: string, KST: number, indent: string): void {
  (inputs16 ? stageRows16 : stageRows)(g, 'A', src, heads, head, rows, row0, dst, KST, indent);
}

/**
 * stageRows16 in two halves for prefetching (spec.prefetch): `load` fills registers `${reg}<t>` (16-byte
 * vectors; the twin: two f32 vec4s, `${reg}<t>a`, `${reg}<t>b`) from `rows` rows of f16 copy `src` from
 * row `row0` of head `head` (zeros past T or where `valid` is false); `store` writes them into A from
 * element `dst`, rows KST apart. Between the two a block's products run while the loads are in flight.
 */
function prefetchRows16(g: StageGen, src: string, heads: string, rows: number, reg: string) {
  const DV = g.D / 8;
  const per = Math.ceil((rows * DV) / g.NT);
  const guard = (t: number) => ((t + 1) * g.NT > rows * DV ? `e < ${rows * DV}u` : 'true');
  const idx = (t: number) => `let e = lid + ${t * g.NT}u; let rr = e / ${DV}u; let c = e % ${DV}u;`;
  return {
    decl: Array.from({ length: per }, (_, t) => (g.emu ? `var ${reg}${t}a = vec4<f32>(); var ${reg}${t}b = vec4<f32>();` : `var ${reg}${t} = vec4<u32>();`)),
    load: (row0: string, head: string, valid: string, indent: string) => Array.from({ length: per }, (_, t) => `${indent}{ ${idx(t)} let j = ${row0} + rr; let ok = ${guard(t)} && j < P.T && ${valid}; let i = select(0u, ((b * P.T + j) * ${heads} + ${head}) * ${DV}u + c, ok);
${indent}  ${g.emu ? `${reg}${t}a = select(vec4<f32>(), ${src}[2u * i], ok); ${reg}${t}b = select(vec4<f32>(), ${src}[2u * i + 1u], ok);` : `${reg}${t} = select(vec4<u32>(), ${src}[i], ok);`} }`),
    store: (dst: string, KST: number, indent: string) => Array.from({ length: per }, (_, t) => `${indent}{ ${idx(t)} if (${guard(t)}) { ${g.emu ? `let lo = ${reg}${t}a; let hi = ${reg}${t}b;` : `let lo = bitcast<vec4<f16>>(${reg}${t}.xy); let hi = bitcast<vec4<f16>>(${reg}${t}.zw);`}
${indent}  let s0 = ${dst} + rr * ${KST}u + c * 8u; ${put8('A')} } }`),
  };
}

function header(kind: F16AttnBwdKernel, s: F16AttnSpec, emu: boolean, direct: boolean, inputs16: boolean): string {
  const E = emu ? 'f32' : 'f16';
  const st = f16AttnBwdStaging(kind, s, direct);
  // f16 copies of q, k, v, dO: element arrays the matrix loads read (direct) or 16-byte vectors staged; else fp32 vec4 rows staged.
  const X = inputs16 ? f16InputType(direct, emu) : 'array<vec4<f32>>';
  const types = f16MatrixTypes(s.cfg, emu);
  const bindings = kind === 'dq'
    ? `@group(0) @binding(0) var<storage, read> q: ${X};
@group(0) @binding(1) var<storage, read> k: ${X};
@group(0) @binding(2) var<storage, read> v: ${X};
@group(0) @binding(3) var<storage, read> o: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> dO: ${X};
@group(0) @binding(5) var<storage, read> LSE: array<f32>;
@group(0) @binding(6) var<storage, read_write> DI: array<f32>;
@group(0) @binding(7) var<storage, read_write> DQ: array<f32>;
@group(0) @binding(8) var<uniform> P: Params;`
    : `@group(0) @binding(0) var<storage, read> q: ${X};
@group(0) @binding(1) var<storage, read> k: ${X};
@group(0) @binding(2) var<storage, read> v: ${X};
@group(0) @binding(3) var<storage, read> dO: ${X};
@group(0) @binding(4) var<storage, read> LSE: array<f32>;
@group(0) @binding(5) var<storage, read> DI: array<f32>;
@group(0) @binding(6) var<uniform> P: Params;
@group(0) @binding(7) var<storage, read_write> DK: array<f32>;
@group(0) @binding(8) var<storage, read_write> DV: array<f32>;`;
  const pArrays = kind === 'dq'
    ? `var<workgroup> Ps: array<${E}, ${st.pElems}>; // dS, M rows of BKV per subgroup`
    : `${s.split ? `var<workgroup> PD: array<${E}, ${st.pElems}>; // Pᵀ, M key rows of BKV queries per subgroup, then dSᵀ from ${st.pElems / 2}` : `var<workgroup> Pt: array<${E}, ${st.pElems / 2}>; // Pᵀ, M key rows of BKV queries per subgroup
var<workgroup> Dt: array<${E}, ${st.pElems / 2}>; // dSᵀ`}${direct ? '' : `
var<workgroup> LS: array<f32, ${s.BKV}>; // the query block's lse·log2 e
var<workgroup> DS: array<f32, ${s.BKV}>; // and Di`}`;
  const ops: [string, 'LT' | 'RT'][] = direct
    ? (kind === 'dq' ? [['q', 'LT'], ['dO', 'LT'], ['k', 'RT'], ['v', 'RT']] : [['k', 'LT'], ['v', 'LT'], ['q', 'RT'], ['dO', 'RT']])
    : [['A', 'LT'], ['A', 'RT']];
  const loads: [string, 'LT' | 'RT'][] = [...ops, ...(kind === 'dq' ? [['Ps', 'LT']] : s.split ? [['PD', 'LT']] : [['Pt', 'LT'], ['Dt', 'LT']]) as [string, 'LT' | 'RT'][]];
  return `${s.uniform ? 'enable subgroups;\n' : ''}${emu ? '' : 'enable f16;\nenable chromium_experimental_subgroup_matrix;\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n'}// Generated by src/engine/kernels/attention/f16/code-bwd.ts: ${kind}, ${s.cfg.M}x${s.cfg.N}x${s.cfg.K} tiles, ${st.own} own rows (${s.sgCount} sg), BKV ${s.BKV}, D ${s.D}${direct ? ', f16 q/k/v/dO read by the matrix loads' : inputs16 ? ', f16 q/k/v/dO staged' : ''}${emu ? ' (emulated matrices, f32)' : ''}.
${types}
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, _p0: u32, _p1: u32 }
${bindings}
${direct ? '' : `var<workgroup> A: array<${E}, ${st.aElems}>; // staged operand rows (f16)\n`}${pArrays}
var<workgroup> Ss: array<f32, ${st.sElems}>; // per subgroup M rows: S | dP, then a D-wide result
const LOG2E = 1.4426950408889634;
${emu ? emulation(s.cfg, loads, ['Ss']) : ''}`;
}

/** The backward kernels' options: `inputs` 'f16': q, k, v, dO are f16 copies (the twin: f32 holding f16 values) whose tiles the matrix loads read from storage; 'f32': fp32, staged and cast. */
export interface F16AttnBwdOptions { emulate?: boolean; inputs?: 'f16' | 'f32' }

/** The dq kernel (and Di). Bindings: q, k, v, o, dO, lse, Di (written), dq, Params. Grid: x = query block (heaviest first), y = b·nH + h. */
export function f16AttnDqCode(s: F16AttnSpec, o: F16AttnBwdOptions = {}): string {
  const emu = !!o.emulate;
  const inputs16 = o.inputs === 'f16';
  const direct = f16AttnDirect(s, inputs16);
  const { cfg, D, BKV, sgSize } = s;
  const { M, N, K } = cfg;
  const NT = s.sgCount * sgSize;
  const LPR = sgSize / M;
  const st = f16AttnBwdStaging('dq', s, direct);
  const { own: BQ, KST, PST, SST } = st;
  const VOFF = BKV * KST;
  const DOFF = BQ * KST;
  const DV = D / 4;
  const g: StageGen = { L: [], emu, D: s.D, NT };
  const L = g.L;
  const load = (arr: string, T: 'LT' | 'RT', off: string, colMajor: boolean, stride: string) =>
    (emu ? `emuLoad${T}_${arr}(${off}, ${stride}, ${colMajor})` : sgmatLoad(SYNTAX, T, `&${arr}`, off, colMajor, stride));
  const storeS = (off: string, v: string) => (emu ? `emuStore_Ss(${off}, ${v}, ${SST}u);` : sgmatStore(SYNTAX, '&Ss', off, v, `${SST}u`));
  const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
  const h16 = (x: string) => (emu ? `rne16(${x})` : `f16(${x})`);
  const f32 = (x: string) => (emu ? x : `f32(${x})`);
  // K's tiles: for S (key tile j, head-dim slice kd; col_major: Kᵀ) and for dq (key slice kk, column tile dn); V's for dP.
  const kS = (arr: 'k' | 'v', j: number, kd: number) => (direct
    ? load(arr, 'RT', `kvo + ${j * N}u * kvs + ${kd * K}u`, true, 'kvs')
    : load('A', 'RT', `${(arr === 'v' ? VOFF : 0) + j * N * KST + kd * K}u`, true, `${KST}u`));
  const kDq = (kk: number, dn: number) => (direct
    ? load('k', 'RT', `kvo + ${kk * K}u * kvs + ${dn * N}u`, false, 'kvs')
    : load('A', 'RT', `${kk * K * KST + dn * N}u`, false, `${KST}u`));
  // Di = rowsum(dO∘O) in fp32 (dO as the kernel reads it: its f16 copy when direct), this lane's share, gathered through the scratch.
  L.push('  var dpart = 0.0;');
  L.push(`  if (t < P.T) { let r4 = ((b * P.T + t) * P.nH + h) * ${DV}u;`);
  for (let i = 0; i < DV / LPR; i++) {
    // dO's vec4 c: elements (direct), half of a 16-byte vector (staged f16), or a vec4 (fp32; the twin's f16 copy).
    const d = direct ? `vec4<f32>(${[0, 1, 2, 3].map((e) => f32(`dO[4u * c + ${e}u]`)).join(', ')})`
      : inputs16 && !emu ? 'vec4<f32>(bitcast<vec4<f16>>(select(dO[c >> 1u].xy, dO[c >> 1u].zw, (c & 1u) == 1u)))' : 'dO[c]';
    L.push(`    { let c = r4 + ${i * LPR}u + part; dpart += dot(${d}, o[c]); }`);
  }
  L.push('  }', '  Ss[srow + part] = dpart;');
  if (direct) {
    // Q's and dO's left tiles straight from the f16 copies (rows past T: finite pad or next-batch rows, never visible).
    L.push(`  let qo = ((b * P.T + q0 + sg * ${M}u) * P.nH + h) * ${D}u;`, `  let qs = P.nH * ${D}u;`, `  let kvs = P.nKV * ${D}u;`);
  } else {
    stage(g, inputs16, 'q', 'P.nH', 'h', BQ, 'q0', '0u', KST, '  ');
    stage(g, inputs16, 'dO', 'P.nH', 'h', BQ, 'q0', `${DOFF}u`, KST, '  ');
  }
  L.push('  workgroupBarrier();', '  var di = 0.0;', `  for (var i = 0u; i < ${LPR}u; i++) { di += Ss[srow + i]; }`);
  L.push('  let lse2 = select(0.0, LSE[(b * P.nH + h) * P.T + min(t, P.T - 1u)] * LOG2E, t < P.T);');
  L.push('  if (part == 0u && t < P.T) { DI[(b * P.nH + h) * P.T + t] = di; }');
  for (let kd = 0; kd < D / K; kd++) {
    if (direct) {
      L.push(`  let qm${kd} = ${load('q', 'LT', `qo + ${kd * K}u`, false, 'qs')};`);
      L.push(`  let dm${kd} = ${load('dO', 'LT', `qo + ${kd * K}u`, false, 'qs')};`);
    } else {
      L.push(`  let qm${kd} = ${load('A', 'LT', `sg * ${M * KST}u + ${kd * K}u`, false, `${KST}u`)};`);
      L.push(`  let dm${kd} = ${load('A', 'LT', `${DOFF}u + sg * ${M * KST}u + ${kd * K}u`, false, `${KST}u`)};`);
    }
  }
  for (let dn = 0; dn < D / N; dn++) L.push(`  var dq${dn} = CT();`);
  L.push('  workgroupBarrier();');
  L.push(`  for (var kb = 0u; kb < kEnd; kb += ${BKV}u) {`);
  if (direct) {
    L.push(`    let kvo = ((b * P.T + kb) * P.nKV + g) * ${D}u;`);
  } else {
    stage(g, inputs16, 'k', 'P.nKV', 'g', BKV, 'kb', '0u', KST, '    ');
    stage(g, inputs16, 'v', 'P.nKV', 'g', BKV, 'kb', `${VOFF}u`, KST, '    ');
    L.push('    workgroupBarrier();');
  }
  for (let j = 0; j < BKV / N; j++) {
    L.push(`    ${tileIf(s, `kb + ${j * N}u <= rmax`)}`, '      var acc = CT();', '      var acd = CT();');
    for (let kd = 0; kd < D / K; kd++) {
      L.push(`      acc = ${mma}(qm${kd}, ${kS('k', j, kd)}, acc);`);
      L.push(`      acd = ${mma}(dm${kd}, ${kS('v', j, kd)}, acd);`);
    }
    L.push(`      ${storeS(`sbase + ${j * N}u`, 'acc')}`, `      ${storeS(`sbase + ${BKV + j * N}u`, 'acd')}`, '    }');
  }
  L.push('    workgroupBarrier();');
  L.push(`    let cnt = select(0u, min(${BKV}u, t + 1u - kb), t >= kb);`);
  for (let i = 0; i < BKV / LPR; i++) {
    L.push(`    { let c = ${i * LPR}u + part; let p = exp2(Ss[srow + c] * P.c2 - lse2); Ps[prow + c] = ${h16(`select(0.0, p * (Ss[srow + ${BKV}u + c] - di), c < cnt)`)}; }`);
  }
  L.push('    workgroupBarrier();');
  for (let kk = 0; kk < BKV / K; kk++) L.push(`    let sm${kk} = ${load('Ps', 'LT', `sg * ${M * PST}u + ${kk * K}u`, false, `${PST}u`)};`);
  for (let dn = 0; dn < D / N; dn++) {
    for (let kk = 0; kk < BKV / K; kk++) {
      L.push(`    ${tileIf(s, `kb + ${kk * K}u <= rmax`)} dq${dn} = ${mma}(sm${kk}, ${kDq(kk, dn)}, dq${dn}); }`);
    }
  }
  // Staged: the next block's staging waits for every subgroup's reads of A. Direct: the scratch and Ps
  // are the subgroup's own, and the next block's first barrier orders their reuse.
  if (!direct) L.push('    workgroupBarrier();');
  L.push('  }');
  for (let dn = 0; dn < D / N; dn++) L.push(`  ${storeS(`sbase + ${dn * N}u`, `dq${dn}`)}`);
  L.push('  workgroupBarrier();', '  if (t < P.T) {', `    let ob = ((b * P.T + t) * P.nH + h) * ${D}u + part;`);
  for (let i = 0; i < D / LPR; i++) L.push(`    DQ[ob + ${i * LPR}u] = P.scale * Ss[srow + ${i * LPR}u + part];`);
  L.push('  }');
  return `${header('dq', s, emu, direct, inputs16)}
@compute @workgroup_size(${NT})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let nQB = (P.T + ${BQ - 1}u) / ${BQ}u;
  let q0 = (nQB - 1u - wid.x) * ${BQ}u;
  let b = wid.y / P.nH;
  let h = wid.y % P.nH;
  let g = h / P.G;
  let sg = ${sgIndex(s)};
  let lane = lid % ${sgSize}u;
  let r = lane / ${LPR}u;
  let part = lane % ${LPR}u;
  let t = q0 + sg * ${M}u + r;
  let rmax = q0 + sg * ${M}u + ${M - 1}u;
  let kEnd = min(P.T, q0 + ${BQ}u);
  let sbase = sg * ${M * SST}u;
  let srow = sbase + r * ${SST}u;
  let prow = sg * ${M * PST}u + r * ${PST}u;
${L.join('\n')}
}
`;
}

/**
 * The dk/dv kernel (reads the dq kernel's Di). Bindings as the fp32 dk/dv pass's (../attention.ts
 * dkdvBindings): q, k, v, dO, lse, Di, Params, dk, dv, and with `dv16` dv's f16 copy (9: packed, or
 * the twin's f32), with spec.ds the stored dS last (9 or 10). Grid: x = key block, y = b·nKV + KV head
 * (spec.ds: the chunk's pair, from pair0 = Params._p1).
 */
export function f16AttnDkdvCode(s: F16AttnSpec, o: F16AttnBwdOptions & { dv16?: 'f16' | 'f32' } = {}): string {
  const emu = !!o.emulate;
  const inputs16 = o.inputs === 'f16';
  const direct = f16AttnDirect(s, inputs16);
  const { cfg, D, BKV: BQo, sgSize } = s;
  const { M, N, K } = cfg;
  const NT = s.sgCount * sgSize;
  const LPR = sgSize / M;
  const st = f16AttnBwdStaging('dkdv', s, direct);
  const { own: BKo, KST, PST, SST } = st;
  const g: StageGen = { L: [], emu, D: s.D, NT };
  const L = g.L;
  const load = (arr: string, T: 'LT' | 'RT', off: string, colMajor: boolean, stride: string) =>
    (emu ? `emuLoad${T}_${arr}(${off}, ${stride}, ${colMajor})` : sgmatLoad(SYNTAX, T, `&${arr}`, off, colMajor, stride));
  const storeS = (off: string, v: string) => (emu ? `emuStore_Ss(${off}, ${v}, ${SST}u);` : sgmatStore(SYNTAX, '&Ss', off, v, `${SST}u`));
  const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
  const h16 = (x: string) => (emu ? `rne16(${x})` : `f16(${x})`);
  const VOFF = BKo * KST;
  const QOFF = 0;
  const OOFF = BQo * KST;
  // spec.prefetch: Q's and dO's rows alternate between two halves of A (ab), so a block's stores need not wait for the last one's reads.
  const ab = s.prefetch ? 'ab + ' : '';
  // spec.split: subgroups 2p and 2p+1 share keys 2p·M .. 2p·M+2M−1; Pᵀ and dSᵀ in one array (PD) so a subgroup picks its operand by offset.
  const split = !!s.split;
  const [Pt, Dt, DTOFF] = split ? ['PD', 'PD', BKo * PST] : ['Pt', 'Dt', 0];
  const dtOff = split ? `${DTOFF}u + ` : '';
  // Q's and dO's tiles of the query block: for Sᵀ, dPᵀ (query tile j, head-dim slice kd; col_major) and for dk, dv (query slice kk, column tile dn).
  const qS = (arr: 'q' | 'dO', j: number, kd: number) => (direct
    ? load(arr, 'RT', `qo + ${j * N}u * qst + ${kd * K}u`, true, 'qst')
    : load('A', 'RT', `${ab}${(arr === 'dO' ? OOFF : QOFF) + j * N * KST + kd * K}u`, true, `${KST}u`));
  const qD = (arr: 'q' | 'dO', kk: number, dn: number) => (direct
    ? load(arr, 'RT', `qo + ${kk * K}u * qst + ${dn * N}u`, false, 'qst')
    : load('A', 'RT', `${ab}${(arr === 'dO' ? OOFF : QOFF) + kk * K * KST + dn * N}u`, false, `${KST}u`));
  if (direct) {
    // K's and V's left tiles of the own keys straight from the f16 copies (rows past T: finite, never written out).
    L.push(`  let ko = ((b * P.T + kmin) * P.nKV + g) * ${D}u;`, `  let kvs = P.nKV * ${D}u;`, `  let qst = P.nH * ${D}u;`);
    for (let kd = 0; kd < D / K; kd++) {
      L.push(`  let km${kd} = ${load('k', 'LT', `ko + ${kd * K}u`, false, 'kvs')};`);
      L.push(`  let vm${kd} = ${load('v', 'LT', `ko + ${kd * K}u`, false, 'kvs')};`);
    }
  } else {
    stage(g, inputs16, 'k', 'P.nKV', 'g', BKo, 'k0', '0u', KST, '  ');
    stage(g, inputs16, 'v', 'P.nKV', 'g', BKo, 'k0', `${VOFF}u`, KST, '  ');
    L.push('  workgroupBarrier();');
    for (let kd = 0; kd < D / K; kd++) {
      if (split) {
        // The pair's 2·M keys: K's left tiles (even subgroup: Sᵀ, then dv) or V's (odd: dPᵀ, then dk).
        for (let mt = 0; mt < 2; mt++) L.push(`  let lm${mt}_${kd} = ${load('A', 'LT', `select(0u, ${VOFF}u, odd) + (pr0 + ${mt * M}u) * ${KST}u + ${kd * K}u`, false, `${KST}u`)};`);
        continue;
      }
      L.push(`  let km${kd} = ${load('A', 'LT', `sg * ${M * KST}u + ${kd * K}u`, false, `${KST}u`)};`);
      L.push(`  let vm${kd} = ${load('A', 'LT', `${VOFF}u + sg * ${M * KST}u + ${kd * K}u`, false, `${KST}u`)};`);
    }
  }
  // Split: ac<mt>_<dn> is dv (even subgroup) or dk (odd) of the pair's M-key tile mt.
  for (let dn = 0; dn < D / N; dn++) L.push(...(split ? [`  var ac0_${dn} = CT();`, `  var ac1_${dn} = CT();`] : [`  var dk${dn} = CT();`, `  var dv${dn} = CT();`]));
  if (!direct) L.push('  workgroupBarrier();');
  // spec.prefetch: the first block's Q and dO rows into registers now, each next block's while this one's products run.
  const pq = s.prefetch ? prefetchRows16(g, 'q', 'P.nH', BQo, 'pq') : null;
  const pd = s.prefetch ? prefetchRows16(g, 'dO', 'P.nH', BQo, 'pd') : null;
  if (pq && pd) L.push(`  ${[...pq.decl, ...pd.decl].join(' ')}`, '  var it = 0u;', ...pq.load('k0', 'g * P.G', 'true', '  '), ...pd.load('k0', 'g * P.G', 'true', '  '));
  L.push('  for (var hh = 0u; hh < P.G; hh++) {', '    let h = g * P.G + hh;');
  L.push(`    for (var qs = k0; qs < P.T; qs += ${BQo}u) {`);
  if (pq && pd) {
    L.push(`      let ab = (it & 1u) * ${2 * BQo * KST}u; // this block's half of the double-buffered Q/dO rows`, '      it += 1u;');
    L.push(...pq.store(`ab + ${QOFF}u`, KST, '      '), ...pd.store(`ab + ${OOFF}u`, KST, '      '));
    L.push(`      { var nq = qs + ${BQo}u; var nhh = hh; if (nq >= P.T) { nq = k0; nhh = hh + 1u; }`);
    L.push(...pq.load('nq', 'g * P.G + nhh', 'nhh < P.G', '        '), ...pd.load('nq', 'g * P.G + nhh', 'nhh < P.G', '        '), '      }');
    L.push(`      for (var e = lid; e < ${BQo}u; e += ${NT}u) { let tq = qs + e; let ok = tq < P.T; let i = (b * P.nH + h) * P.T + select(0u, tq, ok);`);
    L.push('        LS[e] = select(0.0, LSE[i] * LOG2E, ok); DS[e] = select(0.0, DI[i], ok); }');
    L.push('      workgroupBarrier();');
  } else if (direct) {
    // lse and Di per lane from storage (its columns' queries); the tiles from the f16 copies.
    L.push(`      let qo = ((b * P.T + qs) * P.nH + h) * ${D}u;`, '      let li = (b * P.nH + h) * P.T;');
  } else {
    stage(g, inputs16, 'q', 'P.nH', 'h', BQo, 'qs', `${QOFF}u`, KST, '      ');
    stage(g, inputs16, 'dO', 'P.nH', 'h', BQo, 'qs', `${OOFF}u`, KST, '      ');
    L.push(`      for (var e = lid; e < ${BQo}u; e += ${NT}u) { let tq = qs + e; let ok = tq < P.T; let i = (b * P.nH + h) * P.T + select(0u, tq, ok);`);
    L.push('        LS[e] = select(0.0, LSE[i] * LOG2E, ok); DS[e] = select(0.0, DI[i], ok); }');
    L.push('      workgroupBarrier();');
  }
  for (let j = 0; split && j < BQo / N; j++) {
    // Sᵀ (even) or dPᵀ (odd) of both M-key tiles: each right tile (Qᵀ's or dOᵀ's) loaded once serves two products.
    L.push(`      ${tileIf(s, `qs + ${j * N + N - 1}u >= pk0`)}`, '        var a0 = CT();', '        var a1 = CT();');
    for (let kd = 0; kd < D / K; kd++) {
      L.push(`        { let rt = ${load('A', 'RT', `${ab}select(${QOFF}u, ${OOFF}u, odd) + ${j * N * KST + kd * K}u`, true, `${KST}u`)};`);
      L.push(`          a0 = ${mma}(lm0_${kd}, rt, a0); a1 = ${mma}(lm1_${kd}, rt, a1); }`);
    }
    L.push(`        ${storeS(`pr0 * ${SST}u + select(0u, ${BQo}u, odd) + ${j * N}u`, 'a0')}`, `        ${storeS(`(pr0 + ${M}u) * ${SST}u + select(0u, ${BQo}u, odd) + ${j * N}u`, 'a1')}`, '      }');
  }
  for (let j = 0; !split && j < BQo / N; j++) {
    L.push(`      ${tileIf(s, `qs + ${j * N + N - 1}u >= kmin`)}`, '        var acc = CT();', '        var acd = CT();');
    for (let kd = 0; kd < D / K; kd++) {
      L.push(`        acc = ${mma}(km${kd}, ${qS('q', j, kd)}, acc);`);
      L.push(`        acd = ${mma}(vm${kd}, ${qS('dO', j, kd)}, acd);`);
    }
    L.push(`        ${storeS(`sbase + ${j * N}u`, 'acc')}`, `        ${storeS(`sbase + ${BQo + j * N}u`, 'acd')}`, '      }');
  }
  L.push('      workgroupBarrier();');
  // A lane's columns of its row: interleaved (i·LPR + part), or with spec.contig contiguous (part·BKV/LPR + i),
  // so the compiler may merge its Ss, LS, DS loads and Pᵀ, dSᵀ stores into wider ones.
  const col = (i: number) => (s.contig ? `part * ${BQo / LPR}u + ${i}u` : `${i * LPR}u + part`);
  // spec.colwise: a lane takes a query column (its lse·log2 e and Di read once a block) down the subgroup's key
  // rows, W lanes across the block's columns and LPC lanes a column splitting the rows; adjacent lanes, adjacent columns.
  const W = Math.min(BQo, sgSize);
  const LPC = sgSize / W;
  const colwise = (masked: boolean, ind: string) => {
    for (let j = 0; j < BQo / W; j++) {
      L.push(`${ind}{ let c = lane % ${W}u + ${j * W}u; let tq = qs + c; let ls = LS[c]; let di = DS[c];`);
      for (let k = 0; k < M / LPC; k++) {
        L.push(`${ind}  { let r = ${LPC > 1 ? `lane / ${W}u + ` : ''}${k * LPC}u; let sr = sbase + r * ${SST}u + c; let pr = sg * ${M * PST}u + r * ${PST}u + c;`);
        L.push(masked
          ? `${ind}    let vis = tq >= kmin + r && tq < P.T; let p = select(0.0, exp2(Ss[sr] * P.c2 - ls), vis); ${Pt}[pr] = ${h16('p')}; ${Dt}[${dtOff}pr] = ${h16(`select(0.0, p * (Ss[sr + ${BQo}u] - di), vis)`)}; }`
          : `${ind}    let p = exp2(Ss[sr] * P.c2 - ls); ${Pt}[pr] = ${h16('p')}; ${Dt}[${dtOff}pr] = ${h16(`p * (Ss[sr + ${BQo}u] - di)`)}; }`);
      }
      L.push(`${ind}}`);
    }
  };
  if (s.nomask) {
    // Past the diagonal block and not past T (workgroup-uniform), every own key sees every query of the block.
    L.push(`      if (qs >= k0 + ${BKo - 1}u && qs + ${BQo}u <= P.T) {`);
    if (s.colwise) colwise(false, '        ');
    for (let i = 0; !s.colwise && i < BQo / LPR; i++) {
      L.push(`        { let c = ${col(i)}; let p = exp2(Ss[srow + c] * P.c2 - LS[c]); ${Pt}[prow + c] = ${h16('p')}; ${Dt}[${dtOff}prow + c] = ${h16(`p * (Ss[srow + ${BQo}u + c] - DS[c])`)}; }`);
    }
    L.push('      } else {');
  }
  if (s.colwise) colwise(true, '      ');
  for (let i = 0; !s.colwise && i < BQo / LPR; i++) {
    L.push(`      { let c = ${col(i)}; let tq = qs + c; let vis = tq >= key && tq < P.T;`);
    if (direct) {
      L.push('        let ii = li + min(tq, P.T - 1u);');
      L.push(`        let p = select(0.0, exp2(Ss[srow + c] * P.c2 - LSE[ii] * LOG2E), vis); Pt[prow + c] = ${h16('p')};`);
      L.push(`        Dt[prow + c] = ${h16(`select(0.0, p * (Ss[srow + ${BQo}u + c] - DI[ii]), vis)`)}; }`);
    } else {
      L.push(`        let p = select(0.0, exp2(Ss[srow + c] * P.c2 - LS[c]), vis); ${Pt}[prow + c] = ${h16('p')};`);
      L.push(`        ${Dt}[${dtOff}prow + c] = ${h16(`select(0.0, p * (Ss[srow + ${BQo}u + c] - DS[c]), vis)`)}; }`);
    }
  }
  if (s.nomask) L.push('      }');
  L.push('      workgroupBarrier();');
  if (split) {
    // dv += Pᵀ·dO (even) or dk += dSᵀ·Q (odd) for both M-key tiles: each right tile loaded once serves two products.
    for (let mt = 0; mt < 2; mt++) {
      for (let kk = 0; kk < BQo / K; kk++) L.push(`      let pl${mt}_${kk} = ${load('PD', 'LT', `select(0u, ${DTOFF}u, odd) + (pr0 + ${mt * M}u) * ${PST}u + ${kk * K}u`, false, `${PST}u`)};`);
    }
    for (let dn = 0; dn < D / N; dn++) {
      for (let kk = 0; kk < BQo / K; kk++) {
        L.push(`      ${tileIf(s, `qs + ${kk * K + K - 1}u >= pk0`)} let rt = ${load('A', 'RT', `${ab}select(${OOFF}u, ${QOFF}u, odd) + ${kk * K * KST + dn * N}u`, false, `${KST}u`)};`);
        L.push(`        ac0_${dn} = ${mma}(pl0_${kk}, rt, ac0_${dn}); ac1_${dn} = ${mma}(pl1_${kk}, rt, ac1_${dn}); }`);
      }
    }
  }
  for (let kk = 0; !split && kk < BQo / K; kk++) {
    L.push(`      let pm${kk} = ${load('Pt', 'LT', `sg * ${M * PST}u + ${kk * K}u`, false, `${PST}u`)};`);
    L.push(`      let sm${kk} = ${load('Dt', 'LT', `sg * ${M * PST}u + ${kk * K}u`, false, `${PST}u`)};`);
  }
  for (let dn = 0; !split && dn < D / N; dn++) {
    for (let kk = 0; kk < BQo / K; kk++) {
      L.push(`      ${tileIf(s, `qs + ${kk * K + K - 1}u >= kmin`)}`);
      L.push(`        dv${dn} = ${mma}(pm${kk}, ${qD('dO', kk, dn)}, dv${dn});`);
      L.push(`        dk${dn} = ${mma}(sm${kk}, ${qD('q', kk, dn)}, dk${dn});`, '      }');
    }
  }
  if (s.ds) {
    // The block's dSᵀ rows to the stored dS: 8 queries a 16-byte store, within one 16×16 tile (k0 and
    // qs are multiples of 16 and 8); rows past the tiles' T and tiles below the diagonal are not stored.
    const C8 = BQo / 8;
    const put = emu
      ? `DSW[2u * w] = vec4<f32>(${Dt}[x], ${Dt}[x + 1u], ${Dt}[x + 2u], ${Dt}[x + 3u]); DSW[2u * w + 1u] = vec4<f32>(${Dt}[x + 4u], ${Dt}[x + 5u], ${Dt}[x + 6u], ${Dt}[x + 7u]);`
      : `DSW[w] = vec4<u32>(${[0, 2, 4, 6].map((i) => `bitcast<u32>(vec2<f16>(${Dt}[x${i ? ` + ${i}u` : ''}], ${Dt}[x + ${i + 1}u]))`).join(', ')});`;
    L.push(`      let dsh = (wid.y * P.G + hh) * ${F16_ATTN_DS_TILE * F16_ATTN_DS_TILE}u * ((nb * (nb + 1u)) / 2u);`);
    L.push(`      for (var e = lane; e < ${M * C8}u; e += ${sgSize}u) {`);
    L.push(`        let kq = kmin + e / ${C8}u; let tq = qs + (e % ${C8}u) * 8u; let kt = kq / 16u; let qt = tq / 16u;`);
    L.push(`        if (kq < nb * 16u && qt < nb && qt >= kt) { let x = ${dtOff}sg * ${M * PST}u + (e / ${C8}u) * ${PST}u + (e % ${C8}u) * 8u; let w = (dsh + ${dsTileStart('kt', 'qt', 'nb')} + (kq % 16u) * 16u + tq % 16u) / 8u; ${put} }`);
    L.push('      }');
  }
  // Staged: the next block's staging waits for every subgroup's reads. Direct: Ss, Pt, Dt are the
  // subgroup's own, and the next block's first barrier orders their reuse. Prefetch: the next block stages
  // into A's other half, and the block's barriers after its first order every other reuse (LS, DS, Ss, Pᵀ, dSᵀ).
  L.push(...(direct || s.prefetch ? [] : ['      workgroupBarrier();']), '    }', '  }');
  for (const [acc, out, scale] of [['dk', 'DK', 'P.scale * '], ['dv', 'DV', '']]) {
    if (split) {
      // The pair's dk (odd subgroup) or dv (even) of both M-key tiles to their scratch rows.
      L.push(`  if (${acc === 'dk' ? '' : '!'}odd) {`);
      for (let dn = 0; dn < D / N; dn++) L.push(`    ${storeS(`pr0 * ${SST}u + ${dn * N}u`, `ac0_${dn}`)}`, `    ${storeS(`(pr0 + ${M}u) * ${SST}u + ${dn * N}u`, `ac1_${dn}`)}`);
      L.push('  }');
    }
    for (let dn = 0; !split && dn < D / N; dn++) L.push(`  ${storeS(`sbase + ${dn * N}u`, `${acc}${dn}`)}`);
    L.push('  workgroupBarrier();', '  if (key < P.T) {', `    let ob = ((b * P.T + key) * P.nKV + g) * ${D}u + part;`);
    for (let i = 0; i < D / LPR; i++) L.push(`    ${out}[ob + ${i * LPR}u] = ${scale}Ss[srow + ${i * LPR}u + part];`);
    // dv's f16 copy from the same scratch row: each lane packs pairs of adjacent columns.
    if (acc === 'dv' && o.dv16) L.push(`    let wb = ((b * P.T + key) * P.nKV + g) * ${D / 2}u;`, `    for (var j = part; j < ${D / 2}u; j += ${LPR}u) { dv16_store2(wb + j, Ss[srow + 2u * j], Ss[srow + 2u * j + 1u]); }`);
    L.push('  }', '  workgroupBarrier();');
  }
  // The stored dS's binding follows dv's f16 copy's.
  const dsw = s.ds ? `\n@group(0) @binding(${o.dv16 ? 10 : 9}) var<storage, read_write> DSW: array<vec4<${emu ? 'f32' : 'u32'}>>; // the stored dS (f16AttnDsOffset; the twin: f32)\n` : '';
  return `${header('dkdv', s, emu, direct, inputs16)}${o.dv16 ? f16OutModule('dv16', 9, 2, o.dv16) : ''}${dsw}
@compute @workgroup_size(${NT})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let k0 = wid.x * ${BKo}u;${s.ds ? `
  let pair = P._p1 + wid.y; // a chunk of (b, KV head) pairs from P._p1 (attentionParams' pair0)
  let b = pair / P.nKV;
  let g = pair % P.nKV;
  let nb = (P.T + 15u) / 16u; // the stored dS's tiles a side` : `
  let b = wid.y / P.nKV;
  let g = wid.y % P.nKV;`}
  let sg = ${sgIndex(s)};
  let lane = lid % ${sgSize}u;
  let r = lane / ${LPR}u;
  let part = lane % ${LPR}u;
  let kmin = k0 + sg * ${M}u; // the subgroup's first key: queries before it see none of its keys
  let key = kmin + r;${split ? `
  let odd = (sg & 1u) == 1u; // split: the pair's second subgroup (dPᵀ, dk)
  let pr0 = (sg & ~1u) * ${M}u; // the pair's first row
  let pk0 = k0 + pr0; // and key` : ''}
  let sbase = sg * ${M * SST}u;
  let srow = sbase + r * ${SST}u;
  let prow = sg * ${M * PST}u + r * ${PST}u;
${L.join('\n')}
}
`;
}

/**
 * dq = scale·dS·K from the stored dS (spec.ds; the dk/dv kernel wrote it): a workgroup owns BQ =
 * sgCount·M query rows of one (b, h); per key block of BKV keys it stages K's rows (f16 copy) and the
 * block's dSᵀ rows (16-byte loads of the stored tiles; tiles below the diagonal, never stored, and rows
 * past the tiles are zeros) and accumulates dq in result matrices, dS's left tiles loaded col_major
 * from dSᵀ. load 'direct' (M = K = 16): no dSᵀ staging, each left tile matrix-loaded from its stored
 * tile (col_major, stride 16), those never stored skipped. Bindings: the chunk's stored dS, k's f16 copy,
 * Params (pair0 = _p1), dq. Grid: x = query block (heaviest first), y = the chunk's query head ((pair − pair0)·G + hh).
 */
export function f16AttnDqDsCode(s: F16AttnSpec, o: { emulate?: boolean } = {}): string {
  const emu = !!o.emulate;
  const { cfg, D, BKV, sgSize } = s;
  const { M, N, K } = cfg;
  const NT = s.sgCount * sgSize;
  const LPR = sgSize / M;
  const { own: BQ, KST, BST, SST, aElems, bElems, sElems } = f16AttnDqDsStaging(s);
  const E = emu ? 'f32' : 'f16';
  const g: StageGen = { L: [], emu, D, NT };
  const L = g.L;
  const load = (arr: string, T: 'LT' | 'RT', off: string, colMajor: boolean, stride: string) =>
    (emu ? `emuLoad${T}_${arr}(${off}, ${stride}, ${colMajor})` : sgmatLoad(SYNTAX, T, `&${arr}`, off, colMajor, stride));
  const storeS = (off: string, v: string) => (emu ? `emuStore_Ss(${off}, ${v}, ${SST}u);` : sgmatStore(SYNTAX, '&Ss', off, v, `${SST}u`));
  const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
  // spec.wide: the subgroup's MT = 2 row tiles (rows sg·2M ..), dq<mt>_<dn>; each K tile loaded serves both.
  const MT = s.wide ? 2 : 1;
  const dqv = (mt: number, dn: number) => (MT > 1 ? `dq${mt}_${dn}` : `dq${dn}`);
  for (let dn = 0; dn < D / N; dn++) for (let mt = 0; mt < MT; mt++) L.push(`  var ${dqv(mt, dn)} = CT();`);
  // load 'direct': dS's left tiles matrix-loaded from the stored tiles (M = K = 16: a row tile and a key slice are one tile), no Bs.
  const direct = s.load === 'direct';
  if (direct) L.push(`  let qt0 = (q0 + sg * ${MT * M}u) / 16u; // the subgroup's first row tile's stored-tile row`);
  L.push(`  for (var kb = 0u; kb < kEnd; kb += ${BKV}u) {`);
  stageRows16(g, 'A', 'k', 'P.nKV', 'g', BKV, 'kb', '0u', KST, '    ');
  // dSᵀ rows kb.. of the own queries q0..: 8 queries a load, each within one stored tile (q0 and the chunk's columns are multiples of 8).
  const C8 = BQ / 8;
  const per = direct ? 0 : Math.ceil((BKV * C8) / NT);
  for (let i = 0; i < per; i++) {
    const guard = (i + 1) * NT > BKV * C8 ? `e < ${BKV * C8}u` : 'true';
    L.push(`    { let e = lid + ${i * NT}u; let rr = e / ${C8}u; let c8 = e % ${C8}u; let kq = kb + rr; let tq = q0 + c8 * 8u; let kt = kq / 16u; let qt = tq / 16u;`);
    L.push(`      if (${guard}) { let ok = kq < nb * 16u && qt < nb && qt >= kt; let w = select(0u, (dsh + ${dsTileStart('kt', 'qt', 'nb')} + (kq % 16u) * 16u + tq % 16u) / 8u, ok);`);
    L.push(emu
      ? '        let lo = select(vec4<f32>(), DS[2u * w], ok); let hi = select(vec4<f32>(), DS[2u * w + 1u], ok);'
      : '        let x = select(vec4<u32>(), DS[w], ok); let lo = bitcast<vec4<f16>>(x.xy); let hi = bitcast<vec4<f16>>(x.zw);');
    L.push(`        let s0 = rr * ${BST}u + c8 * 8u; ${put8('Bs')} } }`);
  }
  L.push('    workgroupBarrier();');
  // Key slices wholly past the subgroup's last row are zeros: skipped (subgroup-uniform).
  for (let kk = 0; direct && kk < BKV / K; kk++) {
    // A row tile's stored tiles end at its diagonal tile (kt ≤ qt) and at the tiles' side (row tiles past T: qt ≥ nb).
    L.push(`    ${tileIf(s, `kb + ${kk * K}u <= rmax`)} let kt = kb / 16u + ${kk}u;`);
    for (let dn = 0; dn < D / N; dn++) L.push(`      let rt${dn} = ${load('A', 'RT', `${kk * K * KST + dn * N}u`, false, `${KST}u`)};`);
    for (let mt = 0; mt < MT; mt++) {
      L.push(`      { let qt = qt0 + ${mt}u; if (kt <= qt && qt < nb) { let sm = ${load('DS', 'LT', `dsh + ${dsTileStart('kt', 'qt', 'nb')}`, true, '16u')};`);
      L.push(`        ${Array.from({ length: D / N }, (_, dn) => `${dqv(mt, dn)} = ${mma}(sm, rt${dn}, ${dqv(mt, dn)});`).join(' ')} } }`);
    }
    L.push('    }');
  }
  for (let kk = 0; !direct && kk < BKV / K; kk++) {
    L.push(`    ${tileIf(s, `kb + ${kk * K}u <= rmax`)}`);
    for (let mt = 0; mt < MT; mt++) L.push(`      let sm${mt} = ${load('Bs', 'LT', `${kk * K * BST + mt * M}u + sg * ${MT * M}u`, true, `${BST}u`)};`);
    for (let dn = 0; dn < D / N; dn++) {
      L.push(`      { let rt = ${load('A', 'RT', `${kk * K * KST + dn * N}u`, false, `${KST}u`)};`);
      L.push(`        ${Array.from({ length: MT }, (_, mt) => `${dqv(mt, dn)} = ${mma}(sm${mt}, rt, ${dqv(mt, dn)});`).join(' ')} }`);
    }
    L.push('    }');
  }
  L.push('    workgroupBarrier();', '  }');
  // Each row tile through the scratch (the subgroup's M rows of it), then written out by its lanes.
  for (let mt = 0; mt < MT; mt++) {
    for (let dn = 0; dn < D / N; dn++) L.push(`  ${storeS(`sbase + ${dn * N}u`, dqv(mt, dn))}`);
    L.push('  workgroupBarrier();', `  if (t + ${mt * M}u < P.T) {`, `    let ob = ((b * P.T + t + ${mt * M}u) * P.nH + h) * ${D}u + part;`);
    for (let i = 0; i < D / LPR; i++) L.push(`    DQ[ob + ${i * LPR}u] = P.scale * Ss[srow + ${i * LPR}u + part];`);
    L.push('  }');
    if (mt + 1 < MT) L.push('  workgroupBarrier();');
  }
  const types = f16MatrixTypes(s.cfg, emu);
  const X = f16InputType(false, emu);
  return `${s.uniform ? 'enable subgroups;\n' : ''}${emu ? '' : 'enable f16;\nenable chromium_experimental_subgroup_matrix;\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n'}// Generated by src/engine/kernels/attention/f16/code-bwd.ts: dq from the stored dS${direct ? ' (its tiles matrix-loaded as stored)' : ''}, ${M}x${N}x${K} tiles, ${BQ} own rows (${s.sgCount} sg), BKV ${BKV}, D ${D}${emu ? ' (emulated matrices, f32)' : ''}.
${types}
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<storage, read> DS: ${direct ? f16InputType(true, emu) : X}; // the chunk's stored dS (f16AttnDsOffset)
@group(0) @binding(1) var<storage, read> k: ${X};
@group(0) @binding(2) var<uniform> P: Params;
@group(0) @binding(3) var<storage, read_write> DQ: array<f32>;
var<workgroup> A: array<${E}, ${aElems}>; // K's rows of the key block
${direct ? '' : `var<workgroup> Bs: array<${E}, ${bElems}>; // dSᵀ: the block's key rows of the own queries\n`}var<workgroup> Ss: array<f32, ${sElems}>; // per subgroup M rows of dq
${emu ? emulation(cfg, [['A', 'RT'], [direct ? 'DS' : 'Bs', 'LT']], ['Ss']) : ''}
@compute @workgroup_size(${NT})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let nQB = (P.T + ${BQ - 1}u) / ${BQ}u;
  let q0 = (nQB - 1u - wid.x) * ${BQ}u;
  let pair = P._p1 + wid.y / P.G;
  let b = pair / P.nKV;
  let g = pair % P.nKV;
  let h = g * P.G + wid.y % P.G;
  let nb = (P.T + 15u) / 16u; // the stored dS's tiles a side
  let dsh = wid.y * ${F16_ATTN_DS_TILE * F16_ATTN_DS_TILE}u * ((nb * (nb + 1u)) / 2u);
  let sg = ${sgIndex(s)};
  let lane = lid % ${sgSize}u;
  let r = lane / ${LPR}u;
  let part = lane % ${LPR}u;
  let t = q0 + sg * ${MT * M}u + r; // this lane's row in the subgroup's first row tile
  let rmax = q0 + sg * ${MT * M}u + ${MT * M - 1}u;
  let kEnd = min(P.T, q0 + ${BQ}u);
  let sbase = sg * ${M * SST}u;
  let srow = sbase + r * ${SST}u;
${L.join('\n')}
}
`;
}
