// AdamW step (torch.optim.AdamW, single-tensor path, fp32) with clip_grad_norm_'s scaling folded in.
// n = parameters in this range; param, grad, m, v: [n]; gnorm: [1] = global L2 norm of ALL
// gradients, written earlier in the same command buffer (no CPU round trip).
// Per-step scalars come from `s` (written each step with queue.writeBuffer, see packAdamwStep):
// they are computed in float64 on the CPU and rounded once to f32, as torch computes its Python
// scalars in double and hands them to the fp32 kernels.
struct Step {
  decay_factor: f32,     // 1 − lr·weight_decay
  one_minus_beta1: f32,  // lerp weight for m
  beta2: f32,
  one_minus_beta2: f32,
  step_size: f32,        // lr / (1 − β1^t)
  bc2_sqrt: f32,         // sqrt(1 − β2^t)
  eps: f32,
  max_norm: f32,         // ≤ 0: no clipping
  lr: f32,               // informational (not read here)
  t: u32,                // informational (not read here)
  _p0: u32,
  _p1: u32,
}
struct Params { n: u32, decay: u32, _p0: u32, _p1: u32 }

@group(0) @binding(0) var<storage, read_write> param: array<f32>;
@group(0) @binding(1) var<storage, read> grad: array<f32>;
@group(0) @binding(2) var<storage, read_write> m: array<f32>;
@group(0) @binding(3) var<storage, read_write> v: array<f32>;
@group(0) @binding(4) var<uniform> s: Step;
@group(0) @binding(5) var<storage, read> gnorm: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;

@compute @workgroup_size(256)
fn adamw(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  // clip_grad_norm_: coef = max_norm / (total_norm + 1e-6), clamped to ≤ 1; grads *= coef.
  var clip = 1.0;
  if (s.max_norm > 0.0) { clip = min(1.0, s.max_norm / (gnorm[0] + 1e-6)); }
  let g = grad[i] * clip;
  var w = param[i];
  if (p.decay != 0u) { w = w * s.decay_factor; }
  // exp_avg.lerp_(grad, 1 − β1): torch's lerp for weight < 0.5 is self + weight·(end − self).
  let mi = m[i] + s.one_minus_beta1 * (g - m[i]);
  // exp_avg_sq.mul_(β2).addcmul_(grad, grad, value = 1 − β2)
  let vi = v[i] * s.beta2 + s.one_minus_beta2 * g * g;
  let denom = sqrt(vi) / s.bc2_sqrt + s.eps;
  // param.addcdiv_(exp_avg, denom, value = −step_size)
  param[i] = w + (-s.step_size) * (mi / denom);
  m[i] = mi;
  v[i] = vi;
}
