// Fused fake quantization x̂ = s·decode(encode(x / s)) of a flat f32 slice, s = max|x| / QMAX per
// tensor, row, column or group — quantizeRef then dequantizeRef (src/engine/quant/quantizer.ts) bit
// for bit, without materialising codes or scales.
// Prepended by src/engine/kernels/qdq.ts: quant/codec.wgsl, then a binding header that declares the
// data (`ld(i)`, `st(i, v)`: in place on one read_write binding, or reading `xin` and writing `y`),
// the scratch `part` and `touch_out()`; the header's bindings follow this file's uniform (binding 0).
//
// Legend: N = elements (p.n); L = p.len: segment length (row length, group size) for qdq_seg, column
// count C for column mode; R = N / C rows; T = p.tpseg lanes per segment; P = p.nparts partials.
//
// Entry points (format, rounding, granularity are uniforms: three pipelines serve every spec):
// - qdq_seg (rows, groups): T lanes per segment, 256 / T segments per workgroup. The absmax goes
//   through a tree in workgroup memory, then each lane rereads (cache-hot) and writes its elements.
//   One dispatch; in place is safe because a segment is read entirely before the barrier.
// - amax_part → qdq_part (tensor, column): p.mode 0 = tensor: P ≤ 256 grid-striding workgroups
//   write one partial absmax each; every qdq_part workgroup reduces the P partials itself (no third
//   dispatch, no atomics, nothing to clear). p.mode 1 = column: thread = column, grid y = blocks of
//   p.rows_a rows write part[block·C + c]; qdq_part threads fold their column's P partials.
// The absmax is kept as u32 bits of |x|: for non-negative floats the bit order is the value order,
// so max() needs no float compares and no subnormal flushing can change it; NaN/±Inf count as 0
// (they are coded as 0, like the reference).

struct Params {
  n: u32,
  len: u32,
  tpseg: u32,
  nseg: u32,
  mode: u32,
  nparts: u32,
  rows_a: u32,
  chunk: u32, // qdq_part: elements (tensor) or rows (column) per workgroup
  fmt: u32, // FORMAT_ID (0 e4m3, 1 e5m2, 2 int8, 3 int4); 4 = identity (fp32 copy)
  stochastic: u32,
  seed: u32,
  qmax: f32,
}

@group(0) @binding(0) var<uniform> p: Params;

const WG: u32 = 256u;
// Bits of 2^-110: groups whose absmax is below it get s = 0 (SCALE_TINY in quantizer.ts).
const TINY_BITS: u32 = 0x08800000u;

var<workgroup> red: array<u32, WG>;

fn qdq_abs(x: f32) -> u32 {
  let a = bitcast<u32>(x) & 0x7fffffffu;
  return select(0u, a, a < 0x7f800000u);
}

fn qdq_scale(amax: u32) -> f32 {
  if (amax < TINY_BITS) { return 0.0; }
  return div_rn(bitcast<f32>(amax), p.qmax);
}

fn qdq_code(v: f32, i: u32) -> u32 {
  if (p.stochastic != 0u) {
    let u = sr_uniform(p.seed, i);
    switch p.fmt {
      case 0u: { return e4m3_encode_sr(v, u); }
      case 1u: { return e5m2_encode_sr(v, u); }
      default: { return int_encode_sr(v, p.qmax, u); }
    }
  }
  switch p.fmt {
    case 0u: { return e4m3_encode(v); }
    case 1u: { return e5m2_encode(v); }
    default: { return int_encode(v, p.qmax); }
  }
}

fn qdq_decode(c: u32) -> f32 {
  switch p.fmt {
    case 0u: { return e4m3_decode(c); }
    case 1u: { return e5m2_decode(c); }
    case 2u: { return int8_decode(c); }
    default: { return int4_decode(c); }
  }
}

// decode(code) has at most 8 significant bits, so decode·s is one correctly rounded f32 product,
// exactly the reference's fp32(decode · s).
fn qdq_one(x: f32, s: f32, i: u32) -> f32 {
  if (p.fmt == 4u) { return x; }
  if (s == 0.0 || (bitcast<u32>(x) & 0x7fffffffu) >= 0x7f800000u) { return 0.0; }
  return qdq_decode(qdq_code(div_rn(x, s), i)) * s;
}

// Max of red[] over each aligned run of t lanes (t a power of two ≤ WG, uniform); every
// invocation must call it. Returns the max of the caller's run.
fn red_max(lid: u32, lane: u32, t: u32) -> u32 {
  for (var s = t / 2u; s > 0u; s >>= 1u) {
    workgroupBarrier();
    if (lane < s) { red[lid] = max(red[lid], red[lid + s]); }
  }
  workgroupBarrier();
  return red[lid - lane];
}

@compute @workgroup_size(WG)
fn qdq_seg(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = p.tpseg;
  let lane = lid & (t - 1u);
  let sg = (wid.x + wid.y * nwg.x) * (WG / t) + lid / t;
  var start = 0u;
  var end = 0u;
  if (sg < p.nseg) {
    start = sg * p.len;
    end = min(start + p.len, p.n);
  }
  var m = 0u;
  for (var i = start + lane; i < end; i += t) { m = max(m, qdq_abs(ld(i))); }
  red[lid] = m;
  let s = qdq_scale(red_max(lid, lane, t));
  for (var i = start + lane; i < end; i += t) { st(i, qdq_one(ld(i), s, i)); }
}

@compute @workgroup_size(WG)
fn amax_part(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  touch_out();
  if (p.mode == 0u) {
    var m = 0u;
    for (var i = wid.x * WG + lid; i < p.n; i += p.nparts * WG) { m = max(m, qdq_abs(ld(i))); }
    red[lid] = m;
    let r = red_max(lid, lid, WG);
    if (lid == 0u) { part[wid.x] = r; }
  } else {
    let c = wid.x * WG + lid;
    if (c < p.len) {
      let r0 = wid.y * p.rows_a;
      let r1 = min(r0 + p.rows_a, p.n / p.len);
      var m = 0u;
      for (var r = r0; r < r1; r++) { m = max(m, qdq_abs(ld(r * p.len + c))); }
      part[wid.y * p.len + c] = m;
    }
  }
}

@compute @workgroup_size(WG)
fn qdq_part(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
            @builtin(num_workgroups) nwg: vec3<u32>) {
  if (p.mode == 0u) {
    var m = 0u;
    for (var k = lid; k < p.nparts; k += WG) { m = max(m, part[k]); }
    red[lid] = m;
    let s = qdq_scale(red_max(lid, lid, WG));
    let base = (wid.x + wid.y * nwg.x) * p.chunk;
    let end = min(base + p.chunk, p.n);
    for (var i = base + lid; i < end; i += WG) { st(i, qdq_one(ld(i), s, i)); }
  } else {
    let c = wid.x * WG + lid;
    if (c < p.len) {
      var m = 0u;
      for (var b = 0u; b < p.nparts; b++) { m = max(m, part[b * p.len + c]); }
      let s = qdq_scale(m);
      let r0 = wid.y * p.chunk;
      let r1 = min(r0 + p.chunk, p.n / p.len);
      for (var r = r0; r < r1; r++) {
        let i = r * p.len + c;
        st(i, qdq_one(ld(i), s, i));
      }
    }
  }
}
