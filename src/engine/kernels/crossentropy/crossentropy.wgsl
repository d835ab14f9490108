// Cross-entropy over logits with integer targets (torch F.cross_entropy, mean reduction).
// N = rows (tokens), V = vocab. targets: i32 [N]; losses: [N]; loss: [1]; ws: u32 [1] = number of
// counted rows. ce_rows sees one chunk of rows: logits, dlogits [N, V] hold rows R0 .. R0+N of the
// whole (N = the chunk's rows, R0 its first row in targets and losses; R0 = 0 over all rows).
// A target outside [0, V) means "ignore this row" (loss 0, gradient 0, not counted); torch's
// ignore_index uses one value (-100), here any negative does.
//
// The TS side prepends a variant header that declares `logits` (binding 0) and
// `fn store_grad(i: u32, g: f32)`: separate dlogits (binding 5), in place over logits, or none.
//
// Dispatch order: ce_count (one workgroup) → ce_rows, once or once per chunk (one workgroup per
// row; the linear workgroup index spans a 2-D grid when N > 65535) → ce_mean (one workgroup). All
// three reduce in a fixed order and a row's result does not depend on its chunk, so losses and
// gradients are bit-reproducible and the same chunked or whole.
struct Params { N: u32, V: u32, R0: u32, _p1: u32 }

override WG: u32 = 256;
override WRITE_GRAD: bool = true;

@group(0) @binding(2) var<uniform> p: Params;

fn counted(t: i32) -> bool { return t >= 0 && u32(t) < p.V; }

// ---- rows: bindings logits, targets, params, ws, losses[, dlogits]
@group(0) @binding(1) var<storage, read> targets: array<i32>;
@group(0) @binding(3) var<storage, read> r_ws: array<u32>;
@group(0) @binding(4) var<storage, read_write> losses: array<f32>;
var<workgroup> redm: array<f32, WG>;
var<workgroup> reds: array<f32, WG>;

@compute @workgroup_size(WG)
fn ce_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.N) { return; }
  let base = row * p.V;
  let t = targets[p.R0 + row];
  let valid = counted(t);
  // Read before the barrier below: in place, the target's logit is overwritten by its gradient.
  var xt = 0.0;
  if (valid) { xt = logits[base + u32(t)]; }
  // Online max/sum-exp per lane (one pass), then a fixed tree merging (max, sum) pairs.
  var m = bitcast<f32>(0xff7fffffu);
  var s = 0.0;
  for (var i = lid; i < p.V; i += WG) {
    let x = logits[base + i];
    if (x > m) { s = s * exp(m - x) + 1.0; m = x; } else { s += exp(x - m); }
  }
  redm[lid] = m;
  reds[lid] = s;
  workgroupBarrier();
  for (var k = WG / 2u; k > 0u; k = k >> 1u) {
    if (lid < k) {
      let m1 = redm[lid];
      let m2 = redm[lid + k];
      let mm = max(m1, m2);
      reds[lid] = reds[lid] * exp(m1 - mm) + reds[lid + k] * exp(m2 - mm);
      redm[lid] = mm;
    }
    workgroupBarrier();
  }
  let lse = redm[0] + log(reds[0]);
  if (lid == 0u) { losses[p.R0 + row] = select(0.0, lse - xt, valid); }
  // Loaded outside the WRITE_GRAD branch so the auto layout is the same for every variant.
  let cnt = r_ws[0];
  if (WRITE_GRAD) {
    let scale = select(0.0, 1.0 / f32(cnt), valid && cnt > 0u);
    let ti = select(0xffffffffu, u32(t), valid);
    for (var i = lid; i < p.V; i += WG) {
      let prob = exp(logits[base + i] - lse);
      store_grad(base + i, select(prob, prob - 1.0, i == ti) * scale);
    }
  }
}

// ---- count: bindings targets, ws, params (one workgroup; integer atomics are order-free)
@group(0) @binding(0) var<storage, read> c_targets: array<i32>;
@group(0) @binding(1) var<storage, read_write> c_ws: array<u32>;
var<workgroup> wcount: atomic<u32>;

@compute @workgroup_size(WG)
fn ce_count(@builtin(local_invocation_index) lid: u32) {
  var c = 0u;
  for (var n = lid; n < p.N; n += WG) { if (counted(c_targets[n])) { c++; } }
  atomicAdd(&wcount, c);
  workgroupBarrier();
  if (lid == 0u) { c_ws[0] = atomicLoad(&wcount); }
}

// ---- mean: bindings losses, ws, params, loss (one workgroup, fixed-shape tree)
@group(0) @binding(0) var<storage, read> m_losses: array<f32>;
@group(0) @binding(1) var<storage, read> m_ws: array<u32>;
@group(0) @binding(3) var<storage, read_write> m_loss: array<f32>;

@compute @workgroup_size(WG)
fn ce_mean(@builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var n = lid; n < p.N; n += WG) { acc += m_losses[n]; }
  reds[lid] = acc;
  workgroupBarrier();
  for (var k = WG / 2u; k > 0u; k = k >> 1u) {
    if (lid < k) { reds[lid] = reds[lid] + reds[lid + k]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    let cnt = m_ws[0];
    m_loss[0] = select(0.0, reds[0] / f32(cnt), cnt > 0u);
  }
}
