// bfloat16 storage of fp32 tensors: two values per u32 word, element i in bits 16·(i%2).
// Values are moved as raw u32 bits (never loaded as f32), so no device flushes subnormals or
// canonicalises NaN payloads. Reference: src/engine/kernels/bf16.ref.ts.
//
// pack / unpack: one invocation per quad (4 values = 2 words), vec4 loads and stores.
// pack_tail / unpack_tail: the last n % 4 values (one workgroup, scalar), a dispatch of their own
// because the vec4 views cover only whole quads.
// The grid may be 2-D (more than 65535 workgroups): flat index gid.x + gid.y · (row width).
struct Params { quads: u32, n: u32, _p0: u32, _p1: u32 }

// Round to nearest, ties to even; NaN stays NaN (quiet bit set, sign kept), ±Inf stay ±Inf.
fn bf16_encode(b: u32) -> u32 {
  if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

//--- pack
@group(0) @binding(0) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> words: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn pack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.quads) { return; }
  let v = x[i];
  words[i] = vec2<u32>(bf16_encode(v.x) | (bf16_encode(v.y) << 16u), bf16_encode(v.z) | (bf16_encode(v.w) << 16u));
}

//--- pack_tail
@group(0) @binding(0) var<storage, read> xs: array<u32>;
@group(0) @binding(1) var<storage, read_write> ws: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(2)
fn pack_tail(@builtin(local_invocation_id) lid: vec3<u32>) {
  let e = p.quads * 4u + lid.x * 2u;
  if (e >= p.n) { return; }
  var w = bf16_encode(xs[e]);
  if (e + 1u < p.n) { w = w | (bf16_encode(xs[e + 1u]) << 16u); }
  ws[e / 2u] = w;
}

//--- unpack
@group(0) @binding(0) var<storage, read> words: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read_write> out: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn unpack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.quads) { return; }
  let w = words[i];
  out[i] = vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u);
}

//--- unpack_tail
@group(0) @binding(0) var<storage, read> ws: array<u32>;
@group(0) @binding(1) var<storage, read_write> outs: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(4)
fn unpack_tail(@builtin(local_invocation_id) lid: vec3<u32>) {
  let e = p.quads * 4u + lid.x;
  if (e >= p.n) { return; }
  let w = ws[e / 2u];
  outs[e] = select(w << 16u, w & 0xffff0000u, (e & 1u) == 1u);
}
