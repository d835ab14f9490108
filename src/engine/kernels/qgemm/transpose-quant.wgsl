// INT8 absmax quantization of xᵀ, read from x [R, CN] (row-major f32) without an fp32 transposed copy:
// codes of xᵀ [CN, R] packed four to a u32 along R, one scale per column c and block b of G rows,
// scales [CN, R/G]. The same codes as quantizeRef(xᵀ, 'int8', group G) (R % G == 0, G % 4 == 0),
// the SR draw indexed by the element's flat position in xᵀ. Prepended: quant/codec.wgsl.
// Serves the weight-gradient GEMM's operands (dYᵀ, Xᵀ in blocks of tokens, or per channel over all
// of them) and the input-gradient GEMM's weight operand (Wᵀ per input channel), the last two
// through the row tiles of col_absmax / col_encode below.
//
// A workgroup is COLS columns × LANES lanes of rows: lane y of a column scans rows y, y+LANES, ...
// (for a fixed row the COLS loads are consecutive), the lanes' absmax meet in workgroup memory, and
// lane y then encodes words y, y+LANES, ... of the column's block.
//
// One scale per column over all R rows (the weight-gradient GEMM on tensor cores) splits the rows
// into tiles of G so that the whole GPU works on it: `col_absmax` writes each tile's absmax per
// column to A [R/G, CN], `col_encode` takes the column's max over the tiles and encodes its tile
// (scales [CN]; the codes are those of main with G = R).

override COLS: u32 = 64u;
override LANES: u32 = 4u;

struct Params { R: u32, CN: u32, G: u32, seed: u32, stochastic: u32, _a: u32, _b: u32, _c: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> Q: array<u32>;
// The tiles' absmax bits: written by col_absmax (binding 2, where main binds S), read by col_encode.
@group(0) @binding(2) var<storage, read_write> A_w: array<u32>;
@group(0) @binding(4) var<storage, read> A_r: array<u32>;

var<workgroup> red: array<u32, COLS * LANES>;

// bits of 2^-110: blocks whose absmax is below it get s = 0 (SCALE_TINY in quantizer.ts).
const TINY_BITS: u32 = 0x08800000u;

// Absmax over the bit patterns of column c, rows r0 + lane, r0 + lane + LANES, ... < r0 + G
// (non-negative floats order as u32): no flushing, NaN/Inf skipped. The lanes meet in `red`.
fn tile_absmax(c: u32, r0: u32, lid: vec3<u32>) -> u32 {
  var a = 0u;
  if (c < p.CN) {
    for (var r = lid.y; r < p.G; r += LANES) {
      let ab = bitcast<u32>(X[(r0 + r) * p.CN + c]) & 0x7fffffffu;
      if (ab < 0x7f800000u) { a = max(a, ab); }
    }
  }
  red[lid.y * COLS + lid.x] = a;
  workgroupBarrier();
  for (var y = 0u; y < LANES; y++) { a = max(a, red[y * COLS + lid.x]); }
  return a;
}

fn scale_of(a: u32) -> f32 {
  return select(div_rn(bitcast<f32>(a), 127.0), 0.0, a < TINY_BITS);
}

// Rows r0 + 4j .. r0 + 4j + 3 of column c (word j of its codes).
fn load_word(c: u32, r0: u32, j: u32) -> vec4<f32> {
  let i = (r0 + 4u * j) * p.CN + c;
  return vec4<f32>(X[i], X[i + p.CN], X[i + 2u * p.CN], X[i + 3u * p.CN]);
}

// Word j of column c's codes from its four values v with scale s (inv = int_inv(s)): nearest
// rounding division-free (int8_word), stochastic through the exact quotient.
fn encode_word(v: vec4<f32>, c: u32, r0: u32, j: u32, s: f32, inv: f32) -> u32 {
  if (p.stochastic == 0u) { return int8_word(v, s, inv); }
  let base = c * p.R + r0 + 4u * j; // flat index of the word's first element in xᵀ
  var w = 0u;
  for (var e = 0u; e < 4u; e++) {
    var code = 0u;
    if (s != 0.0 && (bitcast<u32>(v[e]) & 0x7fffffffu) < 0x7f800000u) {
      code = int_encode_sr(div_rn(v[e], s), 127.0, sr_uniform(p.seed, base + e));
    }
    w = set_byte(w, e, code);
  }
  return w;
}

// TW = G/4 words per column of a tile. STAGE = 1: the tile's words go through workgroup memory so
// that the stores of xᵀ run along its rows (a warp writes consecutive words of one column) instead
// of one word per column per lane, 4·R bytes apart. LF = 4: a lane loads the rows of four words
// before it encodes any (more loads in flight than load, encode, load). Both are measured choices.
override TW: u32 = 0u;
override STAGE: u32 = 0u;
override LF: u32 = 1u;
override WSTR: u32 = TW + 1u; // odd for even TW: the encode phase's lanes (columns) on different banks
var<workgroup> wq: array<u32, COLS * WSTR>;

fn put_word(c: u32, r0: u32, j: u32, w: u32, x: u32) {
  if (STAGE != 0u) { wq[x * WSTR + j] = w; } else { Q[(c * p.R + r0) / 4u + j] = w; }
}

// Columns c0 .. c0 + COLS of rows r0 .. r0 + G, column lid.x with scale s (unused past CN): lane y
// encodes words y, y+LANES, ... Called in uniform control flow (the staged form has a barrier).
fn encode_tile(c0: u32, r0: u32, s: f32, lid: vec3<u32>) {
  let c = c0 + lid.x;
  let nw = p.G / 4u;
  let inv = int_inv(s);
  if (c < p.CN) {
    for (var j0 = lid.y; j0 < nw; j0 += LANES * LF) {
      if (LF == 4u) {
        let j1 = j0 + LANES;
        let j2 = j1 + LANES;
        let j3 = j2 + LANES;
        let v0 = load_word(c, r0, j0);
        var v1 = vec4<f32>();
        var v2 = vec4<f32>();
        var v3 = vec4<f32>();
        if (j1 < nw) { v1 = load_word(c, r0, j1); }
        if (j2 < nw) { v2 = load_word(c, r0, j2); }
        if (j3 < nw) { v3 = load_word(c, r0, j3); }
        put_word(c, r0, j0, encode_word(v0, c, r0, j0, s, inv), lid.x);
        if (j1 < nw) { put_word(c, r0, j1, encode_word(v1, c, r0, j1, s, inv), lid.x); }
        if (j2 < nw) { put_word(c, r0, j2, encode_word(v2, c, r0, j2, s, inv), lid.x); }
        if (j3 < nw) { put_word(c, r0, j3, encode_word(v3, c, r0, j3, s, inv), lid.x); }
      } else {
        put_word(c, r0, j0, encode_word(load_word(c, r0, j0), c, r0, j0, s, inv), lid.x);
      }
    }
  }
  if (STAGE == 0u) { return; }
  workgroupBarrier();
  let tw = max(TW, 1u); // TW = 0 (no staging) must still compile: a constant divisor of 0 is an error
  for (var i = lid.y * COLS + lid.x; i < COLS * TW; i += COLS * LANES) {
    let col = i / tw;
    let j = i % tw;
    if (c0 + col < p.CN) { Q[((c0 + col) * p.R + r0) / 4u + j] = wq[col * WSTR + j]; }
  }
}

@compute @workgroup_size(COLS, LANES)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let c = wid.x * COLS + lid.x;
  let a = tile_absmax(c, wid.y * p.G, lid);
  let s = scale_of(a);
  if (c < p.CN && lid.y == 0u) { S[c * (p.R / p.G) + wid.y] = s; }
  encode_tile(wid.x * COLS, wid.y * p.G, s, lid);
}

@compute @workgroup_size(COLS, LANES)
fn col_absmax(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let c = wid.x * COLS + lid.x;
  let a = tile_absmax(c, wid.y * p.G, lid);
  if (c < p.CN && lid.y == 0u) { A_w[wid.y * p.CN + c] = a; }
}

@compute @workgroup_size(COLS, LANES)
fn col_encode(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let c = wid.x * COLS + lid.x;
  var a = 0u;
  if (c < p.CN) {
    for (var t = 0u; t < p.R / p.G; t++) { a = max(a, A_r[t * p.CN + c]); }
  }
  let s = scale_of(a);
  if (c < p.CN && wid.y == 0u && lid.y == 0u) { S[c] = s; }
  encode_tile(wid.x * COLS, wid.y * p.G, s, lid);
}

// ---- register-transposed kernels (CN % 8 == 0) -------------------------------------------------------
// A warp is 32 rows × 32 columns: lane t holds rows 4·(t/4) .. +3 of columns 8·(t%4) .. +7 (eight
// vec4 loads; four lanes read a row's 128 bytes). Eight warps stack to 256 rows per workgroup.
// col_encode_rt transposes them in registers into its eight columns' words (a store instruction
// writes 32-byte runs of four columns), its 32 column scales from the tiles' absmax in A_r;
// col_absmax_rt (tiles of 256 rows) takes each column's max over the block.
@group(0) @binding(1) var<storage, read> X4: array<vec4<f32>>;
var<workgroup> cmax: array<u32, 256>;
var<workgroup> cscale: array<f32, 32>;

// An invocation's block: `c` its first column, `j` that column within the workgroup's 32, `r` its
// first row; rows r .. r + 3 as vec4s of columns c .. c + 3 (`*0`) and c + 4 .. c + 7 (`*1`).
struct RtBlock {
  c: u32, j: u32, r: u32,
  a0: vec4<f32>, a1: vec4<f32>, b0: vec4<f32>, b1: vec4<f32>,
  d0: vec4<f32>, d1: vec4<f32>, e0: vec4<f32>, e1: vec4<f32>,
}

fn rt_place(li: u32, wid: vec3<u32>) -> RtBlock {
  var k: RtBlock;
  let lane = li % 32u;
  k.j = 8u * (lane % 4u);
  k.c = wid.x * 32u + k.j;
  k.r = wid.y * 256u + (li / 32u) * 32u + 4u * (lane / 4u);
  return k;
}

// The block's values (k placed by rt_place, inside the matrix).
fn rt_load(k0: RtBlock) -> RtBlock {
  var k = k0;
  let i0 = (k.r * p.CN + k.c) / 4u;
  let n4 = p.CN / 4u;
  k.a0 = X4[i0];
  k.a1 = X4[i0 + 1u];
  k.b0 = X4[i0 + n4];
  k.b1 = X4[i0 + n4 + 1u];
  k.d0 = X4[i0 + 2u * n4];
  k.d1 = X4[i0 + 2u * n4 + 1u];
  k.e0 = X4[i0 + 3u * n4];
  k.e1 = X4[i0 + 3u * n4 + 1u];
  return k;
}

// Word of column c (rows r .. r + 3) from those rows' values; its scale from cscale[j].
fn rt_word(v: vec4<f32>, c: u32, r: u32, j: u32) {
  let s = cscale[j];
  Q[(c * p.R + r) / 4u] = encode_word(v, c, r, 0u, s, int_inv(s));
}

@compute @workgroup_size(256)
fn col_encode_rt(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let c0 = wid.x * 32u;
  // Column c0 + li % 32's max over every 8th tile, then over the 8 partials.
  var a = 0u;
  if (c0 + li % 32u < p.CN) {
    for (var t = li / 32u; t < p.R / p.G; t += 8u) { a = max(a, A_r[t * p.CN + c0 + li % 32u]); }
  }
  cmax[li] = a;
  workgroupBarrier();
  if (li < 32u) {
    var m = 0u;
    for (var y = 0u; y < 8u; y++) { m = max(m, cmax[y * 32u + li]); }
    cscale[li] = scale_of(m);
    if (wid.y == 0u && c0 + li < p.CN) { S[c0 + li] = cscale[li]; }
  }
  workgroupBarrier();
  let at = rt_place(li, wid);
  if (at.c >= p.CN || at.r >= p.R) { return; }
  let k = rt_load(at);
  let c = k.c;
  let r = k.r;
  let j = k.j;
  rt_word(vec4<f32>(k.a0.x, k.b0.x, k.d0.x, k.e0.x), c, r, j);
  rt_word(vec4<f32>(k.a0.y, k.b0.y, k.d0.y, k.e0.y), c + 1u, r, j + 1u);
  rt_word(vec4<f32>(k.a0.z, k.b0.z, k.d0.z, k.e0.z), c + 2u, r, j + 2u);
  rt_word(vec4<f32>(k.a0.w, k.b0.w, k.d0.w, k.e0.w), c + 3u, r, j + 3u);
  rt_word(vec4<f32>(k.a1.x, k.b1.x, k.d1.x, k.e1.x), c + 4u, r, j + 4u);
  rt_word(vec4<f32>(k.a1.y, k.b1.y, k.d1.y, k.e1.y), c + 5u, r, j + 5u);
  rt_word(vec4<f32>(k.a1.z, k.b1.z, k.d1.z, k.e1.z), c + 6u, r, j + 6u);
  rt_word(vec4<f32>(k.a1.w, k.b1.w, k.d1.w, k.e1.w), c + 7u, r, j + 7u);
}

// col_absmax's form for G == 256, one tile per workgroup: each invocation's eight columns' max over
// its four rows; the 64 row quads of a column meet in workgroup memory.
var<workgroup> qmax: array<u32, 2048>;

fn abs_bits4(v: vec4<f32>) -> vec4<u32> {
  let b = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
  return select(vec4<u32>(0u), b, b < vec4<u32>(0x7f800000u));
}

@compute @workgroup_size(256)
fn col_absmax_rt(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let c0 = wid.x * 32u;
  let at = rt_place(li, wid);
  var m0 = vec4<u32>(0u);
  var m1 = vec4<u32>(0u);
  if (at.c < p.CN) {
    let k = rt_load(at);
    m0 = max(max(abs_bits4(k.a0), abs_bits4(k.b0)), max(abs_bits4(k.d0), abs_bits4(k.e0)));
    m1 = max(max(abs_bits4(k.a1), abs_bits4(k.b1)), max(abs_bits4(k.d1), abs_bits4(k.e1)));
  }
  let o = ((at.r % 256u) / 4u) * 32u + at.j; // row quad 0 .. 63 of the tile, column j
  qmax[o] = m0.x; qmax[o + 1u] = m0.y; qmax[o + 2u] = m0.z; qmax[o + 3u] = m0.w;
  qmax[o + 4u] = m1.x; qmax[o + 5u] = m1.y; qmax[o + 6u] = m1.z; qmax[o + 7u] = m1.w;
  workgroupBarrier();
  // Column li % 32 over quads 8·(li / 32) .. +7, then over the 8 partials.
  var a = 0u;
  for (var q = (li / 32u) * 8u; q < (li / 32u) * 8u + 8u; q++) { a = max(a, qmax[q * 32u + li % 32u]); }
  cmax[li] = a;
  workgroupBarrier();
  if (li < 32u && c0 + li < p.CN) {
    var t = 0u;
    for (var y = 0u; y < 8u; y++) { t = max(t, cmax[y * 32u + li]); }
    A_w[wid.y * p.CN + c0 + li] = t;
  }
}
