// Kernels of one decode token (src/engine/kernels/decode.ts; references in decode.ref.ts).
// `step` is [token, pos]: written once per token, so one recorded command buffer serves every position.
// Legend: H heads, D head dim (even), P = D/2, N output rows, K reduction length.
// Bindings are per entry point (auto layouts), so each entry declares its own.

// ---- gemv: y[(atPos ? pos·N : 0) + n] (+)= Σ_k W[n, k]·x[k], W row-major [N, K] (HF's [out, in]).
// 4 rows per workgroup, 64 lanes per row striding over K (coalesced along a row), then a tree sum.
struct GemvParams { N: u32, K: u32, accumulate: u32, atPos: u32 }
@group(0) @binding(0) var<storage, read> gx: array<f32>;
@group(0) @binding(1) var<storage, read> gw: array<f32>;
@group(0) @binding(2) var<storage, read> gstep: array<u32>;
@group(0) @binding(3) var<uniform> gp: GemvParams;
@group(0) @binding(4) var<storage, read_write> gy: array<f32>;
var<workgroup> gpart: array<f32, 256>;

@compute @workgroup_size(256)
fn gemv(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let lane = li % 64u;
  let row = (wid.x + wid.y * nwg.x) * 4u + li / 64u;
  var s = 0.0;
  if (row < gp.N) {
    let base = row * gp.K;
    for (var k = lane; k < gp.K; k += 64u) { s += gw[base + k] * gx[k]; }
  }
  gpart[li] = s;
  workgroupBarrier();
  for (var h = 32u; h > 0u; h >>= 1u) {
    if (lane < h) { gpart[li] += gpart[li + h]; }
    workgroupBarrier();
  }
  if (lane == 0u && row < gp.N) {
    let at = select(0u, gstep[1] * gp.N, gp.atPos != 0u) + row;
    var v = gpart[li];
    if (gp.accumulate != 0u) { v += gy[at]; }
    gy[at] = v;
  }
}

// ---- rope_at: rotary embedding of one token [H, D] at position pos (rope.wgsl's rotation), into
// y at row pos (the K cache, atPos) or row 0. table: cos [Tt, P] then sin [Tt, P] (sinOff = Tt·P).
struct RopeParams { H: u32, P: u32, sinOff: u32, atPos: u32 }
@group(0) @binding(0) var<storage, read> rx: array<f32>;
@group(0) @binding(1) var<storage, read> rtable: array<f32>;
@group(0) @binding(2) var<storage, read> rstep: array<u32>;
@group(0) @binding(3) var<uniform> rp: RopeParams;
@group(0) @binding(4) var<storage, read_write> ry: array<f32>;

@compute @workgroup_size(64)
fn rope_at(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x;
  if (i >= rp.H * rp.P) { return; }
  let pos = rstep[1];
  let j = i % rp.P;
  let xo = (i / rp.P) * 2u * rp.P + j;
  let yo = select(0u, pos * rp.H * 2u * rp.P, rp.atPos != 0u) + xo;
  let c = rtable[pos * rp.P + j];
  let s = rtable[rp.sinOff + pos * rp.P + j];
  let x1 = rx[xo];
  let x2 = rx[xo + rp.P];
  ry[yo] = x1 * c - x2 * s;
  ry[yo + rp.P] = x2 * c + x1 * s;
}

// ---- attend: one query token over the cache, o[h] = softmax(q[h]·K[0..pos]ᵀ·scale)·V[0..pos].
// One workgroup per query head h, reading KV head h / group (GQA). Keys go in chunks of WG: each
// lane scores one key, the chunk's max and sum rescale the running softmax (online), and lane d
// accumulates output dims d and d + WG (D ≤ 2·WG). kc, vc: [ctx, nKV, D].
const AWG: u32 = 128u;
struct AttendParams { nKV: u32, group: u32, D: u32, scale: f32 }
@group(0) @binding(0) var<storage, read> aq: array<f32>;
@group(0) @binding(1) var<storage, read> akc: array<f32>;
@group(0) @binding(2) var<storage, read> avc: array<f32>;
@group(0) @binding(3) var<storage, read> astep: array<u32>;
@group(0) @binding(4) var<uniform> ap: AttendParams;
@group(0) @binding(5) var<storage, read_write> ao: array<f32>;
var<workgroup> aqs: array<f32, 256>;
var<workgroup> ared: array<f32, 128>;
var<workgroup> apr: array<f32, 128>;

fn reduceMax(li: u32, v: f32) -> f32 {
  ared[li] = v;
  workgroupBarrier();
  for (var h = AWG / 2u; h > 0u; h >>= 1u) {
    if (li < h) { ared[li] = max(ared[li], ared[li + h]); }
    workgroupBarrier();
  }
  let r = ared[0];
  workgroupBarrier();
  return r;
}

fn reduceSum(li: u32, v: f32) -> f32 {
  ared[li] = v;
  workgroupBarrier();
  for (var h = AWG / 2u; h > 0u; h >>= 1u) {
    if (li < h) { ared[li] = ared[li] + ared[li + h]; }
    workgroupBarrier();
  }
  let r = ared[0];
  workgroupBarrier();
  return r;
}

@compute @workgroup_size(128)
fn attend(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let h = wid.x;
  let D = ap.D;
  let kvBase = (h / ap.group) * D;
  let row = ap.nKV * D;
  let n = astep[1] + 1u;
  for (var d = li; d < D; d += AWG) { aqs[d] = aq[h * D + d]; }
  workgroupBarrier();
  var m = -3.0e38;
  var l = 0.0;
  var acc0 = 0.0;
  var acc1 = 0.0;
  for (var c0 = 0u; c0 < n; c0 += AWG) {
    let t = c0 + li;
    var s = -3.0e38;
    if (t < n) {
      var dot = 0.0;
      let kb = t * row + kvBase;
      for (var d = 0u; d < D; d++) { dot += aqs[d] * akc[kb + d]; }
      s = dot * ap.scale;
    }
    let mNew = max(m, reduceMax(li, s));
    let corr = exp(m - mNew);
    let pr = select(0.0, exp(s - mNew), t < n);
    apr[li] = pr;
    l = l * corr + reduceSum(li, pr);
    acc0 *= corr;
    acc1 *= corr;
    let cnt = min(AWG, n - c0);
    for (var i = 0u; i < cnt; i++) {
      let vb = (c0 + i) * row + kvBase;
      if (li < D) { acc0 += apr[i] * avc[vb + li]; }
      if (li + AWG < D) { acc1 += apr[i] * avc[vb + li + AWG]; }
    }
    m = mNew;
    workgroupBarrier();
  }
  if (li < D) { ao[h * D + li] = acc0 / l; }
  if (li + AWG < D) { ao[h * D + li + AWG] = acc1 / l; }
}
