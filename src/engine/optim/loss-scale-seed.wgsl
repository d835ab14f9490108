// The loss gradient seeded with the loss scale (torch.amp: backward of scale·loss): x ·= scale, in
// place over the cross-entropy's dlogits. The scale is read from the loss-scale state (word 3) on the
// GPU, so a step submitted before the previous one is read back uses the scale that step left.

struct Params { n: u32, _p0: u32, _p1: u32, _p2: u32 }

@group(0) @binding(0) var<storage, read_write> x: array<f32>;
@group(0) @binding(1) var<storage, read> st: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn seed(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  x[i] = x[i] * bitcast<f32>(st[3]);
}
