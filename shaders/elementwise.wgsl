// Elementwise ops over flat fp32 arrays. N = element count.
struct Params { n: u32, alpha: f32, _p0: u32, _p1: u32 }

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

// out += alpha * a  (residual adds, gradient accumulation)
@compute @workgroup_size(256)
fn axpy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i < p.n) { out[i] = out[i] + p.alpha * a[i]; }
}
