// Shared by reduce.wgsl, rmsnorm.wgsl and swiglu.wgsl: a deterministic tree sum (and max) over one workgroup of WG lanes
// (fixed shape, so the result is bit-identical run to run).
override WG: u32 = 256;
var<workgroup> red: array<f32, WG>;

// Tree sum over the workgroup; must be reached by every invocation (uniform control flow).
fn wg_sum(v: f32, lid: u32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s = s >> 1u) {
    if (lid < s) { red[lid] = red[lid] + red[lid + s]; }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}

// Tree max over the workgroup; uniform control flow as wg_sum.
fn wg_max(v: f32, lid: u32) -> f32 {
  red[lid] = v;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s = s >> 1u) {
    if (lid < s) { red[lid] = max(red[lid], red[lid + s]); }
    workgroupBarrier();
  }
  let r = red[0];
  workgroupBarrier();
  return r;
}
