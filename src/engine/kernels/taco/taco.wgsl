// TACO (Adaptive Scale-Hadamard + dual-scale FP8 E4M3) compression of a flat fp32 chunk, fused.
// The specification is src/engine/quant/taco.ts; these kernels reproduce it operation for operation.
//   n = elements, G = group size (power of two, 32..512), NG = ceil(n/G) groups,
//   V = 16-byte words per invocation (a const TS prepends), T = G/(4·V) invocations per group.
// Invocation t of a group holds the group's words t, t + T, …, t + (V−1)·T in registers
// v[0..V−1]: of a group element's index, bits 0–1 pick the vec4 component, the next log2(T) bits
// the invocation and the top log2(V) bits the register. The FWHT and the sums therefore run their
// first two strides inside a vec4, the next log2(T) through partner invocations (subgroup shuffles
// where available) and the rest across registers, never through memory. A warp's load of one
// register reads runs of 16·T contiguous bytes.
// A workgroup tile is WG/T whole groups (4·V·WG elements); workgroups stride over the tiles, so
// one 1-D dispatch of at most maxComputeWorkgroupsPerDimension workgroups covers any n.
// Elements ≥ n are zero padding.
//
// Payload (array<u32>, word offsets in P): codes [NG·G/4 words: byte i of the chunk at bits
// 8·(i%4) of word i/4, so code word k belongs to fp32 word k], then s[NG] (fp32 bits), then a[NG].
// All NG·G codes are stored, including the padded tail of the last group: the Hadamard mixes the
// padding into every output, so the inverse needs all G coefficients (see src/engine/quant/taco.ts).
//
// Numerics: the sum of squares is an adjacent-pair tree (index bits in ascending order: fp32 + is
// commutative, so each partner computing its own copy gives the same bits), FWHT stages run at
// strides 1, 2, 4, … with (u, v) → (u + v, u − v), each stage elementwise, so the register layout
// changes nothing in the rounding; divisions are correctly rounded (div_rn once per group, and per
// element the code of RN(y/s) from the product y·(1/s), checked against the FP8 rounding boundaries:
// near_codes / code_exact). Where a GPU differs — WGSL's sqrt is not correctly rounded, and drivers
// may fuse a·x + … into an fma — a code sitting on a rounding boundary can flip: a few per million
// on NVIDIA GPUs, none on SwiftShader.
// Needs from the codec snippet: div_rn, qc_cmp_mid. From taco-xchg.wgsl: xchg1, xchg4 and `sg`.
// From taco-io.wgsl: the payload and data bindings, load4 (compress) or store4 (decompress).

//--- common
override G: u32 = 128u;
override WG: u32 = 256u;
override T: u32 = G / (4u * V);
// Stage counts of the exchanges and of the register butterflies. Loops run over these with
// constant trip counts, so that once unrolled every register index is a constant (a stride
// variable doubling each pass would index the register arrays dynamically: local memory).
override LOG_T: u32 = countTrailingZeros(T);
const LOG_V: u32 = countTrailingZeros(V);

struct Params {
  n: u32,
  groups: u32,
  sOff: u32,      // word offset of s in the payload
  aOff: u32,      // word offset of a
  tiles: u32,     // ceil(NG / (WG/T))
  rsqrtG: f32,    // fp32(1/sqrt(G)), from TS so both sides use the same constant
  invG: f32,      // 1/G, exact
  // −0.0, from TS. `x·y + nz` is the correctly rounded product whether or not the compiler fuses
  // it, and nothing is left for it to fuse into the add that follows: NVIDIA's compiler contracts
  // a product into a following add (an FMA, one rounding instead of two) in some register layouts
  // and not others, which changed s by an ulp against the reference. −0 keeps the sign of a zero.
  nz: f32,
}

@group(0) @binding(2) var<uniform> P: Params;

const FP8_MAX = 448.0;

// Non-finite inputs are read as 0, so one NaN cannot poison its group's scales. An integer test:
// WGSL lets a compiler assume floats are finite, so a float comparison could be folded away.
fn finite_or_zero(v: vec4<f32>) -> vec4<f32> {
  let e = bitcast<vec4<u32>>(v) & vec4<u32>(0x7f800000u);
  return select(vec4<f32>(0.0), v, e != vec4<u32>(0x7f800000u));
}

// Unnormalised FWHT of the group, in place on this invocation's V words.
fn fwht(v: ptr<function, array<vec4<f32>, V>>, lid: u32, sgs: u32) {
  for (var j = 0u; j < V; j++) {                       // strides 1, 2: inside the vec4
    let u = (*v)[j];
    let h = vec4<f32>(u.x + u.y, u.x - u.y, u.z + u.w, u.z - u.w);
    (*v)[j] = vec4<f32>(h.x + h.z, h.y + h.w, h.x - h.z, h.y - h.w);
  }
  // Strides 4·m, m < T: with invocation lid ^ m. The lower one keeps u + v = o + y, the upper one
  // gets u − v = o + (−1)·y; a product by ±1 is exact, so fused or not this is one rounding.
  for (var l = 0u; l < LOG_T; l++) {
    let m = 1u << l;
    let sign = select(1.0, -1.0, (lid & m) != 0u);
    for (var j = 0u; j < V; j++) {
      let o = xchg4((*v)[j], m, lid, sgs);
      (*v)[j] = o + sign * (*v)[j];
    }
  }
  for (var l = 0u; l < LOG_V; l++) {                  // strides 4·T·h: registers j and j + h
    let h = 1u << l;
    for (var j = 0u; j < V; j++) {
      if ((j & h) == 0u) {
        let u = (*v)[j];
        let w = (*v)[j + h];
        (*v)[j] = u + w;
        (*v)[j + h] = u - w;
      }
    }
  }
}

// Adjacent-pair tree sum of the group from per-register partial sums (the caller has added each
// word's four values as a pair tree): across the T invocations, then across the V registers.
fn group_sum(p: ptr<function, array<f32, V>>, lid: u32, sgs: u32) -> f32 {
  for (var l = 0u; l < LOG_T; l++) {
    for (var j = 0u; j < V; j++) { (*p)[j] = (*p)[j] + xchg1((*p)[j], 1u << l, lid, sgs); }
  }
  for (var l = 0u; l < LOG_V; l++) {
    let h = 1u << l;
    for (var j = 0u; j < V; j++) {
      if ((j & (2u * h - 1u)) == 0u) { (*p)[j] = (*p)[j] + (*p)[j + h]; }
    }
  }
  return (*p)[0];
}

fn group_max(x: f32, lid: u32, sgs: u32) -> f32 {
  var r = x;
  for (var l = 0u; l < LOG_T; l++) { r = max(r, xchg1(r, 1u << l, lid, sgs)); }
  return r;
}

//--- compress_common
struct Scales {
  a: f32,
  s: f32,
}

// Squares of this invocation's words, each word's four summed as a pair tree; the group's sum.
fn square_sums(v: ptr<function, array<vec4<f32>, V>>, lid: u32, sgs: u32) -> f32 {
  var ss: array<f32, V>;
  for (var j = 0u; j < V; j++) {
    let sq = (*v)[j] * (*v)[j] + P.nz;
    ss[j] = (sq.x + sq.y) + (sq.z + sq.w);
  }
  return group_sum(&ss, lid, sgs);
}

// Loads this invocation's words of group g (first word q0) into v and turns them into the
// transformed values y = H_G(a·x)/sqrt(G); returns the group's adaptive scale a and quantization
// scale s. Every invocation runs it, past the last group too (on zeros): the exchanges are uniform.
fn transform_group(v: ptr<function, array<vec4<f32>, V>>, q0: u32, lid: u32, sgs: u32) -> Scales {
  // Adaptive scale a = clamp(448 / sqrt(mean(x²) + 1e-6), 1e-3, 1e3); mean over all G slots.
  // invG is a power of two, so ss·invG is exact and a fused ·+ rounds the same.
  let var2 = max(load_group(v, q0, lid, sgs) * P.invG + 1e-6, 1e-12);
  let a = clamp(div_rn(FP8_MAX, sqrt(var2)), 1e-3, 1e3);

  for (var j = 0u; j < V; j++) { (*v)[j] = (*v)[j] * a + P.nz; }
  fwht(v, lid, sgs);

  // Second scale s = clamp(max|y| / 448, 1e-12, 1e6); max is order-independent.
  var mx = 0.0;
  for (var j = 0u; j < V; j++) {
    (*v)[j] = (*v)[j] * P.rsqrtG;
    let ay = abs((*v)[j]);
    mx = max(mx, max(max(ay.x, ay.y), max(ay.z, ay.w)));
  }
  return Scales(a, clamp(div_rn(group_max(mx, lid, sgs), FP8_MAX), 1e-12, 1e6));
}

// The code of RN(y/s), the reference's correctly rounded fp32 quotient, clamped to ±448 and
// encoded to E4M3 (RNE), for y/s near q = y·(1/s) (within a few ulps): RN(y/s) sits between the
// E4M3 neighbours lo and lo + 1 around q, and their midpoint M decides. Since M's fp32 pattern
// is even, RN(y/s) > M iff y/s lies above the fp32 midpoint of M and its successor, RN(y/s) < M
// iff below the one of M's predecessor and M, and otherwise RN(y/s) = M, a tie going to the even
// code: two exact integer comparisons (codec.wgsl's qc_cmp_mid), no division, no loop.
fn code_exact(y: f32, s: f32, q: f32) -> u32 {
  let aq = abs(q);
  let sign = (bitcast<u32>(q) >> 24u) & 0x80u;
  if (aq < 0.00048828125) { return sign; }                 // < 2^-11: far below the first midpoint 2^-10
  if (aq >= FP8_MAX) { return sign | 0x7eu; }              // the next midpoint up is 464
  var lo: u32;
  var mid: f32;
  if (aq < 0.015625) {                                     // subnormal E4M3: step 2^-9
    let k = floor(aq * 512.0);
    lo = u32(k);
    mid = (k + 0.5) * 0.001953125;
  } else {                                                 // normal: 3 mantissa bits, 20 dropped
    let b = bitcast<u32>(aq);
    lo = (b >> 20u) - 960u;                                // re-bias 127 → 7: 120 << 3
    mid = bitcast<f32>((b & 0xfff00000u) | 0x80000u);
  }
  let ab = bitcast<u32>(y) & 0x7fffffffu;                  // normal: |y| ≥ |q|·s ≥ 2^-11·1e-12
  let bb = bitcast<u32>(s);                                // normal, positive
  let ma = (ab & 0x7fffffu) | 0x800000u;
  let mb = (bb & 0x7fffffu) | 0x800000u;
  let eab = i32(ab >> 23u) - i32(bb >> 23u) + 127;
  let mbits = bitcast<u32>(mid);
  if (qc_cmp_mid(ma, mb, eab, mbits) > 0) { return sign | (lo + 1u); }
  if (qc_cmp_mid(ma, mb, eab, mbits - 1u) < 0) { return sign | lo; }
  return sign | (lo + (lo & 1u));
}

//--- load_filtered
// Loads group g's words into v, every element through finite_or_zero; returns the group's sum of
// squares. For exchanges that may go through workgroup memory (their barriers need workgroup-uniform
// control flow, so no branch on a per-group value may surround them).
fn load_group(v: ptr<function, array<vec4<f32>, V>>, q0: u32, lid: u32, sgs: u32) -> f32 {
  for (var j = 0u; j < V; j++) { (*v)[j] = finite_or_zero(load4(q0 + j * T)); }
  return square_sums(v, lid, sgs);
}

//--- load_checked
// The same values with the filter off the per-element path (shuffle-only exchanges): a group's sum
// of squares is non-finite iff one of its elements is (or a square overflows), and only then are
// the registers filtered and summed again, for the whole subgroup at once, so that the shuffles in
// square_sums stay in subgroup-uniform control flow. The filter is the identity on finite values,
// so the result is load_filtered's bit for bit (the shader turns off the subgroup_uniformity
// diagnostic, which cannot see that subgroupAny's result is the same in every invocation).
// The common path squares each word in its load loop rather than calling square_sums after it (the
// same operations): that is the form that was measured fastest, together with pack_codes' packing.
fn load_group(v: ptr<function, array<vec4<f32>, V>>, q0: u32, lid: u32, sgs: u32) -> f32 {
  var ss: array<f32, V>;
  for (var j = 0u; j < V; j++) {
    (*v)[j] = load4(q0 + j * T);
    let sq = (*v)[j] * (*v)[j] + P.nz;
    ss[j] = (sq.x + sq.y) + (sq.z + sq.w);
  }
  var sum = group_sum(&ss, lid, sgs);
  if (subgroupAny((bitcast<u32>(sum) & 0x7f800000u) == 0x7f800000u)) {
    for (var j = 0u; j < V; j++) { (*v)[j] = finite_or_zero((*v)[j]); }
    sum = square_sums(v, lid, sgs);
  }
  return sum;
}

//--- compress
// Per element, branch-free: the E4M3 magnitude of q = y·(1/s) rounded on its bit pattern. Below
// 2^-6, where E4M3 steps by 2^-9 (subnormals and the first binade alike), q + 2^-6 lies in the
// binade [2^-6, 2^-5) of that same step, so rounding it the same way and taking 8 codes off gives
// the subnormal code, 0 included, with no special case. Returned per component: bits 20–26 hold
// that magnitude, and bits 5–19 are all zero iff the pattern lay within 16 ulps of an E4M3
// midpoint (TIE_MASK), where y/s — which q approximates to a few ulps — may round the other way or
// tie; only there does the reference code need code_exact.
const TIE_MASK = 0xfffe0u;
const SUBNORMAL_END = 0.015625;            // 2^-6
const REBIAS = 0xc4080010u;                // + 2^19 (half the dropped bits) + 16 (tie window) − (120 << 23)
const REBIAS_SUB = 0xc3880010u;            // the same − 8 codes

fn near_codes(y: vec4<f32>, inv: f32) -> vec4<u32> {
  let aq = min(abs(y * inv), vec4<f32>(FP8_MAX));
  let sub = aq < vec4<f32>(SUBNORMAL_END);
  let z = select(aq, aq + SUBNORMAL_END, sub);
  return bitcast<vec4<u32>>(z) + select(vec4<u32>(REBIAS), vec4<u32>(REBIAS_SUB), sub);
}

// Four codes in a word: magnitudes from near_codes, signs from y (that of q = y·(1/s), −0 too).
// Each code is first moved to the top byte of its lane (r's bits 27–31 are zero: its magnitude
// bits 20–26 go to 24–30, y's sign joins at 31), then one byte is taken from each lane: a shape
// drivers can turn into byte permutes, in fewer operations than shifting each code down and OR-ing
// them together.
fn pack_codes(r: vec4<u32>, y: vec4<f32>) -> u32 {
  let c = (r << vec4<u32>(4u)) | (bitcast<vec4<u32>>(y) & vec4<u32>(0x80000000u));
  return (c.x >> 24u) | ((c.y >> 16u) & 0xff00u) | ((c.z >> 8u) & 0xff0000u) | (c.w & 0xff000000u);
}

// Whether any of the four lies in the tie window: one compare of the smallest masked lane.
fn has_tie(r: vec4<u32>) -> bool {
  let m = r & vec4<u32>(TIE_MASK);
  return min(min(m.x, m.y), min(m.z, m.w)) == 0u;
}

// Rewrites, in the words already stored, the codes of this invocation's near-tie elements with
// code_exact. Rare (a tie window hit is ~3e-5 per element), so it runs for a few invocations of a
// few warps. The registers come in by value and are copied into `ys`: whether or not the driver
// unrolls this cold loop, any dynamic index lands on that copy, never on the caller's v, which
// must stay in registers (an array indexed dynamically anywhere lives in local memory everywhere).
// Its form matters to every invocation, not just the few that take it: the registers a kernel
// gets are those of its largest part: with this form 16 words per invocation is the fastest layout
// (bench/taco-probe.ts); other fix-up forms made 8 words several times slower.
fn fix_ties(v: array<vec4<f32>, V>, s: f32, inv: f32, q0: u32) {
  var ys = v;
  for (var j = 0u; j < V; j++) {
    let y = ys[j];
    let r = near_codes(y, inv);
    if (!has_tie(r)) { continue; }
    var w = payload[q0 + j * T];
    for (var c = 0u; c < 4u; c++) {
      if ((r[c] & TIE_MASK) == 0u) { w = insertBits(w, code_exact(y[c], s, y[c] * inv), 8u * c, 8u); }
    }
    payload[q0 + j * T] = w;
  }
}

@compute @workgroup_size(WG)
fn compress(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32> /*SG*/) {
  let t = lid % T;
  for (var tile = wid.x; tile < P.tiles; tile += nwg.x) {   // uniform: barriers stay legal
    let g = tile * (WG / T) + lid / T;
    let q0 = g * (G / 4u) + t;                              // word of register 0
    var v: array<vec4<f32>, V>;
    let sc = transform_group(&v, q0, lid, sg);
    let inv = 1.0 / sc.s;
    if (g < P.groups) {
      var ties = false;
      for (var j = 0u; j < V; j++) {
        let r = near_codes(v[j], inv);
        ties = ties | has_tie(r);             // `|`: no short-circuit branch in the loop
        payload[q0 + j * T] = pack_codes(r, v[j]);
      }
      if (ties) { fix_ties(v, sc.s, inv, q0); }
      if (t == 0u) {
        payload[P.sOff + g] = bitcast<u32>(sc.s);
        payload[P.aOff + g] = bitcast<u32>(sc.a);
      }
    }
  }
}

//--- compress_inline
// The compressor before the split above, kept to time against it (TacoOptions.encode 'inline'):
// the same codes, but taco_code runs per element with code_exact inlined into its branch, which
// makes the per-element loop ~10× longer in code than it is in work.
// taco_code: the code in a dozen integer operations for the common case: |q| clamped to [2^-7, 448],
// rounded to 3 mantissa bits on its bit pattern (+ half of the 20 dropped bits; no ties here) and
// re-biased. 0 encodes as 0 (via 2^-7), ≥ 448 as 0x7e. y/s rounds like q unless q lies within 8
// ulps of a midpoint (~1 element in 60 000: y·(1/s) is within a few ulps of y/s), and below 2^-6
// the grid is not q's binade; those take code_exact (rare: y/s spans up to 448).
fn taco_code(y: f32, s: f32, inv: f32) -> u32 {
  let q = y * inv;
  let aq = abs(q);
  let b = bitcast<u32>(clamp(aq, 0.0078125, FP8_MAX));
  if (((b & 0xfffffu) - 0x7fff8u <= 16u) | ((aq < 0.015625) & (aq > 0.0))) { return code_exact(y, s, q); }
  return ((bitcast<u32>(q) >> 24u) & 0x80u) | ((b + 0x80000u - 0x3c000000u) >> 20u);
}

@compute @workgroup_size(WG)
fn compress(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32> /*SG*/) {
  let t = lid % T;
  for (var tile = wid.x; tile < P.tiles; tile += nwg.x) {
    let g = tile * (WG / T) + lid / T;
    let q0 = g * (G / 4u) + t;
    var v: array<vec4<f32>, V>;
    let sc = transform_group(&v, q0, lid, sg);
    let inv = 1.0 / sc.s;
    if (g < P.groups) {
      for (var j = 0u; j < V; j++) {
        var w = 0u;
        for (var c = 0u; c < 4u; c++) { w |= taco_code(v[j][c], sc.s, inv) << (8u * c); }
        payload[q0 + j * T] = w;
      }
      if (t == 0u) {
        payload[P.sOff + g] = bitcast<u32>(sc.s);
        payload[P.aOff + g] = bitcast<u32>(sc.a);
      }
    }
  }
}

//--- decompress_common
// e4m3_decode (codec.wgsl) in fewer operations: normal codes by re-biasing the exponent bits,
// subnormal ones (exponent field 0, value m·2^-9) as (2^23 + m)·2^-9 − 2^14, exact with or without
// an fma, and 0x7f / 0xff as NaN (from u32 bits: an f32 NaN constant is a shader-creation error).
// Returns the fp32 bits.
fn decode_bits(c: u32) -> u32 {
  let mag = c & 0x7fu;
  let sub = bitcast<u32>(bitcast<f32>(0x4b000000u | mag) * 0.001953125 - 16384.0);
  var bits = select((mag << 20u) + 0x3c000000u, sub, mag < 8u);
  bits = select(bits, 0x7fc00000u, mag == 0x7fu);
  return bits | ((c & 0x80u) << 24u);
}

fn decode_code(c: u32) -> f32 {
  return bitcast<f32>(decode_bits(c));
}

//--- decode_alu
// TacoDecode 'alu': every code computed (decode_bits, ~13 integer operations per element).
fn decode_setup(lid: u32) {}

fn decode_word(w: u32) -> vec4<f32> {
  return vec4<f32>(decode_code(w & 0xffu), decode_code((w >> 8u) & 0xffu), decode_code((w >> 16u) & 0xffu),
    decode_code(w >> 24u));
}

//--- decode_lut
// TacoDecode 'lut': the fp32 bits of all 256 codes in workgroup memory (1 KiB), filled by
// decode_bits itself, so every code — the NaNs 0x7f / 0xff too — decodes to the same bits as
// 'alu'; a code is then one byte extract and one lookup. u32, not f32: nothing on the way may
// canonicalise a NaN. The caller runs decode_setup in uniform control flow (it has a barrier).
var<workgroup> e4m3_bits: array<u32, 256>;

fn decode_setup(lid: u32) {
  for (var c = lid; c < 256u; c += WG) { e4m3_bits[c] = decode_bits(c); }
  workgroupBarrier();
}

fn decode_word(w: u32) -> vec4<f32> {
  return bitcast<vec4<f32>>(vec4<u32>(e4m3_bits[w & 0xffu], e4m3_bits[(w >> 8u) & 0xffu],
    e4m3_bits[(w >> 16u) & 0xffu], e4m3_bits[w >> 24u]));
}

//--- decompress
@compute @workgroup_size(WG)
fn decompress(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32> /*SG*/) {
  let t = lid % T;
  for (var tile = wid.x; tile < P.tiles; tile += nwg.x) {
    let g = tile * (WG / T) + lid / T;
    let q0 = g * (G / 4u) + t;

    // Invocations past the last group still run the butterflies (on zeros): the exchanges are uniform.
    let live = g < P.groups;
    var s = 0.0;
    var a = 1.0;
    var w: array<u32, V>;
    if (live) {
      s = bitcast<f32>(payload[P.sOff + g]);
      a = bitcast<f32>(payload[P.aOff + g]);
      for (var j = 0u; j < V; j++) { w[j] = payload[q0 + j * T]; }
    }
    // The first tile's loads are in flight while the decoder sets up ('lut': the table fill and
    // its barrier). `tile == wid.x` is uniform across the workgroup, so the barrier is legal here.
    if (tile == wid.x) { decode_setup(lid); }
    var v: array<vec4<f32>, V>;
    for (var j = 0u; j < V; j++) { v[j] = decode_word(w[j]) * s + P.nz; }

    fwht(&v, lid, sg);

    // x̂ = (t·fp32(1/sqrt(G)))·RN(1/a): one division per invocation, not per element, as in the reference.
    let ia = div_rn(1.0, a);
    if (live) {
      for (var j = 0u; j < V; j++) { store4(q0 + j * T, (v[j] * P.rsqrtG) * ia); }
    }
  }
}
