/**
 * The f16 GEMM on tensor cores: subgroup matrices (Dawn's `chromium-experimental-subgroup-matrix`)
 * with an f16 → f32 configuration, laid out like the INT8 tensor-core GEMM (kernels/qgemm/tc.ts):
 *
 * - a workgroup covers BM × BN outputs with sgM × sgN subgroups of tilesM × tilesN result tiles;
 * - each K step stages BK elements of A's and B's row blocks in workgroup memory, as stored (vec4<f16>
 *   copies, no transposition), rows padded by PAD elements so a tile load's 16 rows spread over banks;
 *   the transpositions are the tensor-core loads' layout: A stored [K,M] (dW's dYᵀ) is the left
 *   matrix read col_major, B stored [N,K] (the forward's Wᵀ) the right matrix read col_major;
 * - the next K step's tiles are fetched into registers while the current one is multiplied (prefetch);
 *   with two stages they are then staged into the other half of workgroup memory, so a K step needs
 *   one barrier, not two; or (prefetch false, one stage) each step is fetched right before it is
 *   staged; each thread copies runs of 4 or 8 stored elements (8: 16-byte aligned);
 * - inner loop: all A and B tiles of a k slice, then the multiplies; or (streamB) the A tiles, then
 *   one B tile at a time into its column of accumulators (fewer live matrices);
 * - the grid is walked row by row, or in strips of `swizzle` block rows down M (L2 reuse of B);
 * - epilogue: a whole block stores its f32 tiles straight to C (subgroupMatrixStore) when the layout
 *   allows and alpha is 1 (with accumulate its accumulators started from C's tiles); otherwise each tile goes through a per-subgroup f32
 *   scratch (subgroup matrices have no element access) and is written masked, scaled, accumulated;
 * - split-K: workgroup z runs K slice z (kChunk elements) into the workspace's slice z (the output
 *   binding is the workspace then; kernels/matmul/splitk.wgsl sums the slices into C).
 *
 * Both operands' stored rows must be whole vec4s (the contiguous dimension a multiple of 4); other
 * shapes take the SIMT kernel. Every layout is checked on the device (./matmul-f16.ts
 * enableF16TensorCores) before any GEMM uses it.
 */
import { emulatedSgmatWgsl, f16MatrixTypes, sgmatLoad, sgmatStore } from '../qgemm/sgmat';
import { F16_HALF_WGSL } from './cast';
import { type F16LowRankCode, f16LowRankWgsl } from './epilogue';
import { f16TcBlockM, f16TcBlockN, f16TcLowRankStaging, f16TcStaging, f16TcThreads, type F16TcSpec, formOf } from './plan';

/** The layout spelling this kernel writes: subgroupMatrixLoad<T, row_major|col_major>(p, off, stride). */
const SYNTAX = { syntax: 'template' } as const;

/**
 * The WGSL of one spec. Params as the SIMT kernel's, plus `direct` (whole blocks store tiles straight to C).
 * `emulate`: the same kernel over f32 storage with each subgroup-matrix operation replaced by a plain
 * function every lane runs in full (row_major/col_major loads, multiply-accumulate, stores) — slow,
 * but it runs where there are no subgroup matrices and no f16 (CI), so the staging, prefetch, layouts,
 * epilogue and split-K of the generated code are tested there; only the matrix operations differ.
 */
export function f16TcCode(s: F16TcSpec, o: { emulate?: boolean; lowRank?: F16LowRankCode } = {}): string {
  const emu = !!o.emulate;
  const E = emu ? 'f32' : 'f16';
  const { cfg } = s;
  const BM = f16TcBlockM(s);
  const BN = f16TcBlockN(s);
  const T = f16TcThreads(s);
  const st = f16TcStaging(s);
  const OB = st.elemsA; // B's staging follows A's
  const STAGE = st.elemsA + st.elemsB; // one buffer; two stages: the second follows the first
  const stages = s.stages ?? 1;
  // Unrolled two stages write matrix-load offsets as a per-subgroup base plus a literal (G3 of F16-SPEED-PLAN).
  const unroll = stages === 2 && s.unroll === 2;
  const prefetch = s.prefetch !== false;
  const W = s.copy ?? 4; // elements per staging copy
  const V = W / 4; // vec4s per copy
  const APT = (BM * s.BK) / W / T;
  const BPT = (BN * s.BK) / W / T;
  const L: string[] = [];
  const load = (T: 'LT' | 'RT', off: string, colMajor: boolean, stride: string) =>
    (emu ? `emuLoad${T}_S(${off}, ${stride}, ${colMajor})` : sgmatLoad(SYNTAX, T, '&S', off, colMajor, stride));
  const store = (dst: 'C' | 'R', off: string, v: string, stride: string) =>
    (emu ? `emuStore_${dst}(${off}, ${v}, ${stride});` : sgmatStore(SYNTAX, `&${dst}`, off, v, stride));
  // Operand X's staged copy, in its stored orientation: `rows` stored rows of `cols` elements.
  const op = (isA: boolean) => {
    const trans = isA ? s.transA : s.transB;
    const kContig = isA ? !trans : trans; // stored [outer][K]
    const outer = isA ? BM : BN;
    return {
      name: isA ? 'A' : 'B', reg: isA ? 'ra' : 'rb', per: isA ? APT : BPT, kContig,
      perRow: (kContig ? s.BK : outer) / W,
      stride: isA ? st.strideA : st.strideB, off: isA ? 0 : OB,
      dim: isA ? 'P.M' : 'P.N', base: isA ? 'm0' : 'n0',
    };
  };
  // Each thread copies `per` runs of W consecutive stored elements (V vec4s) a K step.
  const fetch = (isA: boolean, indent: string) => {
    const o = op(isA);
    for (let t = 0; t < o.per; t++) {
      L.push(`${indent}{ let l = lid + ${t * T}u; let r = l / ${o.perRow}u; let c = (l % ${o.perRow}u) * ${W}u;`);
      for (let h = 0; h < V; h++) {
        const c = h ? `c + ${4 * h}u` : 'c';
        if (o.kContig) L.push(`${indent}  { let x = ${o.base} + r; let k = kv + ${c}; let ok = x < ${o.dim} && k < ke; let i = x * P.K + k;`);
        else L.push(`${indent}  { let k = kv + r; let x = ${o.base} + ${c}; let ok = k < ke && x < ${o.dim}; let i = k * ${o.dim} + x;`);
        L.push(`${indent}    ${o.reg}[${t * V + h}] = select(vec4<${E}>(), ${o.name}[select(0u, i / 4u, ok)], ok); }`);
      }
      L.push(`${indent}}`);
    }
  };
  // Writes the registers to the staging buffer at `buf` (an expression: 0, or the other stage's offset).
  const stage = (isA: boolean, buf: string, indent: string) => {
    const o = op(isA);
    for (let t = 0; t < o.per; t++) {
      L.push(`${indent}{ let l = lid + ${t * T}u; let s0 = ${buf}${o.off}u + (l / ${o.perRow}u) * ${o.stride}u + (l % ${o.perRow}u) * ${W}u;`);
      for (let h = 0; h < V; h++) {
        const v = `${o.reg}[${t * V + h}]`;
        const d = (e: number) => `s0 + ${4 * h + e}u`.replace(' + 0u', '');
        L.push(`${indent}  S[${d(0)}] = ${v}.x; S[${d(1)}] = ${v}.y; S[${d(2)}] = ${v}.z; S[${d(3)}] = ${v}.w;`);
      }
      L.push(`${indent}}`);
    }
  };
  const tiles: [number, number][] = [];
  for (let i = 0; i < s.tilesM; i++) for (let j = 0; j < s.tilesN; j++) tiles.push([i, j]);
  const SA = st.strideA;
  const SB = st.strideB;
  // The multiplies of one staged K step from the buffer at `buf` (an expression ending in ' + ', or '').
  // `at`: with literal offsets, the buffer's constant offset (the unrolled loop's second buffer).
  const multiply = (buf: string, at = 0) => {
    const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
    for (let kk = 0; kk < s.BK; kk += cfg.K) {
      for (let i = 0; i < s.tilesM; i++) {
        const off = unroll ? `${buf}aB + ${at + (s.transA ? kk * SA + i * cfg.M : i * cfg.M * SA + kk)}u`
          : s.transA ? `${buf}${kk * SA}u + am + ${i * cfg.M}u` : `${buf}(am + ${i * cfg.M}u) * ${SA}u + ${kk}u`;
        L.push(`    let a${i}_${kk} = ${load('LT', off, s.transA, `${SA}u`)};`);
      }
      const bLoad = (j: number) => {
        const off = unroll ? `${buf}bB + ${at + OB + (s.transB ? j * cfg.N * SB + kk : kk * SB + j * cfg.N)}u`
          : s.transB ? `${buf}${OB}u + (bn + ${j * cfg.N}u) * ${SB}u + ${kk}u` : `${buf}${OB + kk * SB}u + bn + ${j * cfg.N}u`;
        L.push(`    let b${j}_${kk} = ${load('RT', off, s.transB, `${SB}u`)};`);
      };
      if (s.loop === 'streamB') {
        // One B tile live at a time: load it, multiply it into its column of accumulators.
        for (let j = 0; j < s.tilesN; j++) {
          bLoad(j);
          for (let i = 0; i < s.tilesM; i++) L.push(`    c${i}_${j} = ${mma}(a${i}_${kk}, b${j}_${kk}, c${i}_${j});`);
        }
      } else {
        for (let j = 0; j < s.tilesN; j++) bLoad(j);
        for (const [i, j] of tiles) L.push(`    c${i}_${j} = ${mma}(a${i}_${kk}, b${j}_${kk}, c${i}_${j});`);
      }
    }
  };
  for (const [i, j] of tiles) L.push(`  var c${i}_${j} = CT();`);
  // LoRA's low-rank term on the tensor cores where the staging buffer holds it (f16TcLowRankStaging);
  // else the scalar lowRank() per element, which gives up the direct store.
  const lrs = f16TcLowRankStaging(s);
  const lrTc = !!o.lowRank && lrs.fits;
  // Whole blocks store their tiles straight to C; with accumulate they start from C's tiles instead of
  // zero (subgroup matrices have no element access, so adding C after the loop would take the scratch).
  const direct = !!s.direct && (!o.lowRank || lrTc);
  const cOff = (i: number, j: number) => `(m0 + am + ${i * cfg.M}u) * P.N + n0 + bn + ${j * cfg.N}u`;
  if (direct) {
    L.push(`  let whole = P.direct != 0u && m0 + ${BM}u <= P.M && n0 + ${BN}u <= P.N;`);
    L.push('  if (whole && P.accumulate != 0u) {');
    for (const [i, j] of tiles) {
      L.push(`    c${i}_${j} = ${emu ? `emuLoadCT_C(${cOff(i, j)}, P.N, false)` : sgmatLoad(SYNTAX, 'CT', '&C', cOff(i, j), false, 'P.N')};`);
    }
    L.push('  }');
  }
  L.push(`  var ra: array<vec4<${E}>, ${APT * V}>;`, `  var rb: array<vec4<${E}>, ${BPT * V}>;`);
  if (prefetch) {
    L.push('  {', '    let kv = kb;');
    fetch(true, '    ');
    fetch(false, '    ');
    L.push('  }');
  }
  if (unroll) {
    // Two stages unrolled: body 0 multiplies buffer 0 and stages the next step into buffer 1, body 1 the
    // reverse; every offset is a per-subgroup base plus a literal (no loop-carried buffer index).
    L.push('  {', '    let kv = kb;');
    stage(true, '', '    ');
    stage(false, '', '    ');
    L.push('  }', '  workgroupBarrier();');
    L.push(`  for (var k0 = kb; k0 < ke; k0 += ${2 * s.BK}u) {`);
    for (const b of [0, 1]) {
      const next = `k0 + ${(b + 1) * s.BK}u`;
      L.push('    {', `      let more = ${next} < ke;`, '      if (more) {', `        let kv = ${next};`);
      fetch(true, '        ');
      fetch(false, '        ');
      L.push('      }');
      multiply('', b * STAGE);
      L.push('      if (more) {', `        let kv = ${next};`);
      stage(true, b ? '' : `${STAGE}u + `, '        ');
      stage(false, b ? '' : `${STAGE}u + `, '        ');
      L.push('      }', '      workgroupBarrier();');
      if (!b) L.push('      if (!more) { break; }');
      L.push('    }');
    }
    L.push('  }');
  } else if (stages === 1) {
    // Stage, barrier, fetch the next step into registers, multiply, barrier (before the next stage overwrites).
    // Without prefetch: fetch this step, stage, barrier, multiply, barrier.
    L.push(`  for (var k0 = kb; k0 < ke; k0 += ${s.BK}u) {`);
    if (!prefetch) {
      L.push('    {', '      let kv = k0;');
      fetch(true, '      ');
      fetch(false, '      ');
      L.push('    }');
    }
    stage(true, '', '    ');
    stage(false, '', '    ');
    L.push('    workgroupBarrier();');
    if (prefetch) {
      L.push(`    if (k0 + ${s.BK}u < ke) {`, `      let kv = k0 + ${s.BK}u;`);
      fetch(true, '      ');
      fetch(false, '      ');
      L.push('    }');
    }
    multiply('');
    L.push('    workgroupBarrier();', '  }');
  } else {
    // Two buffers: step k is multiplied from `cur` while step k+1 (fetched before the multiplies) is
    // staged into the other; the one barrier per step also guards the buffer read the step before.
    stage(true, '', '  ');
    stage(false, '', '  ');
    L.push('  workgroupBarrier();', '  var cur = 0u;');
    L.push(`  for (var k0 = kb; k0 < ke; k0 += ${s.BK}u) {`);
    L.push(`    let more = k0 + ${s.BK}u < ke;`);
    L.push('    if (more) {', `      let kv = k0 + ${s.BK}u;`);
    fetch(true, '      ');
    fetch(false, '      ');
    L.push('    }');
    multiply('cur + ');
    L.push('    if (more) {', `      let nxt = ${STAGE}u - cur;`);
    stage(true, 'nxt + ', '      ');
    stage(false, 'nxt + ', '      ');
    L.push('    }', '    workgroupBarrier();', `    cur = ${STAGE}u - cur;`, '  }');
  }
  // Epilogue.
  const MN = cfg.M * cfg.N;
  if (lrTc) {
    // P.direct (alpha 1: the host's rule, ./matmul-f16.ts) also says the term goes on the tensor cores:
    // U [r, M] and s·V staged as f16 (rounded like any f16 operand; zero past M, N and r), cfg.K ranks a
    // pass, one multiply-accumulate per result tile; other calls take lowRank() below.
    const lr = o.lowRank!;
    const half = (x: string) => (emu ? `unpack2x16float(half(${x})).x` : `f16(${x})`);
    const vAt = lr.transV ? `col * ${lr.rank}u + j` : 'j * P.N + col';
    const mma = emu ? 'emuMMA' : 'subgroupMatrixMultiplyAccumulate';
    L.push('  let tcLr = P.direct != 0u;', '  if (tcLr) {', '    let lrScale = bitcast<f32>(P._p0);');
    L.push(`    for (var j0 = 0u; j0 < ${lr.rank}u; j0 += ${cfg.K}u) {`, '      workgroupBarrier();');
    L.push(`      for (var e = lid; e < ${cfg.K * BM}u; e += ${T}u) {`);
    L.push(`        let j = j0 + e / ${BM}u; let row = m0 + e % ${BM}u; let ok = j < ${lr.rank}u && row < P.M;`);
    L.push(`        S[(e / ${BM}u) * ${lrs.strideU}u + e % ${BM}u] = ${half(`select(0.0, LRU[select(0u, j * P.M + row, ok)], ok)`)};`, '      }');
    L.push(`      for (var e = lid; e < ${cfg.K * BN}u; e += ${T}u) {`);
    L.push(`        let j = j0 + e / ${BN}u; let col = n0 + e % ${BN}u; let ok = j < ${lr.rank}u && col < P.N;`);
    L.push(`        S[${lrs.offV}u + (e / ${BN}u) * ${lrs.strideV}u + e % ${BN}u] = ${half(`select(0.0, lrScale * lrV(select(0u, ${vAt}, ok)), ok)`)};`, '      }');
    L.push('      workgroupBarrier();');
    for (let i = 0; i < s.tilesM; i++) L.push(`      let u${i} = ${load('LT', `am + ${i * cfg.M}u`, true, `${lrs.strideU}u`)};`);
    for (let j = 0; j < s.tilesN; j++) L.push(`      let v${j} = ${load('RT', `${lrs.offV}u + bn + ${j * cfg.N}u`, false, `${lrs.strideV}u`)};`);
    for (const [i, j] of tiles) L.push(`      c${i}_${j} = ${mma}(u${i}, v${j}, c${i}_${j});`);
    L.push('    }', '  }');
  }
  L.push('  let base = wid.z * P.M * P.N;');
  // The low-rank epilogue adds to each element: no direct tile stores.
  if (direct) {
    L.push('  if (whole) {');
    for (const [i, j] of tiles) L.push(`    ${store('C', `base + ${cOff(i, j)}`, `c${i}_${j}`, 'P.N')}`);
    L.push('    return;', '  }');
  }
  for (const [i, j] of tiles) {
    L.push(`  ${store('R', `sg * ${MN}u`, `c${i}_${j}`, `${cfg.N}u`)}`);
    L.push('  workgroupBarrier();');
    L.push(`  for (var e = lane; e < ${MN}u; e += ${s.sgSize}u) {`);
    L.push(`    let row = m0 + am + ${i * cfg.M}u + e / ${cfg.N}u; let col = n0 + bn + ${j * cfg.N}u + e % ${cfg.N}u;`);
    L.push('    if (row < P.M && col < P.N) {');
    const lrAdd = !o.lowRank ? '' : lrTc ? ' if (!tcLr) { v += lowRank(row, col); }' : ' v += lowRank(row, col);';
    L.push(`      let o = base + row * P.N + col; var v = P.alpha * R[sg * ${MN}u + e];${lrAdd}`);
    L.push('      if (P.accumulate != 0u) { v = C[o] + v; }');
    L.push('      C[o] = v;');
    L.push('    }', '  }', '  workgroupBarrier();');
  }
  const one = s.sgM * s.sgN === 1;
  const ids = one
    ? '  let sg = 0u;\n  let am = 0u;\n  let bn = 0u;'
    : `  let sg = lid / ${s.sgSize}u;
  let am = (sg / ${s.sgN}u) * ${s.tilesM * cfg.M}u; // this subgroup's rows within the block
  let bn = (sg % ${s.sgN}u) * ${s.tilesN * cfg.N}u; // and columns`;
  // Literal-offset forms: each subgroup's first staged A and B element, once.
  const bases = unroll ? `\n  let aB = ${s.transA ? 'am' : `am * ${SA}u`};\n  let bB = ${s.transB ? `bn * ${SB}u` : 'bn'};` : '';
  const G = s.swizzle ?? 0;
  // The block this workgroup computes: its grid position, or with a swizzle the grid walked in strips
  // of G block rows, down M first, so the workgroups running together share B's columns in L2.
  const block = G > 1
    ? `  let pid = wid.y * nwg.x + wid.x;
  let strip = pid / (${G}u * nwg.x);
  let rows = min(nwg.y - strip * ${G}u, ${G}u);
  let within = pid - strip * ${G}u * nwg.x;
  let m0 = (strip * ${G}u + within % rows) * ${BM}u;
  let n0 = (within / rows) * ${BN}u;`
    : `  let m0 = wid.y * ${BM}u;
  let n0 = wid.x * ${BN}u;`;
  const types = f16MatrixTypes(cfg, emu);
  return `${emu ? '' : 'enable f16;\nenable chromium_experimental_subgroup_matrix;\n'}${one || emu ? '' : 'diagnostic(off, chromium.subgroup_matrix_uniformity);\n'}// Generated by src/engine/kernels/matmul-f16/tc.ts: ${formOf(s.transA, s.transB)}, ${BM}x${BN} block, ${s.sgM}x${s.sgN} subgroups of ${s.tilesM}x${s.tilesN} ${cfg.M}x${cfg.N}x${cfg.K} tiles, BK ${s.BK}${stages > 1 ? ', two stages' : ''}${unroll ? ' unrolled x2' : ''}${s.loop === 'streamB' ? ', B streamed' : ''}${W !== 4 ? `, ${W}-element copies` : ''}${G > 1 ? `, strips of ${G}` : ''}${prefetch ? '' : ', no prefetch'}${emu ? ' (emulated matrices, f32)' : ''}.
${types}
struct Params { M: u32, N: u32, K: u32, alpha: f32, accumulate: u32, kChunk: u32, direct: u32, _p0: u32 }
@group(0) @binding(0) var<storage, read> A: array<vec4<${E}>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<${E}>>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@group(0) @binding(3) var<uniform> P: Params;
${o.lowRank ? f16LowRankWgsl(o.lowRank, '_p0') : ''}${lrTc && emu ? F16_HALF_WGSL : ''}var<workgroup> S: array<${E}, ${stages * STAGE}>; // A's rows, then B's, as stored${stages > 1 ? ' (two stages)' : ''}
var<workgroup> R: array<f32, ${s.sgM * s.sgN * MN}>; // one result tile per subgroup (epilogue)
${emu ? emulatedSgmatWgsl(cfg, [['S', 'LT'], ['S', 'RT'], ...(direct ? [['C', 'CT'] as ['C', 'CT']] : [])], ['C', 'R']) : ''}
@compute @workgroup_size(${T})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32${G > 1 ? ', @builtin(num_workgroups) nwg: vec3<u32>' : ''}) {
${ids}${bases}
  let lane = lid % ${s.sgSize}u;
${block}
  let kb = wid.z * P.kChunk;
  let ke = min(P.K, kb + P.kChunk);
${L.join('\n')}
}
`;
}
