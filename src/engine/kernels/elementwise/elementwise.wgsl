// Elementwise ops over flat fp32 arrays. N = element count (p.n).
// The grid may be 2-D (more than 65535 workgroups): the flat index is gid.x + gid.y * (row width),
// and every entry guards i < N because the last grid row is partly past the end.
// Bindings are per entry point (auto layouts list only what an entry uses, bound as 0..k-1), so
// fill/scale, which touch a single buffer, alias bindings 0/1 with their own declarations.
struct Params { n: u32, alpha: f32, _p0: u32, _p1: u32 }

@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;
@group(0) @binding(3) var<storage, read> b: array<f32>;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

// out += alpha * a  (residual adds, gradient accumulation)
@compute @workgroup_size(256)
fn axpy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out[i] = out[i] + p.alpha * a[i]; }
}

// out = a + b  (bindings: a, out, params, b)
@compute @workgroup_size(256)
fn add(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out[i] = a[i] + b[i]; }
}

// out = a
@compute @workgroup_size(256)
fn copy(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out[i] = a[i]; }
}

@group(0) @binding(0) var<storage, read> a4: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> out4: array<vec4<u32>>;

@group(0) @binding(0) var<storage, read> af4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> outf4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> bf4: array<vec4<f32>>;

// axpy and add four lanes a thread (p.n counts vec4s): the same operations per element as the scalar entries.
@compute @workgroup_size(256)
fn axpy4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { outf4[i] = outf4[i] + p.alpha * af4[i]; }
}

@compute @workgroup_size(256)
fn add4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { outf4[i] = af4[i] + bf4[i]; }
}

// out = a in 16-byte words, bits as they are (p.n counts words; bindings: a, out, params)
@compute @workgroup_size(256)
fn copy4(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out4[i] = a4[i]; }
}

@group(0) @binding(0) var<storage, read_write> buf: array<f32>;
@group(0) @binding(1) var<uniform> q: Params;

// buf = alpha  (bindings: buf, params)
@compute @workgroup_size(256)
fn fill(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < q.n) { buf[i] = q.alpha; }
}

// buf *= alpha  (bindings: buf, params)
@compute @workgroup_size(256)
fn scale(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < q.n) { buf[i] = buf[i] * q.alpha; }
}
