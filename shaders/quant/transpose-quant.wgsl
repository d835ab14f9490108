// INT8 absmax quantization of xᵀ, read from x [R, CN] (row-major f32) without an fp32 transposed copy:
// codes of xᵀ [CN, R] packed four to a u32 along R, one scale per column c and block b of G rows,
// scales [CN, R/G]. The same codes as quantizeRef(xᵀ, 'int8', group G) (R % G == 0, G % 4 == 0),
// the SR draw indexed by the element's flat position in xᵀ. Prepended: quant/codec.wgsl.
// Serves the weight-gradient GEMM's operands (dYᵀ, Xᵀ in blocks of tokens) and, with G = R, the
// input-gradient GEMM's weight operand (Wᵀ per input channel).
//
// A workgroup is COLS columns × LANES lanes of rows: lane y of a column scans rows y, y+LANES, ...
// (for a fixed row the COLS loads are consecutive), the lanes' absmax meet in workgroup memory, and
// lane y then encodes words y, y+LANES, ... of the column's block.

override COLS: u32 = 64u;
override LANES: u32 = 4u;

struct Params { R: u32, CN: u32, G: u32, seed: u32, stochastic: u32, _a: u32, _b: u32, _c: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> Q: array<u32>;

var<workgroup> red: array<u32, COLS * LANES>;

// bits of 2^-110: blocks whose absmax is below it get s = 0 (SCALE_TINY in quantizer.ts).
const TINY_BITS: u32 = 0x08800000u;

@compute @workgroup_size(COLS, LANES)
fn main(@builtin(local_invocation_id) lid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>) {
  let c = wid.x * COLS + lid.x;
  let r0 = wid.y * p.G;
  let ok = c < p.CN;
  // Absmax on the bit patterns (non-negative floats order as u32): no flushing, NaN/Inf skipped.
  var a = 0u;
  if (ok) {
    for (var r = lid.y; r < p.G; r += LANES) {
      let ab = bitcast<u32>(X[(r0 + r) * p.CN + c]) & 0x7fffffffu;
      if (ab < 0x7f800000u) { a = max(a, ab); }
    }
  }
  red[lid.y * COLS + lid.x] = a;
  workgroupBarrier();
  for (var y = 0u; y < LANES; y++) { a = max(a, red[y * COLS + lid.x]); }
  if (!ok) { return; }
  let s = select(div_rn(bitcast<f32>(a), 127.0), 0.0, a < TINY_BITS);
  let nb = p.R / p.G;
  if (lid.y == 0u) { S[c * nb + wid.y] = s; }
  let base = c * p.R + r0; // flat index of the block's first element in xᵀ
  for (var j = lid.y; j < p.G / 4u; j += LANES) {
    var w = 0u;
    for (var e = 0u; e < 4u; e++) {
      let r = 4u * j + e;
      let v = X[(r0 + r) * p.CN + c];
      var code = 0u;
      if (s != 0.0 && (bitcast<u32>(v) & 0x7fffffffu) < 0x7f800000u) {
        let q = div_rn(v, s);
        code = select(int_encode(q, 127.0), int_encode_sr(q, 127.0, sr_uniform(p.seed, base + r)), p.stochastic != 0u);
      }
      w = set_byte(w, e, code);
    }
    Q[base / 4u + j] = w;
  }
}
