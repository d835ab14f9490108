// Data-parallel exchange: the mean of the members' contributions, as received on the wire
// (src/engine/kernels/exchange.ts; reference exchange.ref.ts). Prepended: quant/codec.wgsl (div_rn).
// Legend: N = p.n elements, S = p.nb scales (blocks of 256), C = p.count contributions, each at
// word p.stride·j of `inbox`. An INT8 contribution: S fp32 scales, then N int8 codes (4 per word,
// element i in byte i % 4: little-endian, the wire's byte order). An fp32 one: N floats.
//
// The mean is the wire's JS reference step for step: acc = 0; acc += code·s (fp32, member order);
// mean = acc / C correctly rounded (div_rn, as JS rounds the double quotient of two floats). WGSL
// rounds + and × correctly, so the result is the same bits on every GPU that neither fuses
// code·s + acc into an fma nor flushes subnormals (a sum that cancels below 2^-126, a quotient
// below it: div_rn keeps the hardware's quotient there) — the two things that could differ between
// vendors' compilers. Members with the same GPU and driver run the same kernel: identical bits.

struct XParams {
  n: u32,
  nb: u32,
  stride: u32,
  count: u32,
}

@group(0) @binding(0) var<uniform> p: XParams;
@group(0) @binding(1) var<storage, read> inbox: array<u32>;
// reduce_int8, reduce_fp32
@group(0) @binding(2) var<storage, read_write> mean_w: array<f32>;
// check_fp32: one flag per contribution (1 = a non-finite value)
@group(0) @binding(2) var<storage, read_write> flags: array<atomic<u32>>;
// sumsq_int8: Σ code² per block, per contribution at [j·S + block]
@group(0) @binding(2) var<storage, read_write> sumsq: array<u32>;
// gram_int8: Σ c_j·c_k per block, per pair j ≤ k (pair index q in row order: (0,0), (0,1), …, (1,1), …) at [q·S + block]
@group(0) @binding(2) var<storage, read_write> gram: array<i32>;

const WG: u32 = 256u;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.x + gid.y * nwg.x * WG;
}

fn code_at(w: u32, c: u32) -> f32 {
  return f32(bitcast<i32>(w << (24u - 8u * c)) >> 24u);
}

// One invocation per code word (4 elements, all in one block: 256 % 4 == 0).
@compute @workgroup_size(WG)
fn reduce_int8(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = flat(gid, nwg);
  if (4u * k >= p.n) { return; }
  let block = k / 64u;
  var acc = vec4<f32>(0.0);
  for (var j = 0u; j < p.count; j++) {
    let base = j * p.stride;
    let s = bitcast<f32>(inbox[base + block]);
    let w = inbox[base + p.nb + k];
    let v = vec4<f32>(code_at(w, 0u), code_at(w, 1u), code_at(w, 2u), code_at(w, 3u)) * s;
    acc = acc + v;
  }
  let c = f32(p.count);
  for (var e = 0u; e < 4u; e++) {
    if (4u * k + e < p.n) { mean_w[4u * k + e] = div_rn(acc[e], c); }
  }
}

@compute @workgroup_size(WG)
fn reduce_fp32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  var acc = 0.0;
  for (var j = 0u; j < p.count; j++) { acc = acc + bitcast<f32>(inbox[j * p.stride + i]); }
  mean_w[i] = div_rn(acc, f32(p.count));
}

@compute @workgroup_size(WG)
fn check_fp32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  for (var j = 0u; j < p.count; j++) {
    if ((inbox[j * p.stride + i] & 0x7f800000u) == 0x7f800000u) { atomicOr(&flags[j], 1u); }
  }
}

// One invocation per (block, contribution): integer sums, exact and order-free (≤ 256·128² < 2^23).
@compute @workgroup_size(WG)
fn sumsq_int8(@builtin(global_invocation_id) gid: vec3<u32>) {
  let b = gid.x;
  let j = gid.y;
  if (b >= p.nb || j >= p.count) { return; }
  let base = j * p.stride + p.nb;
  let w0 = b * 64u;
  let w1 = min(w0 + 64u, (p.n + 3u) / 4u);
  var s = 0u;
  for (var k = w0; k < w1; k++) {
    let w = inbox[base + k];
    for (var e = 0u; e < 4u; e++) {
      if (4u * k + e < p.n) {
        let c = bitcast<i32>(w << (24u - 8u * e)) >> 24u;
        s += u32(c * c);
      }
    }
  }
  sumsq[j * p.nb + b] = s;
}

// One invocation per (block, pair j ≤ k): integer dot products, exact and order-free (|Σ| ≤ 256·128² = 2^22).
@compute @workgroup_size(WG)
fn gram_int8(@builtin(global_invocation_id) gid: vec3<u32>) {
  let b = gid.x;
  if (b >= p.nb) { return; }
  var j = 0u;
  var r = gid.y;
  while (j < p.count && r >= p.count - j) {
    r -= p.count - j;
    j++;
  }
  if (j >= p.count) { return; }
  let bj = j * p.stride + p.nb;
  let bk = (j + r) * p.stride + p.nb;
  let w0 = b * 64u;
  let w1 = min(w0 + 64u, (p.n + 3u) / 4u);
  var s = 0i;
  for (var k = w0; k < w1; k++) {
    let wj = inbox[bj + k];
    let wk = inbox[bk + k];
    for (var e = 0u; e < 4u; e++) {
      if (4u * k + e < p.n) {
        s += (bitcast<i32>(wj << (24u - 8u * e)) >> 24u) * (bitcast<i32>(wk << (24u - 8u * e)) >> 24u);
      }
    }
  }
  gram[gid.y * p.nb + b] = s;
}
