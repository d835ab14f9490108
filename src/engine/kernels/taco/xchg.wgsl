// Partner exchange for the TACO kernels (taco.wgsl): invocation `lid` receives the value of
// invocation lid ^ m (m < T, so the partner works on the same group). src/engine/kernels/taco.ts
// prepends `mem` and one of `wg` / `sg` / `shuffle` (split at the `//--- name` lines).
// `sgs` is the subgroup size (a uniform builtin in the subgroup variant, 0 otherwise), so the branch
// in the `sg` variant is uniform and the barriers in it are legal. All variants produce identical
// values: every stage is an elementwise-defined exchange, so the butterfly order, and with it the
// fp32 rounding, does not depend on which path moved the data.

//--- mem
// Workgroup-memory exchange, one value per invocation per call. The first barrier keeps the
// previous call's readers ahead of this call's writers.
var<workgroup> xsh4: array<vec4<f32>, WG>;
var<workgroup> xsh1: array<f32, WG>;

fn xchg4_mem(v: vec4<f32>, m: u32, lid: u32) -> vec4<f32> {
  workgroupBarrier();
  xsh4[lid] = v;
  workgroupBarrier();
  return xsh4[lid ^ m];
}

fn xchg1_mem(v: f32, m: u32, lid: u32) -> f32 {
  workgroupBarrier();
  xsh1[lid] = v;
  workgroupBarrier();
  return xsh1[lid ^ m];
}

//--- wg
const sg = 0u;

fn xchg4(v: vec4<f32>, m: u32, lid: u32, sgs: u32) -> vec4<f32> {
  return xchg4_mem(v, m, lid);
}

fn xchg1(v: f32, m: u32, lid: u32, sgs: u32) -> f32 {
  return xchg1_mem(v, m, lid);
}

//--- sg
// Strides below the subgroup size move through subgroupShuffleXor (no barrier, no workgroup
// memory traffic); larger ones (a group wider than the subgroup) through workgroup memory. This
// assumes the usual linear lane layout of a 1-D workgroup (lane = local_invocation_index mod
// subgroup size), which holds on Vulkan, D3D12 and Metal; tests compare this path with the
// workgroup-memory one bit for bit.
fn xchg4(v: vec4<f32>, m: u32, lid: u32, sgs: u32) -> vec4<f32> {
  if (m < sgs) { return subgroupShuffleXor(v, m); }
  return xchg4_mem(v, m, lid);
}

fn xchg1(v: f32, m: u32, lid: u32, sgs: u32) -> f32 {
  if (m < sgs) { return subgroupShuffleXor(v, m); }
  return xchg1_mem(v, m, lid);
}

//--- shuffle
// Every partner is in the same subgroup (TS picks this only when a group's T invocations fit in the
// adapter's smallest subgroup): subgroupShuffleXor alone. No workgroup-memory path is compiled in,
// so no barrier sits in the butterfly code for the driver to schedule around.
fn xchg4(v: vec4<f32>, m: u32, lid: u32, sgs: u32) -> vec4<f32> {
  return subgroupShuffleXor(v, m);
}

fn xchg1(v: f32, m: u32, lid: u32, sgs: u32) -> f32 {
  return subgroupShuffleXor(v, m);
}
