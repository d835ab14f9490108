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
