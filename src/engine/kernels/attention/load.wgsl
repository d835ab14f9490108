// Row loads shared by the attention kernels (which declare the bindings and override D), in
// sections (src/engine/kernels/attention.ts prepends them): `qkv` for every pass, `do` for the
// backward ones (which declare dO). D is even, so a vec4 is full, half (d+2 == D) or past the end.

//--- qkv
fn ldQ(base: u32, d: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
  if (d < D) { r.x = q[base + d]; r.y = q[base + d + 1u]; }
  if (d + 2u < D) { r.z = q[base + d + 2u]; r.w = q[base + d + 3u]; }
  return r;
}
fn ldK(base: u32, d: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
  if (d < D) { r.x = k[base + d]; r.y = k[base + d + 1u]; }
  if (d + 2u < D) { r.z = k[base + d + 2u]; r.w = k[base + d + 3u]; }
  return r;
}
fn ldV(base: u32, d: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
  if (d < D) { r.x = v[base + d]; r.y = v[base + d + 1u]; }
  if (d + 2u < D) { r.z = v[base + d + 2u]; r.w = v[base + d + 3u]; }
  return r;
}

//--- do
fn ldDO(base: u32, d: u32) -> vec4<f32> {
  var r = vec4<f32>(0.0);
  if (d < D) { r.x = dO[base + d]; r.y = dO[base + d + 1u]; }
  if (d + 2u < D) { r.z = dO[base + d + 2u]; r.w = dO[base + d + 3u]; }
  return r;
}
