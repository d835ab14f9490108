// TACO (Adaptive Scale-Hadamard + dual-scale FP8 E4M3) compression of a flat fp32 chunk, fused.
//   n = elements, G = group size (override, power of two, 32..4·WG), NG = ceil(n/G) groups,
//   T = G/4 threads per group; each thread owns 4 consecutive elements = one packed code word.
// A workgroup covers 4·WG elements (4·WG/G whole groups); the grid is 2-D (gridX wide) so long
// chunks fit maxComputeWorkgroupsPerDimension. Elements ≥ n are zero padding.
//
// Payload (array<u32>, word offsets in P): codes [NG·G/4 words: byte i of the chunk at bits
// 8·(i%4) of word i/4], then s[NG] (fp32 bits), then a[NG]. All NG·G codes are stored, including
// the padded tail of the last group: the Hadamard mixes the padding into every output, so the
// inverse needs all G coefficients (see src/engine/quant/taco.ts).
//
// Numerics match the TS reference (src/engine/quant/taco.ts) operation for operation: the sum of
// squares is an adjacent-pair tree (the xor butterfly computes exactly that, since fp32 + is
// commutative), FWHT stages run at strides 1, 2, 4, … with (u, v) → (u + v, u − v), divisions
// are correctly rounded (div_rn, or see quotient_for_e4m3). Where a GPU differs — WGSL's sqrt is
// not correctly rounded, and drivers may fuse a·x + … into an fma — a code sitting on a rounding
// boundary can flip: 2 to 9 codes per million on an H200, none on SwiftShader.
// Needs from the codec snippet: div_rn, e4m3_encode, e4m3_decode. From taco_xchg.wgsl: xchg1,
// xchg4 and `sg`.

override G: u32 = 128u;
override WG: u32 = 128u;

struct Params {
  n: u32,
  groups: u32,
  sOff: u32,      // word offset of s in the payload
  aOff: u32,      // word offset of a
  tiles: u32,     // workgroups doing work (the 2-D grid may have a few more)
  gridX: u32,
  rsqrtG: f32,    // fp32(1/sqrt(G)), from TS so both sides use the same constant
  invG: f32,      // 1/G, exact
}

// One declaration set serves both entry points: payload is written by compress and read by
// decompress, data is x (read) for compress and x̂ (written) for decompress.
@group(0) @binding(0) var<storage, read_write> payload: array<u32>;
@group(0) @binding(1) var<storage, read_write> data: array<f32>;
@group(0) @binding(2) var<uniform> P: Params;

const FP8_MAX = 448.0;

fn is_finite(v: f32) -> bool {
  return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

// RN(y/s) as far as e4m3_encode can tell, without a division per element. y·(1/s) lies within a
// few ulps of y/s, and an E4M3 code changes only at midpoints between FP8 neighbours: unless the
// product is within 8 ulps of one (~1 element in 60 000), its code is the code of RN(y/s). Those
// few take div_rn. Dropped bits below the FP8 step: 20 for normal E4M3 (|v| ≥ 2^-6), 14 − e below
// (step 2^-9); the midpoint 2^-10 between 0 and the smallest subnormal is caught from both sides.
fn quotient_for_e4m3(y: f32, s: f32, inv: f32) -> f32 {
  let q = y * inv;
  let b = bitcast<u32>(q) & 0x7fffffffu;
  let e = i32(b >> 23u) - 127;
  if (b < 0x800000u || b >= 0x7f800000u || e < -11) { return q; }   // far below the grid, or huge
  let sh = u32(max(20, 14 - e));
  let x = (b & 0x7fffffu) | 0x800000u;
  let rem = x & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  if (max(rem, half) - min(rem, half) > 8u) { return q; }
  return div_rn(y, s);
}

// Normalised FWHT of the group, 4 elements per thread: strides 1 and 2 in registers, then
// strides 4·m through the partner thread t ^ m (lower partner keeps u + v, upper gets u − v).
fn fwht(v0: vec4<f32>, t: u32, sgs: u32) -> vec4<f32> {
  var y = vec4<f32>(v0.x + v0.y, v0.x - v0.y, v0.z + v0.w, v0.z - v0.w);
  y = vec4<f32>(y.x + y.z, y.y + y.w, y.x - y.z, y.y - y.w);
  for (var m = 1u; m < G / 4u; m <<= 1u) {
    let o = xchg4(y, m, t, sgs);
    y = select(y + o, o - y, vec4<bool>((t & m) != 0u));
  }
  return y * P.rsqrtG;
}

@compute @workgroup_size(WG)
fn compress(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32> /*SG*/) {
  let tile = wid.y * P.gridX + wid.x;
  if (tile >= P.tiles) { return; }   // whole workgroup: barriers stay uniform
  let word = tile * WG + t;
  let e0 = word * 4u;
  let g = e0 / G;

  // Non-finite inputs are zeroed so one NaN cannot poison its group's scales.
  var v = vec4<f32>(0.0);
  for (var j = 0u; j < 4u; j++) {
    if (e0 + j < P.n) {
      let xi = data[e0 + j];
      if (is_finite(xi)) { v[j] = xi; }
    }
  }

  // Adaptive scale a = clamp(448 / sqrt(mean(x²) + 1e-6), 1e-3, 1e3); mean over all G slots.
  let sq = v * v;
  var ss = (sq.x + sq.y) + (sq.z + sq.w);
  for (var m = 1u; m < G / 4u; m <<= 1u) { ss = ss + xchg1(ss, m, t, sg); }
  let var2 = max(ss * P.invG + 1e-6, 1e-12);
  let a = clamp(div_rn(FP8_MAX, sqrt(var2)), 1e-3, 1e3);

  let y = fwht(v * a, t, sg);

  // Second scale s = clamp(max|y| / 448, 1e-12, 1e6); max is order-independent.
  let ay = abs(y);
  var mx = max(max(ay.x, ay.y), max(ay.z, ay.w));
  for (var m = 1u; m < G / 4u; m <<= 1u) { mx = max(mx, xchg1(mx, m, t, sg)); }
  let s = clamp(div_rn(mx, FP8_MAX), 1e-12, 1e6);
  let inv = 1.0 / s;

  var packed = 0u;
  for (var j = 0u; j < 4u; j++) {
    let q = e4m3_encode(clamp(quotient_for_e4m3(y[j], s, inv), -FP8_MAX, FP8_MAX));
    packed |= (q & 0xffu) << (8u * j);
  }
  if (g < P.groups) {
    payload[word] = packed;
    if ((t & (G / 4u - 1u)) == 0u) {
      payload[P.sOff + g] = bitcast<u32>(s);
      payload[P.aOff + g] = bitcast<u32>(a);
    }
  }
}

@compute @workgroup_size(WG)
fn decompress(@builtin(local_invocation_index) t: u32, @builtin(workgroup_id) wid: vec3<u32> /*SG*/) {
  let tile = wid.y * P.gridX + wid.x;
  if (tile >= P.tiles) { return; }
  let word = tile * WG + t;
  let e0 = word * 4u;
  let g = e0 / G;

  // Threads past the last group still run the butterflies (their partners need them) on zeros.
  var w = 0u;
  var s = 0.0;
  var a = 1.0;
  if (g < P.groups) {
    w = payload[word];
    s = bitcast<f32>(payload[P.sOff + g]);
    a = bitcast<f32>(payload[P.aOff + g]);
  }
  var yq: vec4<f32>;
  for (var j = 0u; j < 4u; j++) { yq[j] = e4m3_decode((w >> (8u * j)) & 0xffu) * s; }

  // x̂ = t · RN(1/a) (one division per thread, not per element; the reference does the same).
  let xa = fwht(yq, t, sg) * div_rn(1.0, a);
  for (var j = 0u; j < 4u; j++) {
    if (e0 + j < P.n) { data[e0 + j] = xa[j]; }
  }
}
