// One-dispatch absmax quantize and dequantize for contiguous segments (groups, rows, a small
// tensor): the same codes and scales as the four passes of quantize.wgsl and as quantizeRef, with
// x read once. src/engine/kernels/quantize.ts assembles a module from `//--- name` sections:
//   [enable subgroups;] const WG, const R, quant/codec.wgsl, quantize.wgsl `common`, then
//   quantize: `xchg_sg` | `xchg_wg`, `load_vec4` | `load_scalar`, `quantize`;
//   dequantize: `store_vec4` | `store_scalar`, `dequantize`.
// Legend: N = p.n elements, L = p.seg segment length, S = p.nscales segments, V = L/4 vec4 words
// per segment, T = invocations per segment (a power of two), R = vec4 registers per invocation,
// WG = invocations per workgroup. The vec4 sections need N % 4 == 0; the scalar ones check each
// element (elements ≥ N read as 0 and are never written).
//
// quantize_group (L % 4 == 0; INT4 L % 8 == 0, so no code word straddles two segments; V ≤ T·R):
//   a team of T invocations owns one segment; invocation t holds the segment's words t, t + T, …,
//   t + (R−1)·T in registers (past V: zeros), so a warp's load of one register reads runs of 16·T
//   contiguous bytes. A workgroup tile is WG/T segments; workgroups stride over the tiles (a
//   uniform loop, so the barriers of the workgroup-memory exchange stay legal). Per segment:
//   absmax over the team (u32 bits of |x|: exact, order-free) through subgroup shuffles or
//   workgroup memory, s = div_rn(amax, QMAX) (the bits finalize_scales writes), then one code per
//   element with no division (encode4). INT4 half-words of neighbouring invocations t, t ^ 1 are
//   joined by one more exchange; every code word is written whole, once. L is a uniform, so one
//   pipeline serves every segment length with the same T and R.
// dequantize_group (L % 4 == 0 or a single scale): invocation lid of tile k decodes words
//   (k·R + r)·WG + lid, r < R: every load and store instruction is contiguous across the warp; the
//   scale index 4·word / L divides by the override SEG, a constant for the compiler.
// Traffic per element: quantize reads 4 bytes and writes bits/8 (+ 4 per segment); dequantize reads
// bits/8 (+ 4 per segment, cached) and writes 4. No atomics, no clearing pass.

//--- xchg_sg
// The partner exchange of invocation lid with lid ^ m (m < T): subgroup shuffles where the partner
// is in the same subgroup (lane = lid mod subgroup size, the layout of a 1-D workgroup on Vulkan,
// D3D12 and Metal), workgroup memory beyond. `sgs` is the uniform subgroup size, so the branch is
// uniform and the barriers behind it are legal. Both variants move bits unchanged.
fn xchg(v: u32, m: u32, lid: u32, sgs: u32) -> u32 {
  if (m < sgs) { return subgroupShuffleXor(v, m); }
  return xchg_mem(v, m, lid);
}

fn swap_pairs(c: ptr<function, array<u32, R>>, lid: u32, sgs: u32) {
  if (sgs >= 2u) {
    for (var r = 0u; r < R; r++) { (*c)[r] = subgroupShuffleXor((*c)[r], 1u); }
  } else {
    swap_pairs_mem(c, lid);
  }
}

//--- xchg_wg
// Without the subgroups feature: every exchange through workgroup memory.
const sg = 0u;

fn xchg(v: u32, m: u32, lid: u32, sgs: u32) -> u32 {
  return xchg_mem(v, m, lid);
}

fn swap_pairs(c: ptr<function, array<u32, R>>, lid: u32, sgs: u32) {
  swap_pairs_mem(c, lid);
}

//--- load_vec4
@group(0) @binding(1) var<storage, read> x4: array<vec4<f32>>;

fn load4(k: u32) -> vec4<f32> {
  if (k < p.n / 4u) { return x4[k]; }
  return vec4<f32>(0.0);
}

//--- load_scalar
@group(0) @binding(1) var<storage, read> x1: array<f32>;

fn load4(k: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) {
    if (4u * k + c < p.n) { v[c] = x1[4u * k + c]; }
  }
  return v;
}

//--- store_vec4
@group(0) @binding(3) var<storage, read_write> y4: array<vec4<f32>>;

fn store4(k: u32, v: vec4<f32>) {
  y4[k] = v;
}

//--- store_scalar
@group(0) @binding(3) var<storage, read_write> y1: array<f32>;

fn store4(k: u32, v: vec4<f32>) {
  for (var c = 0u; c < 4u; c++) {
    if (4u * k + c < p.n) { y1[4u * k + c] = v[c]; }
  }
}

//--- quantize
override T: u32 = 4u;
override LOG_T: u32 = countTrailingZeros(T);
// Testing hook: ulps added to 1/s, standing in for a GPU whose division is that far off (WGSL
// promises 2.5 ulp); the codes must not change.
override INV_SKEW: i32 = 0;

@group(0) @binding(2) var<storage, read_write> scales_w: array<f32>;
@group(0) @binding(3) var<storage, read_write> words_w: array<u32>;

var<workgroup> xsh: array<u32, WG>;
var<workgroup> xpairs: array<u32, WG * R>;

// One value per invocation per call; the first barrier keeps the previous call's readers ahead of
// this call's writers.
fn xchg_mem(v: u32, m: u32, lid: u32) -> u32 {
  workgroupBarrier();
  xsh[lid] = v;
  workgroupBarrier();
  return xsh[lid ^ m];
}

// All R registers with the partner lid ^ 1 in one round.
fn swap_pairs_mem(c: ptr<function, array<u32, R>>, lid: u32) {
  workgroupBarrier();
  for (var r = 0u; r < R; r++) { xpairs[r * WG + lid] = (*c)[r]; }
  workgroupBarrier();
  for (var r = 0u; r < R; r++) { (*c)[r] = xpairs[r * WG + (lid ^ 1u)]; }
}

// Butterfly max over the team (aligned groups of T invocations).
fn team_max(v: u32, lid: u32, sgs: u32) -> u32 {
  var m = v;
  for (var l = 0u; l < LOG_T; l++) { m = max(m, xchg(m, 1u << l, lid, sgs)); }
  return m;
}

// E4M3 / E5M2 of q with the sign bits `sign`, as codec.wgsl's e4m3_encode / e5m2_encode would
// round RN(x/s). Normal range (|q| ≥ 2^(1−bias)): keep m mantissa bits of the pattern, adding half
// of the dropped ones (no ties outside the band), and re-bias; the boundaries are the patterns whose
// dropped bits are exactly one half. Subnormal range: |q|·2^(bias−1+m) counts subnormal steps
// (an exact power-of-two scaling), rounded like an integer; its top value 2^m is the first normal
// code. |q| ≥ max saturates (the next midpoint, 464 resp. 61440, is out of reach of x/s ≤ QMAX·(1+ε)).
fn fp8_nearest(q: vec4<f32>, sign: vec4<u32>) -> Coded {
  let e5 = FMT == 1u;
  let m = select(3u, 2u, e5);
  let fmax = select(448.0, 57344.0, e5);
  let rebias = select(0x3c000000u, 0x38000000u, e5);    // (127 − bias) << 23
  let min_normal = select(0x3c800000u, 0x38800000u, e5); // bits of 2^(1 − bias)
  let sub_scale = select(512.0, 65536.0, e5);            // 1 / (smallest subnormal)
  let sh = 23u - m;
  let half = 1u << (sh - 1u);
  let aq = min(abs(q), vec4<f32>(fmax));
  let b = bitcast<vec4<u32>>(aq);
  let normal = b >= vec4<u32>(min_normal);
  let ncode = ((b + vec4<u32>(half)) - vec4<u32>(rebias)) >> vec4<u32>(sh);
  // |dropped − half| ≤ 16 ulps, as one unsigned comparison (below half − 16 wraps around).
  let ntight = ((b & vec4<u32>(2u * half - 1u)) - vec4<u32>(half - 16u)) <= vec4<u32>(32u);
  let t = aq * sub_scale;
  let rt = round(t);
  let stight = abs(t - rt) >= vec4<f32>(0.5) - t * TIGHT_REL;
  return Coded(select(vec4<u32>(rt), ncode, normal) | sign, select(stight, ntight, normal));
}

// NF4 codes of q = v·(1/s) per lane (thresholds counted), tight where q is within the guard band of
// a threshold (the same band as int_nearest: outside it, RN(v/s) lies on q's side).
fn nf4_lane(q: f32) -> vec2<u32> {
  let one = vec4<u32>(1u);
  let zero = vec4<u32>(0u);
  let qv = vec4<f32>(q);
  let band = vec4<f32>(abs(q) * TIGHT_REL);
  let n = select(zero, one, qv > NF4_M0) + select(zero, one, qv > NF4_M1) + select(zero, one, qv > NF4_M2) +
    select(zero, one, qv > NF4_M3);
  let t = any(abs(qv - NF4_M0) <= band) || any(abs(qv - NF4_M1) <= band) || any(abs(qv - NF4_M2) <= band) ||
    any(abs(qv - NF4_M3) <= band);
  return vec2<u32>(n.x + n.y + n.z + n.w, select(0u, 1u, t));
}

fn nf4_nearest(q: vec4<f32>) -> Coded {
  let a = nf4_lane(q.x);
  let b = nf4_lane(q.y);
  let c = nf4_lane(q.z);
  let d = nf4_lane(q.w);
  return Coded(vec4<u32>(a.x, b.x, c.x, d.x), vec4<u32>(a.y, b.y, c.y, d.y) != vec4<u32>(0u));
}

// The four codes of x (finite) in a segment of scale s (inv = 1/s, 0 when s = 0), packed at the
// bottom of a word (INT4: of a half-word). i = flat index of x.x. Nearest rounding: the division-
// free codes, lanes near a boundary redone the exact way. Stochastic rounding: every lane the exact
// way (u is compared with the fraction of the exact quotient). Exact way = the passes' encode:
// encode_one(div_rn(x, s)). s = 0 gives the zero code, like the reference.
fn encode4(x: vec4<f32>, s: f32, inv: f32, i: u32) -> u32 {
  var c = vec4<u32>(0u);
  var exact = vec4<bool>(true);
  if (p.stochastic == 0u) {
    var f: Coded;
    if (FMT == 4u) {
      f = nf4_nearest(x * inv);
    } else if (FMT >= 2u) {
      f = int_nearest(x * inv, p.qmax);
    } else {
      f = fp8_nearest(x * inv, (bitcast<vec4<u32>>(x) >> vec4<u32>(24u)) & vec4<u32>(0x80u));
    }
    c = f.codes;
    exact = f.tight;
  }
  // Lane by lane with constant indices: a loop over j would index the vectors dynamically, which
  // can move them to local memory.
  if (any(exact) && s != 0.0) {
    if (exact.x) { c.x = encode_one(div_rn(x.x, s), i); }
    if (exact.y) { c.y = encode_one(div_rn(x.y, s), i + 1u); }
    if (exact.z) { c.z = encode_one(div_rn(x.z, s), i + 2u); }
    if (exact.w) { c.w = encode_one(div_rn(x.w, s), i + 3u); }
  }
  c = select(c, vec4<u32>(zero_code()), s == 0.0);
  // Past the tensor's end: padding 0 (NF4 would code those zeros 7).
  c = select(c, vec4<u32>(0u), vec4<u32>(i) + vec4<u32>(0u, 1u, 2u, 3u) >= vec4<u32>(p.n));
  if (FMT >= 3u) { return c.x | (c.y << 4u) | (c.z << 8u) | (c.w << 12u); }
  return c.x | (c.y << 8u) | (c.z << 16u) | (c.w << 24u);
}

@compute @workgroup_size(WG)
fn quantize_group(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                  @builtin(num_workgroups) nwg: vec3<u32> /*SG*/) {
  let t = lid % T;
  let nvec = (p.n + 3u) / 4u;
  let V = p.seg / 4u;
  for (var tile = wid.x; tile < p.tiles; tile += nwg.x) {
    let g = tile * (WG / T) + lid / T; // this team's segment
    let k0 = g * V + t;                 // word of register 0

    // NaN/±Inf read as 0: they get code 0 and must not set the scale.
    var v: array<vec4<f32>, R>;
    var amax = 0u;
    for (var r = 0u; r < R; r++) {
      var w = vec4<f32>(0.0);
      if (r * T + t < V) { w = load4(k0 + r * T); }
      let ab = bitcast<vec4<u32>>(w) & vec4<u32>(0x7fffffffu);
      let finite = ab < vec4<u32>(0x7f800000u);
      v[r] = select(vec4<f32>(0.0), w, finite);
      let a = select(vec4<u32>(0u), ab, finite);
      amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    amax = team_max(amax, lid, sg);
    let s = select(div_rn(bitcast<f32>(amax), p.qmax), 0.0, amax < TINY_BITS);
    // s is normal (≥ 2^-110 / 57344), so 1/s is too and within WGSL's 2.5-ulp division bound.
    let inv = select(bitcast<f32>(bitcast<u32>(1.0 / s) + bitcast<u32>(INV_SKEW)), 0.0, s == 0.0);
    if (t == 0u && g < p.nscales) { scales_w[g] = s; }

    var c: array<u32, R>;
    for (var r = 0u; r < R; r++) { c[r] = encode4(v[r], s, inv, 4u * (k0 + r * T)); }

    if (FMT >= 3u) {
      // Word k/2 holds the half-words of words k (even t) and k + 1 (t + 1): the even invocation
      // joins them. T and V are even here, so the partner is in the same segment.
      var other = c;
      swap_pairs(&other, lid, sg);
      for (var r = 0u; r < R; r++) {
        let k = k0 + r * T;
        if ((t & 1u) == 0u && r * T + t < V && k < nvec) { words_w[k >> 1u] = c[r] | (other[r] << 16u); }
      }
    } else {
      for (var r = 0u; r < R; r++) {
        let k = k0 + r * T;
        if (r * T + t < V && k < nvec) { words_w[k] = c[r]; }
      }
    }
  }
}

//--- dequantize
// Segment length; 0xffffffff for a single scale (4·k / SEG = 0 for every word k of a tensor < 2^32 elements).
override SEG: u32 = 128u;

@group(0) @binding(1) var<storage, read> words_r: array<u32>;
@group(0) @binding(2) var<storage, read> scales_r: array<f32>;

// Four values from the code bits at the bottom of w (INT4: a half-word).
fn decode4(w: u32) -> vec4<f32> {
  if (FMT >= 3u) {
    return vec4<f32>(decode_one(w & 0xfu), decode_one((w >> 4u) & 0xfu), decode_one((w >> 8u) & 0xfu),
      decode_one((w >> 12u) & 0xfu));
  }
  return vec4<f32>(decode_one(w & 0xffu), decode_one((w >> 8u) & 0xffu), decode_one((w >> 16u) & 0xffu),
    decode_one(w >> 24u));
}

@compute @workgroup_size(WG)
fn dequantize_group(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
  let nvec = (p.n + 3u) / 4u;
  for (var tile = wid.x; tile < p.tiles; tile += nwg.x) {
    var w: array<u32, R>;
    var s: array<f32, R>;
    for (var r = 0u; r < R; r++) {
      let k = (tile * R + r) * WG + lid;
      if (k < nvec) {
        if (FMT >= 3u) {
          w[r] = words_r[k >> 1u] >> (16u * (k & 1u));
        } else {
          w[r] = words_r[k];
        }
        s[r] = scales_r[(4u * k) / SEG];
      }
    }
    for (var r = 0u; r < R; r++) {
      let k = (tile * R + r) * WG + lid;
      if (k < nvec) { store4(k, decode4(w[r]) * s[r]); }
    }
  }
}
