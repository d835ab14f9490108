// DiLoCo's outer step (src/engine/optim/outer.ts) over one fragment [off, off + n) of the flat
// parameter buffers; the fp32 operation order is outer.ref.ts's, one rounding per operation.
// delta:  d[i] = glob[off+i] − w[off+i]                       (the pseudo-gradient θ_start − θ_local)
// apply:  u = μ·u + d̄;  global −= lr·(d̄ + μ·u)   (Nesterov, torch.optim.SGD(nesterov=True))
//         w = global (α = 0), else α·w + (1 − α)·global       (Streaming DiLoCo's mixing)
struct Params { n: u32, off: u32, lr: f32, mu: f32, alpha: f32, one_minus_alpha: f32, _p0: u32, _p1: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> glob: array<f32>;
// delta binds 0..3 (the pipeline layout holds only what an entry point uses), apply all five.
@group(0) @binding(3) var<storage, read_write> d: array<f32>;
@group(0) @binding(4) var<storage, read_write> u: array<f32>;

fn index(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.x + gid.y * nwg.x * 256u;
}

@compute @workgroup_size(256)
fn delta(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = index(gid, nwg);
  if (i >= p.n) { return; }
  d[i] = glob[p.off + i] - w[p.off + i];
}

@compute @workgroup_size(256)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = index(gid, nwg);
  if (i >= p.n) { return; }
  let j = p.off + i;
  let g = d[i];
  let mu_u = p.mu * u[j];
  let un = mu_u + g;
  u[j] = un;
  let mu_un = p.mu * un;
  let st = g + mu_un;
  let lr_step = p.lr * st;
  let gl = glob[j] - lr_step;
  glob[j] = gl;
  if (p.alpha == 0.0) {
    w[j] = gl;
  } else {
    let a = p.alpha * w[j];
    let b = p.one_minus_alpha * gl;
    w[j] = a + b;
  }
}
