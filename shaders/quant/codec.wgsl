// ---- quant/codec.wgsl: scalar codecs, packing, correctly rounded division, SR hash ----------------
// A snippet of pure functions (no bindings, no entry points, no overrides) prepended to the kernels
// that quantize or dequantize. The specification is the TS in src/engine/quant/: fp8.ts, formats.ts,
// pack.ts, sr.ts; every function here reproduces it bit for bit (tests/engine/quant.gpu.test.ts).
// Encoders work on the f32 bit pattern with integer ops only, so they are exact whatever the GPU's
// float arithmetic does with subnormals or contraction.

// ---- correctly rounded f32 division ---------------------------------------------------------------
// WGSL's `/` promises 2.5 ULP. div_rn takes that quotient q and walks it to the correctly rounded
// one: a/b lies between the midpoints of q's neighbours iff q = RN(a/b). Each midpoint test is an
// exact integer comparison ma·2^k ⋛ mb·(2mq+1) of ≤ 50-bit numbers (24-bit mantissas), so no fma
// (WGSL does not promise fusion) and no float rounding is involved. Ties go to the even pattern.
// Covered: normal a, b and normal quotient; otherwise (zero, subnormal, Inf, NaN) the hardware
// quotient is returned unchanged — the quantizers never depend on those cases.

// Exact x·y for x < 2^24, y < 2^25, as (lo, hi) words; 16-bit limbs keep every partial product < 2^32.
fn qc_mul_wide(x: u32, y: u32) -> vec2<u32> {
  let x0 = x & 0xffffu;
  let x1 = x >> 16u;
  let y0 = y & 0xffffu;
  let y1 = y >> 16u;
  let ll = x0 * y0;
  let mid = x1 * y0 + x0 * y1; // < 2^24 + 2^25
  let lo = ll + (mid << 16u);
  let carry = select(0u, 1u, lo < ll);
  return vec2<u32>(lo, x1 * y1 + (mid >> 16u) + carry);
}

// sign(ma·2^k − p) for ma < 2^24, as -1 / 0 / 1.
fn qc_cmp_shifted(ma: u32, k: i32, p: vec2<u32>) -> i32 {
  if (k < 0) { return -1; } // never reached for a quotient within a few ULP
  if (k > 40) { return 1; }
  var lo = 0u;
  var hi = 0u;
  if (k >= 32) {
    hi = ma << u32(k - 32);
  } else if (k == 0) {
    lo = ma;
  } else {
    lo = ma << u32(k);
    hi = ma >> u32(32 - k);
  }
  if (hi != p.y) { return select(-1, 1, hi > p.y); }
  if (lo != p.x) { return select(-1, 1, lo > p.x); }
  return 0;
}

// sign(|a|/|b| − midpoint(x, next(x))) for a positive normal x given by its bits. With
// a = ma·2^(ea−23), b = mb·2^(eb−23), midpoint = (2mx+1)·2^(ex−24), the test is ma·2^k vs mb·(2mx+1)
// with k = ea − eb − ex + 24 (biased exponents: the biases cancel).
fn qc_cmp_mid(ma: u32, mb: u32, eab: i32, xb: u32) -> i32 {
  let ex = i32(xb >> 23u);
  let mx = (xb & 0x7fffffu) | 0x800000u;
  return qc_cmp_shifted(ma, eab - ex + 24, qc_mul_wide(mb, 2u * mx + 1u));
}

fn div_rn(a: f32, b: f32) -> f32 {
  return qc_div_fix(a, b, a / b);
}

// Walks an estimate q of a/b (within a few ULP) to RN(a/b). Separate from div_rn so tests can
// feed deliberately wrong estimates: a GPU whose `/` is already exact never exercises the walk.
fn qc_div_fix(a: f32, b: f32, q: f32) -> f32 {
  let ab = bitcast<u32>(a) & 0x7fffffffu;
  let bb = bitcast<u32>(b) & 0x7fffffffu;
  var qb = bitcast<u32>(q) & 0x7fffffffu;
  let normal = ab >= 0x800000u && ab < 0x7f800000u && bb >= 0x800000u && bb < 0x7f800000u &&
    qb >= 0x800000u && qb < 0x7f800000u;
  if (!normal) { return q; }
  let ma = (ab & 0x7fffffu) | 0x800000u;
  let mb = (bb & 0x7fffffu) | 0x800000u;
  let eab = i32(ab >> 23u) - i32(bb >> 23u) + 127; // so that k = eab − biased(ex) + 24
  // 2.5 ULP means at most 3 steps; a few more cost nothing when q is already right.
  for (var it = 0; it < 6; it++) {
    let up = qc_cmp_mid(ma, mb, eab, qb);
    if (up > 0 || (up == 0 && (qb & 1u) == 1u)) {
      if (qb + 1u >= 0x7f800000u) { break; }
      qb = qb + 1u;
      continue;
    }
    if (qb == 0x800000u) { break; }
    let dn = qc_cmp_mid(ma, mb, eab, qb - 1u);
    if (dn < 0 || (dn == 0 && (qb & 1u) == 1u)) {
      qb = qb - 1u;
      continue;
    }
    break;
  }
  return bitcast<f32>(qb | ((bitcast<u32>(a) ^ bitcast<u32>(b)) & 0x80000000u));
}

// ---- FP8 ---------------------------------------------------------------------------------------------
// RNE of a magnitude (f32 bits `ab`, finite, below the format's max) to an FP8 magnitude code with m
// mantissa bits and exponent bias `bias`. Normal range: drop 23−m mantissa bits and re-bias; a
// carry out of the mantissa bumps the exponent, which is the right next code. Below the smallest
// normal 2^(1−bias): count units of the smallest subnormal 2^(1−bias−m).
fn qc_fp8_mag(ab: u32, m: u32, bias: i32) -> u32 {
  let e = i32(ab >> 23u) - 127;
  let emin = 1 - bias;
  var keep = 0u;
  var sh = 0u;
  var x = 0u;
  if (e >= emin) {
    sh = 23u - m;
    x = ab;
  } else {
    if (ab < 0x800000u) { return 0u; } // zero or f32-subnormal: < 2^-126, far below half a step
    let d = 23 + emin - i32(m) - e; // >= 24 − m
    if (d > 25) { return 0u; } // mantissa < 2^24 ⇒ value < ¼ step
    sh = u32(d);
    x = (ab & 0x7fffffu) | 0x800000u;
  }
  keep = x >> sh;
  let rem = x & ((1u << sh) - 1u);
  let half = 1u << (sh - 1u);
  let up = select(0u, 1u, rem > half || (rem == half && (keep & 1u) == 1u));
  if (e >= emin) { return keep + up - (u32(127 - bias) << m); }
  return keep + up;
}

fn e4m3_encode(v: f32) -> u32 {
  let b = bitcast<u32>(v);
  let s = (b >> 24u) & 0x80u;
  let ab = b & 0x7fffffffu;
  if (ab > 0x7f800000u) { return 0x7fu; } // NaN → canonical NaN
  if (ab >= 0x43e00000u) { return s | 0x7eu; } // |v| >= 448 (Inf too): saturate
  return s | qc_fp8_mag(ab, 3u, 7);
}

fn e5m2_encode(v: f32) -> u32 {
  let b = bitcast<u32>(v);
  let s = (b >> 24u) & 0x80u;
  let ab = b & 0x7fffffffu;
  if (ab > 0x7f800000u) { return 0x7fu; }
  if (ab >= 0x47600000u) { return s | 0x7bu; } // |v| >= 57344 (Inf too): saturate
  return s | qc_fp8_mag(ab, 2u, 15);
}

// NaN/Inf are built from the runtime sign bits, never as constants (a NaN constant is a WGSL
// shader-creation error).
fn e4m3_decode(c: u32) -> f32 {
  let s = (c & 0x80u) << 24u;
  let e = (c >> 3u) & 0xfu;
  let m = c & 7u;
  if (e == 15u && m == 7u) { return bitcast<f32>(s | 0x7fc00000u); }
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 0.001953125)); } // m·2^-9
  return bitcast<f32>(s | ((e + 120u) << 23u) | (m << 20u));
}

fn e5m2_decode(c: u32) -> f32 {
  let s = (c & 0x80u) << 24u;
  let e = (c >> 2u) & 0x1fu;
  let m = c & 3u;
  if (e == 31u) { return bitcast<f32>(s | select(0x7fc00000u, 0x7f800000u, m == 0u)); }
  if (e == 0u) { return bitcast<f32>(s | bitcast<u32>(f32(m) * 0.0000152587890625)); } // m·2^-16
  return bitcast<f32>(s | ((e + 112u) << 23u) | (m << 21u));
}

// ---- INT8 / INT4 (two's complement) ---------------------------------------------------------------
// round() is half-to-even in WGSL; saturate to [−qmax−1, qmax]; mask to 8 (qmax 127) or 4 (qmax 7) bits.
fn int_encode(v: f32, qmax: f32) -> u32 {
  let r = clamp(round(v), -qmax - 1.0, qmax);
  return u32(i32(r)) & u32(2.0 * qmax + 1.0);
}

fn int8_decode(c: u32) -> f32 {
  return f32(bitcast<i32>(c << 24u) >> 24u);
}

fn int4_decode(c: u32) -> f32 {
  return f32(bitcast<i32>(c << 28u) >> 28u);
}

// ---- NF4 (QLoRA's NormalFloat; table and thresholds: src/engine/quant/nf4.ts) ---------------------
// Four vec4s of the table and of the 15 fp32 midpoints (padded with 2.0, above any scaled value), so
// decode and encode stay in registers: a select picks the vec4, a component index the value.
const NF4_T0 = vec4<f32>(-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453);
const NF4_T1 = vec4<f32>(-0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0);
const NF4_T2 = vec4<f32>(0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224);
const NF4_T3 = vec4<f32>(0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0);
const NF4_M0 = vec4<f32>(-0.8480963706970215, -0.6106328964233398, -0.4599952697753906, -0.33967941999435425);
const NF4_M1 = vec4<f32>(-0.23460739850997925, -0.13791173696517944, -0.045525018125772476, 0.03979014977812767);
const NF4_M2 = vec4<f32>(0.120255246758461, 0.2035212516784668, 0.2920137643814087, 0.3893125355243683);
const NF4_M3 = vec4<f32>(0.5016634464263916, 0.6427869200706482, 0.8614784479141235, 2.0);

fn nf4_decode(c: u32) -> f32 {
  let h = (c >> 2u) & 3u;
  let t = select(select(NF4_T0, NF4_T1, h == 1u), select(NF4_T2, NF4_T3, h == 3u), h >= 2u);
  return t[c & 3u];
}

// Nearest code of a scaled value: the number of thresholds below v (a tie goes to the lower code).
fn nf4_encode(v: f32) -> u32 {
  let one = vec4<u32>(1u);
  let zero = vec4<u32>(0u);
  let n = select(zero, one, vec4<f32>(v) > NF4_M0) + select(zero, one, vec4<f32>(v) > NF4_M1) +
    select(zero, one, vec4<f32>(v) > NF4_M2) + select(zero, one, vec4<f32>(v) > NF4_M3);
  return n.x + n.y + n.z + n.w;
}

// ---- stochastic rounding -----------------------------------------------------------------------
// Same hash and uniform as src/engine/quant/sr.ts: u = ((h >> 9) + ½)·2^-23 ∈ (0,1), exact in f32.
fn pcg_hash(v: u32) -> u32 {
  let state = v * 747796405u + 2891336453u;
  let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

fn sr_uniform(seed: u32, idx: u32) -> f32 {
  let h = pcg_hash(pcg_hash(seed) ^ pcg_hash(idx));
  return (f32(h >> 9u) + 0.5) * 1.1920928955078125e-7;
}

// Magnitude a ∈ [0, max] rounded on the FP8 grid: up with probability frac(a / quantum). The
// quantum is a power of two (built from bits), so a·2^-k, floor, the fraction and r·2^k are exact.
fn qc_fp8_sr_mag(a: f32, m: u32, bias: i32, u: f32) -> f32 {
  let e = max(i32(bitcast<u32>(a) >> 23u) - 127, 1 - bias);
  let qe = e - i32(m);
  let t = a * bitcast<f32>(u32(127 - qe) << 23u);
  let fl = floor(t);
  let r = fl + select(0.0, 1.0, u < t - fl);
  return r * bitcast<f32>(u32(127 + qe) << 23u);
}

fn qc_with_sign(mag: f32, v: f32) -> f32 {
  return bitcast<f32>(bitcast<u32>(mag) | (bitcast<u32>(v) & 0x80000000u));
}

fn e4m3_encode_sr(v: f32, u: f32) -> u32 {
  if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) { return 0x7fu; }
  let a = min(bitcast<f32>(bitcast<u32>(v) & 0x7fffffffu), 448.0);
  return e4m3_encode(qc_with_sign(qc_fp8_sr_mag(a, 3u, 7, u), v));
}

fn e5m2_encode_sr(v: f32, u: f32) -> u32 {
  if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u) { return 0x7fu; }
  let a = min(bitcast<f32>(bitcast<u32>(v) & 0x7fffffffu), 57344.0);
  return e5m2_encode(qc_with_sign(qc_fp8_sr_mag(a, 2u, 15, u), v));
}

fn int_encode_sr(v: f32, qmax: f32, u: f32) -> u32 {
  let c = clamp(v, -qmax - 1.0, qmax);
  let a = abs(c);
  let fl = floor(a);
  let r = fl + select(0.0, 1.0, u < a - fl);
  return u32(i32(select(r, -r, c < 0.0))) & u32(2.0 * qmax + 1.0);
}

// ---- packing (src/engine/quant/pack.ts): element i at bits 8·(i%4) resp. 4·(i%8) --------------------
fn get_byte(w: u32, i: u32) -> u32 {
  return (w >> (8u * (i & 3u))) & 0xffu;
}

fn get_nibble(w: u32, i: u32) -> u32 {
  return (w >> (4u * (i & 7u))) & 0xfu;
}

fn set_byte(w: u32, i: u32, c: u32) -> u32 {
  return w | ((c & 0xffu) << (8u * (i & 3u)));
}

fn set_nibble(w: u32, i: u32, c: u32) -> u32 {
  return w | ((c & 0xfu) << (4u * (i & 7u)));
}

// ---- INT8 absmax of a row held in registers (the producers that write a GEMM operand's codes) ----
// Same rules as the quantizers: NaN/Inf skipped by the absmax and coded 0; s = RN(amax / 127), or 0
// below 2^-110 (SCALE_TINY); code = RNE(RN(v / s)).
fn finite_absmax4(v: vec4<f32>) -> f32 {
  let b = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
  let a = select(vec4<f32>(0.0), bitcast<vec4<f32>>(b), b < vec4<u32>(0x7f800000u));
  return max(max(a.x, a.y), max(a.z, a.w));
}

fn int8_scale(amax: f32) -> f32 {
  return select(div_rn(amax, 127.0), 0.0, bitcast<u32>(amax) < 0x08800000u);
}

// ---- division-free INT codes ---------------------------------------------------------------------
// The code of RN(v/s) from q = v·(1/s), no division per element: q is within 6 ulps of v/s (1/s
// within WGSL's 2.5 ulp, one rounded product), so outside a band of |q|·2^-19 (≥ 16 ulps) around a
// boundary (the half-integers) v/s and RN(v/s) lie on q's side of it: the same code. Lanes in the
// band (`tight`) are redone with div_rn. s must be normal (the scales are ≥ 2^-110 / QMAX).
const TIGHT_REL: f32 = 1.9073486328125e-6;

// Codes of four lanes, and which lanes sit too near a rounding boundary to trust.
struct Coded {
  codes: vec4<u32>,
  tight: vec4<bool>,
}

// INT8 / INT4 of q (≈ v/s, |q| ≲ qmax): round half to even, saturate, two's complement bits. The
// fraction test is exact (q − round(q) is representable).
fn int_nearest(q: vec4<f32>, qmax: f32) -> Coded {
  let qc = clamp(q, vec4<f32>(-qmax - 1.0), vec4<f32>(qmax));
  let r = round(qc);
  let tight = abs(qc - r) >= vec4<f32>(0.5) - abs(qc) * TIGHT_REL;
  return Coded(bitcast<vec4<u32>>(vec4<i32>(r)) & vec4<u32>(u32(2.0 * qmax + 1.0)), tight);
}

// 1/s for the division-free codes, 0 for s = 0.
fn int_inv(s: f32) -> f32 {
  return select(1.0 / s, 0.0, s == 0.0);
}

// One finite v's code with scale s ≠ 0 (inv = int_inv(s)): int_encode(div_rn(v, s), qmax).
fn int_code_nearest(v: f32, s: f32, inv: f32, qmax: f32) -> u32 {
  let c = int_nearest(vec4<f32>(v * inv), qmax);
  if (c.tight.x) { return int_encode(div_rn(v, s), qmax); }
  return c.codes.x;
}

// Four consecutive values' codes in one word (element j at byte j), inv = int_inv(s); non-finite
// values and s = 0 give code 0.
fn int8_word(v: vec4<f32>, s: f32, inv: f32) -> u32 {
  let fin = (bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu)) < vec4<u32>(0x7f800000u);
  let f = int_nearest(select(vec4<f32>(0.0), v, fin) * inv, 127.0);
  var c = f.codes;
  let redo = f.tight & fin;
  // Lane by lane with constant indices (a loop would index the vectors dynamically).
  if (any(redo) && s != 0.0) {
    if (redo.x) { c.x = int_encode(div_rn(v.x, s), 127.0); }
    if (redo.y) { c.y = int_encode(div_rn(v.y, s), 127.0); }
    if (redo.z) { c.z = int_encode(div_rn(v.z, s), 127.0); }
    if (redo.w) { c.w = int_encode(div_rn(v.w, s), 127.0); }
  }
  c = select(c, vec4<u32>(0u), !fin | vec4<bool>(s == 0.0));
  return c.x | (c.y << 8u) | (c.z << 16u) | (c.w << 24u);
}
