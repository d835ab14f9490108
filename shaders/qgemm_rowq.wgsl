// Per-row absmax INT8 quantization of activations for the INT8 GEMM (qgemm.wgsl):
//   X [M, K] fp32 → XQ [M, K/4] packed int8 (pack.ts layout) + SX [M] fp32,
//   quantizeRef(x, 'int8', {kind: 'row', rowLength: K}) code for code: s = fp32(max|x|/127)
//   (0 when max < 2^-110), q = RNE(fp32(x/s)) with div_rn; NaN/Inf are skipped by the max and
//   encode as 0. M = rows, K = row length (K % 4 == 0: rows are whole words).
// One workgroup per row (grid gridX wide, 2-D for many rows); each thread takes words t, t+WG, …
// Two passes over the row: the second re-reads it from cache.

override WG: u32 = 64u;

struct Params { M: u32, K: u32, gridX: u32, _p: u32 }

@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> XQ: array<u32>;
@group(0) @binding(2) var<storage, read_write> SX: array<f32>;
@group(0) @binding(3) var<uniform> P: Params;

var<workgroup> red: array<f32, WG>;

const FMAX = 3.4028234663852886e38;

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let row = wid.y * P.gridX + wid.x;
  if (row >= P.M) { return; }
  let kw = P.K / 4u;
  var m = 0.0;
  for (var w = t; w < kw; w += WG) {
    let a = abs(X[row * kw + w]);
    for (var e = 0u; e < 4u; e++) {
      if (a[e] > m && a[e] <= FMAX) { m = a[e]; }
    }
  }
  red[t] = m;
  for (var h = WG / 2u; h > 0u; h >>= 1u) {
    workgroupBarrier();
    if (t < h) { red[t] = max(red[t], red[t + h]); }
  }
  let amax = workgroupUniformLoad(&red[0]);
  var s = 0.0;
  if (amax >= 7.703719777548943e-34) { s = div_rn(amax, 127.0); }   // 2^-110
  if (t == 0u) { SX[row] = s; }
  for (var w = t; w < kw; w += WG) {
    let v = X[row * kw + w];
    var packed = 0u;
    if (s != 0.0) {
      for (var e = 0u; e < 4u; e++) {
        if (abs(v[e]) <= FMAX) { packed |= int_encode(div_rn(v[e], s), 127.0) << (8u * e); }
      }
    }
    XQ[row * kw + w] = packed;
  }
}
