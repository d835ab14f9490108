// Partner exchange for the TACO kernels (taco.wgsl): thread t receives the value of thread t ^ m.
// src/engine/kernels/taco.ts prepends one section (split at the `//--- name` lines).
// `sg` is the subgroup size (a uniform builtin in the subgroup variant, 0 otherwise), so the branch
// below is uniform and the barriers in it are legal. Both sections produce identical values:
// every stage is an elementwise-defined exchange, so the butterfly order, and with it the fp32
// rounding, does not depend on which path moved the data.

//--- wg
const sg = 0u;
var<workgroup> xsh4: array<vec4<f32>, WG>;
var<workgroup> xsh1: array<f32, WG>;

// First barrier: the previous stage's readers are done before the slot is overwritten.
fn xchg4(v: vec4<f32>, m: u32, t: u32, sgs: u32) -> vec4<f32> {
  workgroupBarrier();
  xsh4[t] = v;
  workgroupBarrier();
  return xsh4[t ^ m];
}

fn xchg1(v: f32, m: u32, t: u32, sgs: u32) -> f32 {
  workgroupBarrier();
  xsh1[t] = v;
  workgroupBarrier();
  return xsh1[t ^ m];
}

//--- sg
// Strides below the subgroup size move through subgroupShuffleXor (no barrier, no shared
// memory traffic); larger ones through workgroup memory. This assumes the usual linear lane
// layout of a 1-D workgroup (lane = local_invocation_index mod subgroup size), which holds on
// Vulkan, D3D12 and Metal; tests compare this path with the workgroup-memory one bit for bit.
var<workgroup> xsh4: array<vec4<f32>, WG>;
var<workgroup> xsh1: array<f32, WG>;

fn xchg4(v: vec4<f32>, m: u32, t: u32, sgs: u32) -> vec4<f32> {
  if (m < sgs) { return subgroupShuffleXor(v, m); }
  workgroupBarrier();
  xsh4[t] = v;
  workgroupBarrier();
  return xsh4[t ^ m];
}

fn xchg1(v: f32, m: u32, t: u32, sgs: u32) -> f32 {
  if (m < sgs) { return subgroupShuffleXor(v, m); }
  workgroupBarrier();
  xsh1[t] = v;
  workgroupBarrier();
  return xsh1[t ^ m];
}
