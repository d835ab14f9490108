/**
 * What the fp32 GEMM's inner loop can reach through Dawn on this GPU (a diagnostic, one call on a
 * GPU machine). Synthetic kernels with the GEMM's grid, threads, micro tile (8×16 per thread, 128
 * threads per 128×128 block) and FLOP count at 4096³, each adding one part of the real kernel:
 *   fma          the 128 FMAs per k step on fragments held in registers (no memory at all)
 *   lds          fragments read from workgroup memory exactly as matmul.wgsl reads them (6 vec4 per k)
 *   lds_unroll   lds with its 8 k steps written out (no loop for the driver to keep or unroll)
 *   lds_w64      lds with each warp on a 64×64 quarter of the block instead of a 32×128 strip
 *   lds_pipe     lds with the fragments of step k + 1 read before the FMAs of step k
 *   lds_a, lds_b only A's (2 vec4) or only B's (4 vec4) fragments from workgroup memory
 *   lds_bar      lds + one workgroupBarrier per BK = 8 tile
 *   lds_sts_bar  + four vec4 stores per thread into the other buffer per tile (the staging stores)
 * beside the engine's own GEMM at 4096³ NN with the same layout (128x128k8_8x16) and a probe GEMM
 * written out for that one case (probeGemmShader: `--probes structure:order[:flag+flag]`, its loop
 * structures, FMA orders and PROBE_FLAGS; checked bit for bit against the engine's output first).
 * Timed interleaved over rounds (GPU timestamps, warmed until steady). --engine-orders loop,rq,qr:
 * the engine's WGSL with its k loop kept a loop, as is or with its FMA block in another source order
 * (fmaBlock). --put-k 3,5: the engine's GEMM with the prefetched tile stored in k step 3, 5 instead of
 * the last (matmul.wgsl's PUT_K). --variants a,b: more
 * engine GEMM variants beside it (checked against its output too). --occupancy: each kernel again
 * on 132·w workgroups, w = 1..--wmax (5). --sustain MS: each runs MS back to back with its start
 * and end printed, to match clock samples (nvidia-smi) to phases. --dump-wgsl DIR: the generated
 * WGSL, to inspect the SPIR-V Dawn makes of it. The synthetic kernels' outputs are meaningless
 * (sums kept only so that nothing is optimized away).
 *   BUNDLE_ALL=1 node scripts/bundle-node.mjs bench/gemm-ceiling.ts .device/gemm-ceiling.mjs
 *   (on the device)  node gemm-ceiling.mjs [--rounds 3] [--occupancy] [--sustain 3000] [--cpu --n 256 --sms 2]
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { type Dispatch, Runtime, Uniforms } from '../src/engine/gpu/runtime';
import { median, warmUntilSteady } from '../src/engine/gpu/timer';
import { matmul } from '../src/engine/kernels/matmul/matmul';
import { getVariant } from '../src/engine/kernels/matmul/variants';
import { matmulCode } from '../src/engine/kernels/matmul/wgsl';
import { Rng } from '../src/engine/util/rng';
import { msPer, timeInterleaved } from '../src/lab/quant';

const a = parseArgs({
  options: { rounds: { type: 'string' }, sustain: { type: 'string' }, cpu: { type: 'boolean' }, n: { type: 'string' }, occupancy: { type: 'boolean' }, sms: { type: 'string' }, probes: { type: 'string' }, modes: { type: 'string' }, 'dump-wgsl': { type: 'string' }, 'engine-orders': { type: 'string' }, 'put-k': { type: 'string' }, variants: { type: 'string' }, wmax: { type: 'string' } },
}).values;
const rounds = Number(a.rounds ?? 3);
const sustainMs = Number(a.sustain ?? 0);
const n = Number(a.n ?? (a.cpu ? 256 : 4096));

const MODES = ['fma', 'lds', 'lds_unroll', 'lds_w64', 'lds_pipe', 'lds_a', 'lds_b', 'lds_bar', 'lds_sts_bar'] as const;
type Mode = typeof MODES[number];

const COMPS = ['x', 'y', 'z', 'w'];
const ACC = [0, 1, 2, 3, 4, 5, 6, 7].flatMap((r) => [0, 1, 2, 3].map((q) => `c${r}${q}`));
/** matmul.wgsl's declaration order of the same accumulators. */
const ACC_ENGINE = [[0, 1], [2, 3]].flatMap((qs) => [0, 1, 2, 3, 4, 5, 6, 7].flatMap((r) => qs.map((q) => `c${r}${q}`)));
/**
 * The 128 FMAs of one k step on fragments a0, a1 (8 rows) and b0..b3 (16 columns), in
 * one of three source orders: rq (row by row, each A scalar over the four B vec4s), qr (B vec4 by
 * B vec4, each over the 8 rows), eng (matmul.wgsl's: rows 0-3 then 4-7, inside each B vec4 by B
 * vec4 over the 4 rows). The math is the same; the compiler's schedule may not be.
 */
type Order = 'rq' | 'qr' | 'eng';
const ORDERS: Order[] = ['rq', 'qr', 'eng'];
function fmaBlock(order: Order = 'rq'): string {
  const rq: [number, number][] = order === 'rq' ? [0, 1, 2, 3, 4, 5, 6, 7].flatMap((r) => [0, 1, 2, 3].map((q): [number, number] => [r, q]))
    : order === 'qr' ? [0, 1, 2, 3].flatMap((q) => [0, 1, 2, 3, 4, 5, 6, 7].map((r): [number, number] => [r, q]))
      : [0, 4].flatMap((h) => [0, 1, 2, 3].flatMap((q) => [0, 1, 2, 3].map((r): [number, number] => [h + r, q])));
  return rq.map(([r, q]) => `      c${r}${q} += a${r >> 2}.${COMPS[r & 3]} * b${q};`).join('\n');
}
const fragReads = (k: string, decl: string, p = '') => `      ${decl}${p}a0 = As[aBase + (${k}) * ROW]; ${decl}${p}a1 = As[aBase + (${k}) * ROW + 16u];
      ${decl}${p}b0 = Bs[bBase + (${k}) * ROW]; ${decl}${p}b1 = Bs[bBase + (${k}) * ROW + 8u];
      ${decl}${p}b2 = Bs[bBase + (${k}) * ROW + 16u]; ${decl}${p}b3 = Bs[bBase + (${k}) * ROW + 24u];`;

/** The BK steps of one tile with the fragments of step k + 1 read before the FMAs of step k. */
const pipelinedSteps = (order: Order) => `${fragReads('0u', 'var ', 'n')}
    for (var k = 1u; k < BK; k++) {
      let a0 = na0; let a1 = na1; let b0 = nb0; let b1 = nb1; let b2 = nb2; let b3 = nb3;
${fragReads('k', '', 'n')}
${fmaBlock(order)}
    }
    { let a0 = na0; let a1 = na1; let b0 = nb0; let b1 = nb1; let b2 = nb2; let b3 = nb3;
${fmaBlock(order)}
    }`;

/** One synthetic kernel: 8×16 per thread, 128 threads, BK = 8, double-buffered 128×8 tiles padded like matmul.wgsl. */
function ceilingShader(mode: Mode, order: Order = 'rq'): string {
  let inner: string;
  if (mode === 'lds_pipe') {
    // fragments of step k + 1 read before the FMAs of step k
    inner = pipelinedSteps(order);
  } else if (mode === 'lds_unroll') {
    inner = [0, 1, 2, 3, 4, 5, 6, 7].map((k) => `    {
${fragReads(`${k}u`, 'let ')}
${fmaBlock(order)}
    }`).join('\n');
  } else {
    const reads = mode === 'fma' ? '      let a0 = fa0; let a1 = fa1; let b0 = fb0; let b1 = fb1; let b2 = fb2; let b3 = fb3;'
      : mode === 'lds_a' ? '      let a0 = As[aBase + k * ROW]; let a1 = As[aBase + k * ROW + 16u]; let b0 = fb0; let b1 = fb1; let b2 = fb2; let b3 = fb3;'
        : mode === 'lds_b' ? `      let a0 = fa0; let a1 = fa1;
      let b0 = Bs[bBase + k * ROW]; let b1 = Bs[bBase + k * ROW + 8u]; let b2 = Bs[bBase + k * ROW + 16u]; let b3 = Bs[bBase + k * ROW + 24u];`
          : mode === 'lds_w64' ? `      let a0 = As[aBase + k * ROW]; let a1 = As[aBase + k * ROW + 8u];
      let b0 = Bs[bBase + k * ROW]; let b1 = Bs[bBase + k * ROW + 4u]; let b2 = Bs[bBase + k * ROW + 8u]; let b3 = Bs[bBase + k * ROW + 12u];`
            : fragReads('k', 'let ');
    inner = `    for (var k = 0u; k < BK; k++) {
${reads}
${fmaBlock(order)}
    }`;
  }
  return `
struct Params { nt: u32, _a: u32, _b: u32, _c: u32 }
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> P: Params;
const BK = 8u;
const ROW = 33u;          // vec4s per padded k-row (128 + 4 floats)
const BUF = BK * ROW;
var<workgroup> As: array<vec4<f32>, 528>;
var<workgroup> Bs: array<vec4<f32>, 528>;

@compute @workgroup_size(128)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var i = lid; i < 2u * BUF; i += 128u) { As[i] = src[i % 1024u]; Bs[i] = src[(i + 7u) % 1024u]; }
  workgroupBarrier();
  let tx = lid % 8u;
  let ty = lid / 8u;
${ACC.map((c) => `  var ${c} = vec4<f32>(0.0);`).join('\n')}
  let fa0 = src[lid % 1024u]; let fa1 = src[(lid + 16u) % 1024u];
  let fb0 = src[(lid + 3u) % 1024u]; let fb1 = src[(lid + 5u) % 1024u];
  let fb2 = src[(lid + 9u) % 1024u]; let fb3 = src[(lid + 11u) % 1024u];
  var s0 = src[(lid + 1u) % 1024u]; var s1 = src[(lid + 2u) % 1024u];
  for (var t = 0u; t < P.nt; t++) {
    let h = t % 2u;
    // lds_w64: each warp a 64×64 quarter of the block (lanes 8 × 4), so a warp's A reads are 8
    // distinct vec4s and its B reads 4 (the default layout: 4 and 8, a 32×128 strip per warp)
    let w = lid / 32u;
    let lane = lid % 32u;
    let aBase = h * BUF + ${mode === 'lds_w64' ? '(w / 2u) * 16u + lane / 4u' : 'ty'};
    let bBase = h * BUF + ${mode === 'lds_w64' ? '(w % 2u) * 16u + lane % 4u' : 'tx'};
${inner}
${mode === 'lds_sts_bar' ? `    let o = (1u - h) * BUF;
    As[o + lid] = s0; As[o + lid + 128u] = s1; Bs[o + lid] = s1; Bs[o + lid + 128u] = s0;
    s0 = s0 + s1; s1 = s1 * s0;` : ''}
${mode === 'lds_bar' || mode === 'lds_sts_bar' ? '    workgroupBarrier();' : ''}
  }
  dst[(wid.y * nwg.x + wid.x) * 128u + lid] = ${ACC.join(' + ')};
}
`;
}

/**
 * A GEMM written out for one case (NN, every tile whole, 128×128×8 blocks, 128 threads of 8×16,
 * the next tile prefetched into registers): matmul.wgsl's 128x128k8_8x16 path with nothing
 * folded by overrides, so structural changes can be tried here first. order: the FMAs' source
 * order (fmaBlock). structure 'engine': matmul.wgsl's loop (tile 0 staged before the loop; each
 * step fetches tile t + 1, runs the FMAs on tile t, stores tile t + 1); 'shifted': one loop of
 * nt + 1 steps that fetches tile t, runs the FMAs on tile t - 1 and stores tile t, each part under
 * its own condition. pipe: fragments of step k + 1 read before the FMAs of step k.
 */
/**
 * Flags that each move one detail of the probe to matmul.wgsl's way of writing it (to find what
 * separates the two): zero (invocations that stage no A block set their A registers to 0), div
 * (global indices as (row·cols + col) / 4 per staged vec4), epi (the results scaled by a uniform
 * alpha), vars (fragments as vars assigned after a copy of the first), nt (the tile count from a
 * split-K range as matmul.wgsl computes it, with num_workgroups bound), fn (global loads, staging
 * stores and the epilogue's row stores in helper functions, as matmul.wgsl has them), decl (the
 * accumulators declared in matmul.wgsl's order: column groups 0-1 of every row, then 2-3), ovr
 * (tile constants, workgroup-array lengths and the workgroup size as pipeline-overridable constants).
 */
const PROBE_FLAGS = ['pipe', 'zero', 'div', 'epi', 'vars', 'nt', 'fn', 'decl', 'ovr'] as const;
type ProbeFlag = typeof PROBE_FLAGS[number];
interface ProbeGemm { order: Order; structure: 'engine' | 'shifted'; pipe?: boolean; flags?: ProbeFlag[] }
const probeName = (o: ProbeGemm) => `probe ${o.structure} ${o.order}${o.pipe ? ' pipe' : ''}${(o.flags ?? []).map((f) => ` +${f}`).join('')}`;
function probeGemmShader(o: ProbeGemm): string {
  const has = (f: ProbeFlag) => (o.flags ?? []).includes(f);
  const reads = has('vars') ? `      let a0 = As[aBase + k * ROW]; let b0 = Bs[bBase + k * ROW];
      var a1 = a0; var b1 = b0; var b2 = b0; var b3 = b0;
      a1 = As[aBase + k * ROW + 16u]; b1 = Bs[bBase + k * ROW + 8u];
      b2 = Bs[bBase + k * ROW + 16u]; b3 = Bs[bBase + k * ROW + 24u];` : fragReads('k', 'let ');
  const steps = o.pipe ? pipelinedSteps(o.order) : `    for (var k = 0u; k < BK; k++) {
${reads}
${fmaBlock(o.order)}
    }`;
  const aLoads = (k0: string) => has('fn')
    ? [0, 1, 2, 3].map((u) => `ra${u} = loadA(aRow + ${u}u, ${k0} + aK);`).join(' ')
    : has('div')
    ? [0, 1, 2, 3].map((u) => `ra${u} = A[((aRow + ${u}u) * P.K + ${k0} + aK) / 4u];`).join(' ')
    : `let ai = aRow * K4 + (${k0} + aK) / 4u;
        ra0 = A[ai]; ra1 = A[ai + K4]; ra2 = A[ai + 2u * K4]; ra3 = A[ai + 3u * K4];`;
  const bLoads = (k0: string) => has('fn')
    ? `rb0 = loadB(${k0} + bRow, n0 + (lid % 32u) * 4u); rb1 = loadB(${k0} + bRow + 4u, n0 + (lid % 32u) * 4u);`
    : has('div')
    ? `rb0 = B[((${k0} + bRow) * P.N + n0 + (lid % 32u) * 4u) / 4u]; rb1 = B[((${k0} + bRow + 4u) * P.N + n0 + (lid % 32u) * 4u) / 4u];`
    : `rb0 = B[(${k0} + bRow) * N4 + bCol]; rb1 = B[(${k0} + bRow + 4u) * N4 + bCol];`;
  const fetch = (k0: string) => `      if (lid < 64u) {
        ${aLoads(k0)}
      }${has('zero') ? ' else { ra0 = vec4<f32>(0.0); ra1 = vec4<f32>(0.0); ra2 = vec4<f32>(0.0); ra3 = vec4<f32>(0.0); }' : ''}
      ${bLoads(k0)}`;
  const store = (o: string) => has('fn') ? `      putAs(${o}, lid, ra0, ra1, ra2, ra3);
      putBs(${o}, lid, rb0, rb1);` : `      let o = ${o};
      if (lid < 64u) {
        let ab = o + aK * ROW + lid / 2u;
        As[ab] = vec4<f32>(ra0.x, ra1.x, ra2.x, ra3.x);
        As[ab + ROW] = vec4<f32>(ra0.y, ra1.y, ra2.y, ra3.y);
        As[ab + 2u * ROW] = vec4<f32>(ra0.z, ra1.z, ra2.z, ra3.z);
        As[ab + 3u * ROW] = vec4<f32>(ra0.w, ra1.w, ra2.w, ra3.w);
      }
      Bs[o + bRow * ROW + lid % 32u] = rb0;
      Bs[o + (bRow + 4u) * ROW + lid % 32u] = rb1;`;
  const loop = o.structure === 'shifted' ? `  for (var t = 0u; t <= nt; t++) {
    if (t < nt) {
${fetch('t * BK')}
    }
    if (t > 0u) {
      let h = (t - 1u) % 2u;
      let aBase = h * BUF + ty;
      let bBase = h * BUF + tx;
${steps}
    }
    if (t < nt) {
${store('(t % 2u) * BUF')}
    }
    workgroupBarrier();
  }` : `  {
${fetch(has('nt') ? 'kBegin' : '0u')}
${store('0u')}
  }
  workgroupBarrier();
  for (var t = 0u; t < nt; t++) {
    let h = t % 2u;
    let more = t + 1u < nt;
    if (more) {
${fetch(has('nt') ? 'kBegin + (t + 1u) * BK' : '(t + 1u) * BK')}
    }
    let aBase = h * BUF + ty;
    let bBase = h * BUF + tx;
${steps}
    if (more) {
${store('(1u - h) * BUF')}
    }
    workgroupBarrier();
  }`;
  return `
struct Params { M: u32, N: u32, K: u32, alpha: f32 }
@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> P: Params;
${has('ovr') ? `override BK: u32 = 8u;
override ROW: u32 = 33u;
override BUF: u32 = BK * ROW;
override WG: u32 = 128u;
override AS_LEN: u32 = 2u * BUF;
var<workgroup> As: array<vec4<f32>, AS_LEN>;
var<workgroup> Bs: array<vec4<f32>, AS_LEN>;` : `const BK = 8u;
const ROW = 33u;
const BUF = BK * ROW;
var<workgroup> As: array<vec4<f32>, 528>;
var<workgroup> Bs: array<vec4<f32>, 528>;`}
${has('fn') ? `
fn loadA(r: u32, c: u32) -> vec4<f32> { return A[(r * P.K + c) / 4u]; }
fn loadB(r: u32, c: u32) -> vec4<f32> { return B[(r * P.N + c) / 4u]; }
fn putAs(o: u32, lid: u32, r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32>) {
  if (lid < 64u) {
    let ab = o + (lid % 2u) * 4u * ROW + lid / 2u;
    As[ab] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
    As[ab + ROW] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
    As[ab + 2u * ROW] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
    As[ab + 3u * ROW] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
  }
}
fn putBs(o: u32, lid: u32, r0: vec4<f32>, r1: vec4<f32>) {
  Bs[o + (lid / 32u) * ROW + lid % 32u] = r0;
  Bs[o + (lid / 32u + 4u) * ROW + lid % 32u] = r1;
}
fn storeRow(r: u32, q0: u32, v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>) {
  let rb = r * (P.N / 4u) + q0;
  C[rb] = v0; C[rb + 8u] = v1; C[rb + 16u] = v2; C[rb + 24u] = v3;
}
` : ''}
@compute @workgroup_size(${has('ovr') ? 'WG' : '128'})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>${has('nt') ? ', @builtin(num_workgroups) nwg: vec3<u32>' : ''}) {
  let K4 = P.K / 4u;
  let N4 = P.N / 4u;
  let m0 = wid.y * 128u;
  let n0 = wid.x * 128u;
  let tx = lid % 8u;
  let ty = lid / 8u;
  // A: threads 0..63 each stage a 4×4 block (rows (lid/2)*4.., k (lid%2)*4..), stored transposed.
  let aRow = m0 + (lid % 64u) / 2u * 4u;
  let aK = (lid % 2u) * 4u;
  // B: two vec4 per thread, k rows lid/32 and 4 + lid/32, columns (lid%32)*4.
  let bRow = lid / 32u;
  let bCol = n0 / 4u + lid % 32u;
${(has('decl') ? ACC_ENGINE : ACC).map((c) => `  var ${c} = vec4<f32>(0.0);`).join('\n')}
  var ra0 = vec4<f32>(0.0); var ra1 = vec4<f32>(0.0); var ra2 = vec4<f32>(0.0); var ra3 = vec4<f32>(0.0);
  var rb0 = vec4<f32>(0.0); var rb1 = vec4<f32>(0.0);
${has('nt') ? `  let kBegin = wid.z * P.K;
  let nt = (min(P.K, kBegin + P.K) - kBegin + BK - 1u) / BK;
  let zRows = wid.z * nwg.z * 0u;` : '  let nt = P.K / BK;'}
${loop}
  let r0 = m0 + ty * 4u${has('nt') ? ' + zRows' : ''};
  let q0 = n0 / 4u + tx;
${[0, 1, 2, 3, 4, 5, 6, 7].map((r) => has('fn')
    ? `  storeRow(r0 + ${r < 4 ? r : 64 + r - 4}u, q0, ${[0, 1, 2, 3].map((q) => `${has('epi') ? 'P.alpha * ' : ''}c${r}${q}`).join(', ')});`
    : `  { let rb = (r0 + ${r < 4 ? r : 64 + r - 4}u) * N4 + q0; ${[0, 1, 2, 3].map((q) => `C[rb + ${8 * q}u] = ${has('epi') ? 'P.alpha * ' : ''}c${r}${q};`).join(' ')} }`).join('\n')}
}
`;
}

// --probes structure:order[:flag+flag...],... (flags: PROBE_FLAGS; default: both structures in every order); --modes mode:order,...
// (default: every mode in order rq); 'none' for neither
const probes: ProbeGemm[] = a.probes === 'none' ? [] : a.probes ? a.probes.split(',').map((t) => {
  const [structure, order, extra = ''] = t.split(':');
  const flags = extra.split('+').filter(Boolean) as ProbeFlag[];
  if ((structure !== 'engine' && structure !== 'shifted') || !ORDERS.includes(order as Order) || flags.some((f) => !PROBE_FLAGS.includes(f))) {
    throw new Error(`--probes: bad '${t}'`);
  }
  return { structure, order: order as Order, pipe: flags.includes('pipe'), flags: flags.filter((f) => f !== 'pipe') };
}) : (['engine', 'shifted'] as const).flatMap((structure) => ORDERS.map((order) => ({ structure, order })));
const modes: [Mode, Order][] = a.modes === 'none' ? [] : a.modes ? a.modes.split(',').map((t) => {
  const [m, order = 'rq'] = t.split(':');
  if (!MODES.includes(m as Mode) || !ORDERS.includes(order as Order)) throw new Error(`--modes: bad '${t}'`);
  return [m as Mode, order as Order];
}) : MODES.map((m): [Mode, Order] => [m, 'rq']);
// --variants a,b: more of the engine's GEMM variants at n³ NN (and in --occupancy).
const variants = (a.variants ?? '').split(',').filter(Boolean);
for (const v of variants) getVariant(v); // throws on an unknown name
const engineOrders = (a['engine-orders'] ?? '').split(',').filter(Boolean) as (Order | 'loop')[];
for (const order of engineOrders) if (order !== 'loop' && !ORDERS.includes(order)) throw new Error(`--engine-orders: bad '${order}'`);
const putKs = (a['put-k'] ?? '').split(',').filter(Boolean).map(Number);
for (const k of putKs) if (!Number.isInteger(k) || k < 0 || k > 7) throw new Error(`--put-k: k steps 0..7, not ${a['put-k']}`);

// --dump-wgsl DIR: write the probe GEMMs' and synthetic kernels' WGSL there (to inspect the SPIR-V Dawn makes of them) and stop.
if (a['dump-wgsl']) {
  const { mkdirSync, writeFileSync } = await import('node:fs');
  mkdirSync(a['dump-wgsl'], { recursive: true });
  for (const structure of ['engine', 'shifted'] as const) writeFileSync(`${a['dump-wgsl']}/probe_${structure}.wgsl`, probeGemmShader({ structure, order: 'eng' }));
  for (const m of MODES) writeFileSync(`${a['dump-wgsl']}/${m}.wgsl`, ceilingShader(m));
  writeFileSync(`${a['dump-wgsl']}/engine.wgsl`, matmulCode(true, true, true, 8, true));
  process.exit(0);
}

const gpu = await acquireNodeGpu({
  forceSwiftShader: a.cpu,
  dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'],
});
const rt = new Runtime(gpu);
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)}; n = ${n}`);
const flop = 2 * n * n * n;
const tiles = (n / 128) ** 2;
const rng = new Rng(7);
const src = rt.upload('workspace', 'src', rng.normalArray(4096).map((x) => 1 + 1e-3 * x));
const dst = rt.createBuffer('workspace', 'dst', Math.max(tiles, 5 * Number(a.sms ?? 132)) * 128 * 16);
const u = rt.uniform('ceiling', new Uniforms().u32(n / 8).u32(0).u32(0).u32(0));
const A = rt.upload('workspace', 'A', rng.normalArray(n * n));
const B = rt.upload('workspace', 'B', rng.normalArray(n * n));
const C = rt.createBuffer('workspace', 'C', n * n * 4);
const gemmU = rt.uniform('probe gemm', new Uniforms().u32(n).u32(n).u32(n).f32(1));
const probeGemm = (o: ProbeGemm, c: GPUBuffer, w = n / 128, h = n / 128, uni = gemmU, aBuf = A, bBuf = B) => rt.kernel({
  label: probeName(o), code: probeGemmShader(o), entryPoint: 'main', bindings: [aBuf, bBuf, c, uni], workgroups: [w, h, 1],
  constants: o.flags?.includes('ovr') ? { BK: 8, ROW: 33, WG: 128 } : undefined,
});
const synthetic = (m: Mode, order: Order = 'rq', wgs = tiles) => rt.kernel({
  label: `ceiling ${m} ${order}`, code: ceilingShader(m, order), entryPoint: 'main', bindings: [src, dst, u], workgroups: [wgs, 1, 1],
});
// matmul.wgsl's Params for one pass of an n³ NN GEMM: M, N, K, alpha, flags, bk, kChunk.
const engineUniform = () => new Uniforms().u32(n).u32(n).u32(n).f32(1).u32(0).u32(8).u32(n).u32(0);
const engine = matmul(rt, { label: 'gemm', a: A, b: B, c: C, M: n, N: n, K: n, variant: '128x128k8_8x16' });
const kernels: [string, Dispatch][] = [['gemm 128x128k8_8x16', engine]];

// The probe GEMMs must compute the engine's product (same order of FMAs per element: same bits).
rt.run([engine]);
const want = await rt.readF32(C);
const c2 = rt.createBuffer('workspace', 'C2', n * n * 4);
/** Runs d (which writes c2) and compares c2 with the engine's output: differing words, largest |difference|. */
async function againstEngine(d: Dispatch): Promise<{ diff: number; worst: number; total: number }> {
  rt.run([d]);
  const got = await rt.readF32(c2);
  let diff = 0;
  let worst = 0;
  for (let i = 0; i < got.length; i++) {
    if (got[i] !== want[i]) diff++;
    worst = Math.max(worst, Math.abs(got[i] - want[i]));
  }
  return { diff, worst, total: got.length };
}
for (const o of probes) {
  const d = probeGemm(o, c2);
  const { diff, worst, total } = await againstEngine(d);
  console.log(`${probeName(o)}: ${diff} of ${total} outputs differ from the engine's (max |diff| ${worst})`);
  if (worst > 1e-3 * Math.sqrt(n)) throw new Error('probe GEMM is wrong');
  kernels.push([probeName(o), d]);
}
/** matmul.wgsl text as the engine's 128x128k8_8x16 pipeline at n³ NN (writing c2), with extra overrides. */
const engineKernel = (label: string, code: string, extra: Record<string, number> = {}) => rt.kernel({
  label, code, entryPoint: 'main', bindings: [A, B, c2, rt.uniform(label, engineUniform())],
  constants: { TRANS_A: 0, TRANS_B: 0, ACCUM: 0, SPECIALIZE: 1, FULL_TILES: 1, PREFETCH: 1, SWIZZLE: 0, BM: 128, BN: 128, BK: 8, TM: 8, TN: 16, ...extra },
  workgroups: [n / 128, n / 128, 1],
});
// --engine-orders loop,rq,qr: the engine's WGSL with its k loop kept as a loop (the engine writes it
// out: matmulCode's unrollBK, because the driver does not), as it is (`loop`) or with its FMA block
// rewritten in another source order.
for (const order of engineOrders) {
  let code = matmulCode(true, true, true);
  if (order !== 'loop') {
    const from = code.indexOf('      c00 += a0.x * b0;');
    const to = code.indexOf('\n    }\n  }\n\n  let zRows');
    if (from < 0 || to < from) throw new Error('--engine-orders: the FMA block of matmul.wgsl was not found');
    code = code.slice(0, from) + fmaBlock(order) + code.slice(to);
  }
  const d = engineKernel(`engine ${order}`, code);
  const { diff, total } = await againstEngine(d);
  console.log(`engine ${order}: ${diff} of ${total} outputs differ from the engine's`);
  kernels.push([`engine ${order}`, d]);
}
for (const k of putKs) {
  const d = engineKernel(`engine put ${k}`, matmulCode(true, true, true, 8, true), { PUT_K: k });
  const { diff, total } = await againstEngine(d);
  console.log(`engine put ${k}: ${diff} of ${total} outputs differ from the engine's`);
  kernels.push([`engine put ${k}`, d]);
}
for (const [m, order] of modes) kernels.push([`${m} ${order}`, synthetic(m, order)]);
for (const v of variants) {
  const d = matmul(rt, { label: `gemm ${v}`, a: A, b: B, c: c2, M: n, N: n, K: n, variant: v });
  const { diff, total } = await againstEngine(d);
  console.log(`gemm ${v}: ${diff} of ${total} outputs differ from 128x128k8_8x16's`);
  kernels.splice(1, 0, [`gemm ${v}`, d]);
}

for (const [, d] of kernels) await warmUntilSteady(rt, [d]);
const times = await timeInterleaved(rt, kernels.map(([name, d]) => ({ name, d, bench: { inner: 5, warmup: 1, reps: 5 } })), rounds, 1000);
for (const [name] of kernels) {
  const ms = median(times.get(name)!);
  console.log(`${name.padEnd(22)} ${ms.toFixed(4)} ms  ${(flop / ms / 1e9).toFixed(1)} TFLOP/s  (rounds: ${times.get(name)!.map((t) => t.toFixed(4)).join(' ')})`);
}

// Occupancy: the same kernel on SMS·w workgroups, w = 1..wmax. While the SMs have issue slots to
// spare and every workgroup is resident at once, the time stays flat in w; once w outgrows the
// resident workgroups per SM it steps up. A kernel that saturates an SM with one workgroup grows
// with w whatever its occupancy, so the sweep bounds occupancy only for latency-bound kernels.
if (a.occupancy) {
  const sms = Number(a.sms ?? 132);
  const wmax = Number(a.wmax ?? 5);
  const maxB = Math.max(128, ...variants.map((v) => getVariant(v).BN));
  const maxA = Math.max(128, ...variants.map((v) => getVariant(v).BM));
  const Bw = rt.upload('workspace', 'Bw', rng.normalArray(n * maxB * sms));
  const Aw = rt.upload('workspace', 'Aw', rng.normalArray(maxA * wmax * n));
  const Cw = rt.createBuffer('workspace', 'Cw', maxA * wmax * maxB * sms * 4);
  const N = 128 * sms;
  const occ: [string, (w: number) => Dispatch][] = [
    ...['128x128k8_8x16', ...variants].map((v): [string, (w: number) => Dispatch] => {
      const { BM, BN } = getVariant(v);
      return [`gemm ${v}`, (w) => matmul(rt, { label: `occ${w}`, a: Aw, b: Bw, c: Cw, M: BM * w, N: BN * sms, K: n, variant: v })];
    }),
    ...probes.map((o): [string, (w: number) => Dispatch] => [probeName(o), (w) => probeGemm(o, Cw, sms, w, rt.uniform(`occ${w}`, new Uniforms().u32(128 * w).u32(N).u32(n).f32(1)), Aw, Bw)]),
    ...modes.map(([m, order]): [string, (w: number) => Dispatch] => [`${m} ${order}`, (w) => synthetic(m, order, sms * w)]),
  ];
  for (const [name, make] of occ) {
    const row: string[] = [];
    for (let w = 1; w <= wmax; w++) {
      const d = make(w);
      await warmUntilSteady(rt, [d], 200, 1000);
      const { ms } = await msPer(rt, [d], { inner: 5, warmup: 1, reps: 5 });
      row.push(`w=${w} ${ms.toFixed(4)} ms`);
    }
    console.log(`occupancy ${name.padEnd(22)} ${row.join('  ')}`);
  }
}

// Back to back for sustainMs each, start and end printed (match nvidia-smi's clock samples to phases).
for (const [name, d] of sustainMs > 0 ? kernels : []) {
  const t0 = performance.now();
  const start = new Date().toISOString();
  let runs = 0;
  while (performance.now() - t0 < sustainMs) {
    rt.run(Array.from({ length: 20 }, () => d));
    await rt.sync();
    runs += 20;
  }
  const ms = (performance.now() - t0) / runs;
  console.log(`sustain ${name}: ${start} .. ${new Date().toISOString()}  ${runs} runs, ${(flop / ms / 1e9).toFixed(1)} TFLOP/s wall`);
}
process.exit(0);
