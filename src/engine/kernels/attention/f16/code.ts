/**
 * Causal grouped-query flash attention, forward, on subgroup matrices with f16 operands and f32
 * accumulation (Dawn's `chromium-experimental-subgroup-matrix`, an f16 → f32 configuration). The
 * maths and layouts are the fp32 kernel's (../attention.ts, ../attention.ref.ts): q, o [B, T, nH, D],
 * k, v [B, T, nKV, D], lse [B, nH, T] (natural log), so the fp32 backward consumes o and lse as is.
 *
 * A workgroup takes BQ = sgCount·M query rows of one (b, h); subgroup s owns rows s·M .. s·M+M-1.
 * - Q, then each block of BKV keys' K and V, are staged through workgroup memory by vector loads
 *   (spec.load 'staged', the default): from f16 copies (`inputs: 'f16'`, the model's: RoPE writes q's
 *   and k's, a cast v's) 8 elements a 16-byte load, or from fp32 q, k, v cast as they are staged. With
 *   load 'direct' the matrix loads read Q's, K's (col_major) and V's tiles straight from the f16 copies
 *   (slower on Dawn/Vulkan: a matrix load from storage is no ldmatrix). Q's D/K left tiles are held in
 *   subgroup matrices across the key loop.
 * - S = Q·Kᵀ per N-key tile, stored f32 to the subgroup's scratch rows (subgroup matrices have no
 *   element access); the softmax is SIMT: LPR = sgSize/M lanes per query row, each holding the
 *   row's running max (log2 domain, fp32), its share of the row sum, and D/LPR columns of the fp32 O;
 *   each lane takes the max of its columns and the row's lanes combine them by subgroup shuffles.
 *   P = exp2(s·scale·log2e − m) is written as f16.
 * - P·V per N-column tile of D into a fresh result matrix per key block, stored to a scratch
 *   and folded into the lanes' O after the rescale by exp2(m_old − m_new).
 * - Tiles wholly above the diagonal for a subgroup are skipped (not with spec.dense), and key blocks wholly below its
 *   first row take the softmax without a mask (the tests are per subgroup, so subgroup-uniform;
 *   Dawn's uniformity diagnostic cannot see that and is turned off).
 *
 * `emulate`: the same kernel over f32 workgroup storage with each subgroup-matrix operation a plain
 * function every lane runs in full and each f16 cast rounded to f16 to nearest even in f32 (rne16:
 * the GPU's f32 → f16 conversion and quant/f16.ts's; SwiftShader's quantizeToF16 truncates), so CI
 * (SwiftShader: no f16, no subgroup matrices) tests the generated kernel's staging, masking, online
 * softmax, tiling and GQA indexing; only the matrix instructions differ.
 */
import { f16OutModule } from '../../matmul-f16/cast';
import { emulatedSgmatWgsl, f16MatrixTypes, sgmatLoad, sgmatStore } from '../../qgemm/sgmat';

export interface F16AttnSpec {
  /** The f16 → f32 subgroup-matrix configuration (M×N×K of a tile). */
  cfg: { M: number; N: number; K: number };
  /** Head dim: a multiple of 4, of cfg.N and of cfg.K. */
  D: number;
  /** Subgroups per workgroup; BQ = sgCount·cfg.M query rows. */
  sgCount: number;
  /** Keys per block: a multiple of cfg.N and cfg.K. */
  BKV: number;
  /** Invocations per subgroup (the adapter's subgroupMaxSize); a multiple of cfg.M. */
  sgSize: number;
  /** Padding elements per staged f16 row (a multiple of 8: rows stay 16-byte aligned). */
  PAD: number;
  /**
   * From f16 q/k/v (dO) copies: 'staged' (default) stages tiles through workgroup memory with vector
   * loads, then matrix-loads them from there; 'direct' matrix-loads them from storage (no staging).
   * fp32 inputs are always staged.
   */
  load?: 'staged' | 'direct';
  /**
   * Backward only, both kernels of a pair: the dk/dv kernel also stores dS (f16, f16AttnDsOffset's
   * tiles) and dq = scale·dS·K is a GEMM over it (code-bwd.ts f16AttnDqDsCode) instead of a kernel
   * that rebuilds S, P and dP.
   */
  ds?: boolean;
  /**
   * dk/dv only (staged): subgroups work in pairs over 2·M keys, one computing Sᵀ and dv, the other dPᵀ
   * and dk, so each right tile (Q's, dO's) loaded from workgroup memory serves two products.
   */
  split?: boolean;
  /**
   * dk/dv only (staged f16 copies): each next query block's rows are loaded into registers while this
   * block's products run, and staged into the other half of a double buffer (3 barriers a block, not 4).
   */
  prefetch?: boolean;
  /** dq from the stored dS only: each subgroup takes 2·M query rows, so each K tile loaded serves two products (BQ = 2·sgCount·M). */
  wide?: boolean;
  /** dk/dv only: each lane's columns of its softmax row are contiguous instead of interleaved (wider workgroup loads and stores possible). */
  contig?: boolean;
  /**
   * Every kernel: no per-tile causal skips, so a block's products are one straight-line run the compiler
   * may interleave (a skip's test names the subgroup, which the compiler takes for divergent: each product
   * sits behind its own branch). Masked tiles multiply zeros (their P and dS are 0), which adds nothing.
   */
  dense?: boolean;
  /**
   * Every kernel: the subgroup index read through subgroupBroadcastFirst, so the compiler knows it is the
   * same across the subgroup and the skip tests that name it are uniform branches (the skips kept).
   */
  uniform?: boolean;
  /** dk/dv only (staged): a query block all the workgroup's keys see wholly computes Pᵀ and dSᵀ without the mask's compares and selects. */
  nomask?: boolean;
  /** dk/dv only (staged): the Pᵀ/dSᵀ SIMT by columns, a lane taking a query (its lse and Di read once a block) down the subgroup's key rows. */
  colwise?: boolean;
}

/** Whether a kernel matrix-loads its operands straight from storage: f16 inputs (`inputs16`) and load 'direct'. */
export const f16AttnDirect = (s: Pick<F16AttnSpec, 'load'>, inputs16: boolean) => inputs16 && s.load === 'direct';

export const f16AttnBlockQ = (s: Pick<F16AttnSpec, 'cfg' | 'sgCount' | 'wide'>) => s.cfg.M * s.sgCount * (s.wide ? 2 : 1);
export const f16AttnThreads = (s: Pick<F16AttnSpec, 'sgCount' | 'sgSize'>) => s.sgCount * s.sgSize;

/** Rows past the last token a kernel reading f16 q/k/v copies may load (a Q tile of the last query block, a K/V tile of the last key block): the copies' bindings reach that far (f16AttnInputElems). */
export const f16AttnInputPadRows = (s: Pick<F16AttnSpec, 'cfg' | 'sgCount' | 'BKV'>) => Math.max(f16AttnBlockQ(s), s.BKV);

/** The most pad rows any spec may need: f16 q/k/v buffers are sized for it (specs needing more are refused). */
export const F16_ATTN_MAX_PAD_ROWS = 128;

/**
 * Elements an f16 q/k/v copy's binding must cover: rows·width, plus F16_ATTN_MAX_PAD_ROWS rows the
 * matrix loads of the last blocks read (finite values: zeros or other data; they feed masked scores only).
 */
export const f16AttnInputElems = (rows: number, width: number) => (rows + F16_ATTN_MAX_PAD_ROWS) * width;

/** Row strides and element counts of the workgroup arrays (f16 elements for KV and Ps, f32 for Ss); `direct`: no K/V staging (f16 inputs). */
export function f16AttnStaging(s: F16AttnSpec, direct = false) {
  const BQ = f16AttnBlockQ(s);
  const KST = s.D + s.PAD;
  const PST = s.BKV + s.PAD;
  const SST = Math.max(s.BKV, s.D) + 4;
  // Q is staged once through the K/V area before the loop: it must hold BQ rows too.
  const kvElems = direct ? 0 : Math.max(2 * s.BKV, BQ) * KST;
  const pElems = s.sgCount * s.cfg.M * PST;
  const sElems = s.sgCount * s.cfg.M * SST;
  return { KST, PST, SST, VOFF: s.BKV * KST, kvElems, pElems, sElems };
}

/**
 * Bytes of workgroup memory (f16 operand arrays, the f32 scratch; twice the f16 part when emulated
 * over f32). Direct (f16 inputs, load 'direct'): no K/V area, and P·V's block result gets its own scratch (Os), so the next
 * block's S stores need no barrier after the O reads.
 */
export function f16AttnWorkgroupBytes(s: F16AttnSpec, emulate = false, inputs16 = false): number {
  const direct = f16AttnDirect(s, inputs16);
  const st = f16AttnStaging(s, direct);
  const e = emulate ? 4 : 2;
  return Math.ceil((st.kvElems * e) / 4) * 4 + Math.ceil((st.pElems * e) / 4) * 4 + (direct ? 2 : 1) * st.sElems * 4;
}

/** Why a spec cannot be built (null when it can); `inputs16`: the forward reading f16 q/k/v copies (staged or direct: spec.load). */
export function f16AttnSpecError(s: F16AttnSpec, maxWorkgroupBytes = 49152, maxThreads = 1024, emulate = false, inputs16 = false): string | null {
  const { cfg } = s;
  const direct = f16AttnDirect(s, inputs16);
  if (s.D % 4 || s.D % cfg.N || s.D % cfg.K) return `head dim ${s.D} must be a multiple of 4, N=${cfg.N} and K=${cfg.K}`;
  if (s.BKV % cfg.N || s.BKV % cfg.K) return `BKV=${s.BKV} must be a multiple of N=${cfg.N} and K=${cfg.K}`;
  if (s.sgSize % cfg.M) return `subgroup size ${s.sgSize} must be a multiple of M=${cfg.M}`;
  const lpr = s.sgSize / cfg.M;
  if (lpr & (lpr - 1)) return `${lpr} lanes per row must be a power of two (the row max is combined by subgroup shuffles)`;
  if (s.D % lpr || s.BKV % lpr) return `D=${s.D} and BKV=${s.BKV} must split over ${lpr} lanes per row`;
  if (s.PAD % 8) return `PAD=${s.PAD} must be a multiple of 8`;
  if (s.load !== undefined && s.load !== 'staged' && s.load !== 'direct') return `load '${s.load as string}' must be 'staged' or 'direct'`;
  const bwdOnly = (['ds', 'split', 'prefetch', 'wide', 'contig', 'nomask', 'colwise'] as const).find((k) => s[k]);
  if (bwdOnly) return `${bwdOnly === 'ds' ? 'ds (the stored dS)' : bwdOnly} is an option of the backward's kernels`;
  if (s.load === 'direct' && !inputs16) return "load 'direct' reads f16 q/k/v copies: fp32 inputs are staged (load 'staged')";
  if (inputs16 && !direct && s.D % 8) return `head dim ${s.D}: staging f16 copies 8 elements a load needs a multiple of 8`;
  if (direct && f16AttnInputPadRows(s) > F16_ATTN_MAX_PAD_ROWS) return `blocks of ${f16AttnInputPadRows(s)} rows read past the f16 inputs' ${F16_ATTN_MAX_PAD_ROWS} pad rows`;
  const T = f16AttnThreads(s);
  if (T > maxThreads) return `${T} threads per workgroup`;
  const bytes = f16AttnWorkgroupBytes(s, emulate, inputs16);
  if (bytes > maxWorkgroupBytes) return `${bytes} bytes of workgroup memory`;
  return null;
}

export function f16AttnLabel(s: F16AttnSpec): string {
  return `f16 attention D${s.D} ${s.cfg.M}x${s.cfg.N}x${s.cfg.K} BQ${f16AttnBlockQ(s)} (${s.sgCount} sg) BKV${s.BKV} pad${s.PAD}${s.load === 'direct' ? ' direct' : ''}${s.split ? ' split' : ''}${s.prefetch ? ' prefetch' : ''}${s.wide ? ' wide' : ''}${s.contig ? ' contig' : ''}${s.dense ? ' dense' : ''}${s.uniform ? ' uniform' : ''}${s.nomask ? ' nomask' : ''}${s.colwise ? ' colwise' : ''}${s.ds ? ' ds' : ''}`;
}

/** The subgroup index (spec.uniform: through subgroupBroadcastFirst, which needs `enable subgroups`). */
export const sgIndex = (s: Pick<F16AttnSpec, 'uniform' | 'sgSize'>) => (s.uniform ? `subgroupBroadcastFirst(lid / ${s.sgSize}u)` : `lid / ${s.sgSize}u`);

/** The opening of a tile's products: behind its causal skip test `cond`, or (spec.dense) a plain block. */
export const tileIf = (s: Pick<F16AttnSpec, 'dense'>, cond: string) => (s.dense ? '{' : `if (${cond}) {`);

/** What a generator's staging writes into: its lines, the emulated twin or not, the head dim, the threads. */
export interface StageGen { L: string[]; emu: boolean; D: number; NT: number }

/**
 * Stages `rows` head rows of fp32 `src` (rows row0.., head `head` of `heads`), D/4 vec4s each, as f16
 * (the twin: f16-rounded f32) into workgroup array `arr` from element `dst`, rows KST apart; rows
 * past T are zero. Every thread takes vec4s lid, lid + NT, ...: the forward's and the backward's kernels.
 */
export function stageRows(g: StageGen, arr: string, src: string, heads: string, head: string, rows: number, row0: string, dst: string, KST: number, indent: string): void {
  const DV = g.D / 4;
  const per = Math.ceil((rows * DV) / g.NT);
  const cast = (x: string) => (g.emu ? `rne16v(${x})` : `vec4<f16>(${x})`);
  for (let t = 0; t < per; t++) {
    g.L.push(`${indent}{ let e = lid + ${t * g.NT}u; let rr = e / ${DV}u; let c = e % ${DV}u; let j = ${row0} + rr;`);
    const guard = (t + 1) * g.NT > rows * DV ? `e < ${rows * DV}u` : 'true';
    g.L.push(`${indent}  if (${guard}) { let ok = j < P.T; let x = ${cast(`select(vec4<f32>(), ${src}[select(0u, ((b * P.T + j) * ${heads} + ${head}) * ${DV}u + c, ok)], ok)`)};`);
    g.L.push(`${indent}    let s0 = ${dst} + rr * ${KST}u + c * 4u; ${arr}[s0] = x.x; ${arr}[s0 + 1u] = x.y; ${arr}[s0 + 2u] = x.z; ${arr}[s0 + 3u] = x.w; } }`);
  }
}

/**
 * stageRows from an f16 copy `src` (f16AttnInputElems rows): bound as vec4<u32>, 8 elements a 16-byte
 * load split by bitcast (the twin: array<vec4<f32>> holding f16 values, two vec4s a load), D/8 loads a
 * row, stored as they are (no cast); rows past T are zero.
 */
export function stageRows16(g: StageGen, arr: string, src: string, heads: string, head: string, rows: number, row0: string, dst: string, KST: number, indent: string): void {
  const DV = g.D / 8;
  const per = Math.ceil((rows * DV) / g.NT);
  for (let t = 0; t < per; t++) {
    g.L.push(`${indent}{ let e = lid + ${t * g.NT}u; let rr = e / ${DV}u; let c = e % ${DV}u; let j = ${row0} + rr;`);
    const guard = (t + 1) * g.NT > rows * DV ? `e < ${rows * DV}u` : 'true';
    g.L.push(`${indent}  if (${guard}) { let ok = j < P.T; let i = select(0u, ((b * P.T + j) * ${heads} + ${head}) * ${DV}u + c, ok);`);
    g.L.push(g.emu
      ? `${indent}    let lo = select(vec4<f32>(), ${src}[2u * i], ok); let hi = select(vec4<f32>(), ${src}[2u * i + 1u], ok);`
      : `${indent}    let w = select(vec4<u32>(), ${src}[i], ok); let lo = bitcast<vec4<f16>>(w.xy); let hi = bitcast<vec4<f16>>(w.zw);`);
    g.L.push(`${indent}    let s0 = ${dst} + rr * ${KST}u + c * 8u; ${put8(arr)} } }`);
  }
}

/** Stores vec4s `lo`, `hi` (8 f16 elements, or the twin's f32) into `arr` from element `s0`: the staging's one store per element. */
export const put8 = (arr: string) => [0, 1, 2, 3, 4, 5, 6, 7].map((x) => `${arr}[s0${x ? ` + ${x}u` : ''}] = ${x < 4 ? 'lo' : 'hi'}.${'xyzw'[x % 4]};`).join(' ');

/** An f16 copy's binding type: direct matrix loads read elements; staging reads 16-byte vectors (the twin: f32 vec4s). */
export const f16InputType = (direct: boolean, emu: boolean) => (direct ? `array<${emu ? 'f32' : 'f16'}>` : emu ? 'array<vec4<f32>>' : 'array<vec4<u32>>');

/** The layout spelling this kernel writes: subgroupMatrixLoad<T, row_major|col_major>(p, off, stride). */
const SYNTAX = { syntax: 'template' } as const;

/** How the forward reads q, k, v and finds a row's max (the earlier choices stay for side-by-side timing: bench/f16-attn-device.ts --compare). */
export interface F16AttnFwdOptions {
  emulate?: boolean;
  /** Also write o's f16 copy (binding 6: packed, or the twin's f32). */
  o16?: 'f16' | 'f32';
  /**
   * 'f16': q, k, v are f16 copies (the twin: f32 holding f16 values, as `emulate`), staged by vector
   * loads or (spec.load 'direct') read by the matrix loads from storage (K col_major); 'f32' (default):
   * fp32 q, k, v staged through workgroup memory and cast there.
   */
  inputs?: 'f16' | 'f32';
  /** 'split' (default): each of a row's lanes takes the max of its columns, combined by subgroup shuffles; 'scan': every lane scans the whole row. */
  rowMax?: 'split' | 'scan';
}

/**
 * The forward's WGSL. Bindings: q, k, v (fp32, or f16 copies: `inputs`), o, lse (fp32), the fp32 kernels' Params uniform
 * (attentionParams), and with `o16` o's f16 copy (6: packed, or the twin's f32). Grid: x = query block (heaviest causal block first), y = b·nH + h.
 */
export function f16AttnForwardCode(s: F16AttnSpec, o: F16AttnFwdOptions = {}): string {
  const emu = !!o.emulate;
  const inputs16 = o.inputs === 'f16';
  const direct = f16AttnDirect(s, inputs16);
  const E = emu ? 'f32' : 'f16';
  const { cfg, D, BKV, sgSize } = s;
  const { M, N, K } = cfg;
  const BQ = f16AttnBlockQ(s);
  const NT = f16AttnThreads(s);
  const LPR = sgSize / M;
  const st = f16AttnStaging(s, direct);
  const { KST, PST, SST, VOFF } = st;
  const scast = (x: string) => (emu ? `rne16(${x})` : `f16(${x})`);
  const load = (arr: string, T: 'LT' | 'RT', off: string, colMajor: boolean, stride: string) =>
    (emu ? `emuLoad${T}_${arr}(${off}, ${stride}, ${colMajor})` : sgmatLoad(SYNTAX, T, `&${arr}`, off, colMajor, stride));
  // P·V's block result: its own scratch when reading f16 inputs (no barrier between its reads and the next S stores), else S's.
  const OS = direct ? 'Os' : 'Ss';
  const store = (arr: string, off: string, v: string) => (emu ? `emuStore_${arr}(${off}, ${v}, ${SST}u);` : sgmatStore(SYNTAX, `&${arr}`, off, v, `${SST}u`));
  const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
  // Tiles: K's for key tile j and head-dim slice kd (col_major: Kᵀ), V's for key slice kk and column tile dn.
  const kTile = (j: number, kd: number) => (direct
    ? load('k', 'RT', `kvo + ${j * N}u * kvs + ${kd * K}u`, true, 'kvs')
    : load('KV', 'RT', `${j * N * KST + kd * K}u`, true, `${KST}u`));
  const vTile = (kk: number, dn: number) => (direct
    ? load('v', 'RT', `kvo + ${kk * K}u * kvs + ${dn * N}u`, false, 'kvs')
    : load('KV', 'RT', `${VOFF + kk * K * KST + dn * N}u`, false, `${KST}u`));
  const L: string[] = [];
  // Staging into KV: q (nH heads, head h), k and v (nKV, head g); rows past T are zero (their scores are masked, their P is 0).
  const g: StageGen = { L, emu, D, NT };
  const stage = (src: 'q' | 'k' | 'v', rows: number, row0: string, dst: number, indent: string) =>
    (inputs16 ? stageRows16 : stageRows)(g, 'KV', src, src === 'q' ? 'P.nH' : 'P.nKV', src === 'q' ? 'h' : 'g', rows, row0, `${dst}u`, KST, indent);
  if (direct) {
    // Q's D/K left tiles straight from the f16 copy, held in matrices across the key loop. Rows past T
    // read the next batch row's or the copy's pad rows (f16AttnInputElems): finite, and only their own rows use them.
    L.push('  let qo = ((b * P.T + q0 + sg * ' + M + 'u) * P.nH + h) * ' + D + 'u;', `  let qs = P.nH * ${D}u;`, `  let kvs = P.nKV * ${D}u;`);
    for (let kd = 0; kd < D / K; kd++) L.push(`  let qm${kd} = ${load('q', 'LT', `qo + ${kd * K}u`, false, 'qs')};`);
  } else {
    // Q: staged, then its D/K left tiles per subgroup held in matrices across the key loop.
    stage('q', BQ, 'q0', 0, '  ');
    L.push('  workgroupBarrier();');
    for (let kd = 0; kd < D / K; kd++) L.push(`  let qm${kd} = ${load('KV', 'LT', `sg * ${M * KST}u + ${kd * K}u`, false, `${KST}u`)};`);
    L.push('  workgroupBarrier();');
  }
  L.push(`  for (var kb = 0u; kb < kEnd; kb += ${BKV}u) {`);
  if (direct) {
    // Key rows past T (the last block) read finite data as Q's do: their scores are masked and their P is 0.
    L.push('    let kvo = ((b * P.T + kb) * P.nKV + g) * ' + D + 'u;');
  } else {
    stage('k', BKV, 'kb', 0, '    ');
    stage('v', BKV, 'kb', VOFF, '    ');
    L.push('    workgroupBarrier();');
  }
  // S = Q·Kᵀ, one N-key tile at a time; a tile whose first key is past the subgroup's last row is skipped.
  for (let j = 0; j < BKV / N; j++) {
    L.push(`    ${tileIf(s, `kb + ${j * N}u <= rmax`)}`, '      var acc = CT();');
    for (let kd = 0; kd < D / K; kd++) L.push(`      acc = ${mma}(qm${kd}, ${kTile(j, kd)}, acc);`);
    L.push(`      ${store('Ss', `sbase + ${j * N}u`, 'acc')}`, '    }');
  }
  L.push('    workgroupBarrier();');
  // Online softmax: the row's visible keys in this block are kb .. kb+cnt-1.
  const cols = Array.from({ length: BKV / LPR }, (_, i) => `${i * LPR}u + part`);
  if (o.rowMax === 'scan') {
    L.push('    let cnt = select(0u, min(' + BKV + 'u, t + 1u - kb), t >= kb);');
    L.push('    var mx = m;');
    L.push(`    for (var c = 0u; c < cnt; c++) { mx = max(mx, Ss[srow + c] * P.c2); }`);
    L.push('    let alpha = exp2(m - mx);', '    m = mx;', '    var ls = 0.0;');
    cols.forEach((c) => L.push(`    { let c = ${c}; let p = select(0.0, exp2(Ss[srow + c] * P.c2 - mx), c < cnt); Ps[prow + c] = ${scast('p')}; ls += p; }`));
  } else {
    // Each lane reads its columns once (scaled scores, log2 domain; masked ones NEG), takes their max,
    // and the row's LPR lanes combine theirs by shuffles. A block wholly before the subgroup's first
    // row (subgroup-uniform) has no masked key: no compare or select.
    L.push(`    ${cols.map((_, i) => `var x${i}: f32;`).join(' ')}`);
    L.push(`    if (kb + ${BKV}u <= q0 + sg * ${M}u) {`);
    cols.forEach((c, i) => L.push(`      x${i} = Ss[srow + ${c}] * P.c2;`));
    L.push('    } else {', '      let cnt = select(0u, min(' + BKV + 'u, t + 1u - kb), t >= kb);');
    cols.forEach((c, i) => L.push(`      x${i} = select(NEG, Ss[srow + ${c}] * P.c2, ${c} < cnt);`));
    L.push('    }');
    L.push(`    var mx = max(m, ${cols.length > 1 ? cols.map((_, i) => `x${i}`).reduce((a, b) => `max(${a}, ${b})`) : 'x0'});`);
    for (let x = 1; x < LPR; x *= 2) L.push(`    mx = max(mx, subgroupShuffleXor(mx, ${x}u));`);
    L.push('    let alpha = exp2(m - mx);', '    m = mx;', '    var ls = 0.0;');
    // A masked key: exp2(NEG − mx) = 0 (mx is finite: key 0 is in every row's first block).
    cols.forEach((c, i) => L.push(`    { let p = exp2(x${i} - mx); Ps[prow + ${c}] = ${scast('p')}; ls += p; }`));
  }
  L.push('    l = l * alpha + ls;');
  for (let i = 0; i < D / LPR; i++) L.push(`    o${i} *= alpha;`);
  L.push('    workgroupBarrier();');
  // O_block = P·V, one N-column tile of D at a time, into the subgroup's O scratch rows.
  for (let kk = 0; kk < BKV / K; kk++) L.push(`    let pm${kk} = ${load('Ps', 'LT', `sg * ${M * PST}u + ${kk * K}u`, false, `${PST}u`)};`);
  for (let dn = 0; dn < D / N; dn++) {
    L.push('    {', '      var acc = CT();');
    for (let kk = 0; kk < BKV / K; kk++) L.push(`      ${tileIf(s, `kb + ${kk * K}u <= rmax`)} acc = ${mma}(pm${kk}, ${vTile(kk, dn)}, acc); }`);
    L.push(`      ${store(OS, `sbase + ${dn * N}u`, 'acc')}`, '    }');
  }
  L.push('    workgroupBarrier();');
  for (let i = 0; i < D / LPR; i++) L.push(`    o${i} += ${OS}[srow + ${i * LPR}u + part];`);
  L.push('  }');
  // The row sum is split over the row's LPR lanes: combined by shuffles (uniform control flow: after the loop).
  L.push('  var lt = l;');
  for (let x = 1; x < LPR; x *= 2) L.push(`  lt += subgroupShuffleXor(lt, ${x}u);`);
  L.push('  if (t < P.T) {', '    let inv = 1.0 / lt;', `    let ob = ((b * P.T + t) * P.nH + h) * ${D}u + part;`);
  for (let i = 0; i < D / LPR; i++) L.push(`    O[ob + ${i * LPR}u] = o${i} * inv;`);
  L.push('    if (part == 0u) { LSE[(b * P.nH + h) * P.T + t] = (m + log2(lt)) * LN2; }', '  }');
  if (o.o16) {
    // o's f16 copy (o_proj's f16 GEMM reads it): a lane's columns are LPR apart, so the row goes
    // through its scratch row and each lane packs pairs of adjacent columns (the same f32 values as O).
    L.push('  workgroupBarrier();', '  { let inv = 1.0 / lt;');
    for (let i = 0; i < D / LPR; i++) L.push(`    Ss[srow + ${i * LPR}u + part] = o${i} * inv;`);
    L.push('  }', '  workgroupBarrier();', '  if (t < P.T) {', `    let wb = ((b * P.T + t) * P.nH + h) * ${D / 2}u;`);
    L.push(`    for (var j = part; j < ${D / 2}u; j += ${LPR}u) { o16_store2(wb + j, Ss[srow + 2u * j], Ss[srow + 2u * j + 1u]); }`, '  }');
  }

  const types = f16MatrixTypes(s.cfg, emu);
  const oDecl = Array.from({ length: D / LPR }, (_, i) => `o${i}`);
  const X = f16InputType(direct, emu);
  const qkv = inputs16
    ? `@group(0) @binding(0) var<storage, read> q: ${X}; // f16 copies [B·T + pad rows, heads, D]
@group(0) @binding(1) var<storage, read> k: ${X};
@group(0) @binding(2) var<storage, read> v: ${X};`
    : `@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;`;
  const emuLoads: [string, 'LT' | 'RT'][] = direct ? [['q', 'LT'], ['k', 'RT'], ['v', 'RT'], ['Ps', 'LT']] : [['KV', 'LT'], ['KV', 'RT'], ['Ps', 'LT']];
  const shuffles = LPR > 1 || s.uniform ? 'enable subgroups;\n' : ''; // the row sum (and max) over a row's lanes; spec.uniform's broadcast
  return `${shuffles}${emu ? '' : 'enable f16;\nenable chromium_experimental_subgroup_matrix;\ndiagnostic(off, chromium.subgroup_matrix_uniformity);\n'}// Generated by src/engine/kernels/attention/f16/code.ts: ${f16AttnLabel(s)}${direct ? ', f16 q/k/v read by the matrix loads' : inputs16 ? ', f16 q/k/v staged' : ''}${emu ? ' (emulated matrices, f32)' : ''}.
${types}
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, _p0: u32, _p1: u32 }
${qkv}
@group(0) @binding(3) var<storage, read_write> O: array<f32>;
@group(0) @binding(4) var<storage, read_write> LSE: array<f32>;
@group(0) @binding(5) var<uniform> P: Params;
${direct ? '' : `var<workgroup> KV: array<${E}, ${st.kvElems}>; // Q once, then per key block K's rows [0, BKV) and V's from ${VOFF}\n`}var<workgroup> Ps: array<${E}, ${st.pElems}>; // P, M rows of BKV per subgroup
var<workgroup> Ss: array<f32, ${st.sElems}>; // per subgroup M rows: S${direct ? '' : ', then the block\'s P·V'}
${direct ? `var<workgroup> Os: array<f32, ${st.sElems}>; // per subgroup M rows: the block's P·V\n` : ''}const NEG = -3.0e38; // finite −inf: key 0 is visible to every row, so m is finite after the first block
const LN2 = 0.6931471805599453;
${emu ? emulation(cfg, emuLoads, direct ? ['Ss', 'Os'] : ['Ss']) : ''}${o.o16 ? f16OutModule('o16', 6, 2, o.o16) : ''}
@compute @workgroup_size(${NT})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let nQB = (P.T + ${BQ - 1}u) / ${BQ}u;
  let q0 = (nQB - 1u - wid.x) * ${BQ}u;
  let b = wid.y / P.nH;
  let h = wid.y % P.nH;
  let g = h / P.G;
  let sg = ${sgIndex(s)};
  let lane = lid % ${sgSize}u;
  let r = lane / ${LPR}u; // this lane's query row within the subgroup's M
  let part = lane % ${LPR}u; // and its share: columns part, part + ${LPR}, ...
  let t = q0 + sg * ${M}u + r;
  let rmax = q0 + sg * ${M}u + ${M - 1}u; // the subgroup's last row: keys past it are masked for all its rows
  let kEnd = min(P.T, q0 + ${BQ}u);
  let sbase = sg * ${M * SST}u;
  let srow = sbase + r * ${SST}u;
  let prow = sg * ${M * PST}u + r * ${PST}u;
  var m = NEG;
  var l = 0.0;
  var ${oDecl.join(' = 0.0;\n  var ')} = 0.0;
${L.join('\n')}
}
`;
}

/**
 * The emulate twin's stand-ins for the subgroup-matrix operations (qgemm/sgmat.ts emulatedSgmatWgsl),
 * plus the f16 rounding (rne16) the twin applies where the real kernel holds f16.
 */
export function emulation(cfg: F16AttnSpec['cfg'], loads: [string, 'LT' | 'RT'][], stores: string[]): string {
  return `${emulatedSgmatWgsl(cfg, loads, stores)}
// f32 → f16 → f32, round to nearest even (normals: 10 mantissa bits; below 2^-14: multiples of 2^-24).
fn rne16(x: f32) -> f32 {
  if (abs(x) < 6.103515625e-5) { return round(x * 16777216.0) / 16777216.0; }
  let u = bitcast<u32>(x);
  return bitcast<f32>((u + 0xfffu + ((u >> 13u) & 1u)) & 0xffffe000u);
}
fn rne16v(x: vec4<f32>) -> vec4<f32> { return vec4<f32>(rne16(x.x), rne16(x.y), rne16(x.z), rne16(x.w)); }
`;
}
