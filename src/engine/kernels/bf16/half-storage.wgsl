// 16-bit float storage of fp32 tensors (bf16, f16): two values per u32 word, element i in bits 16·(i%2).
// The format's codec comes first (kernels/bf16/bf16.wgsl, kernels/f16/f16.wgsl):
//   enc(b: u32) -> u32         the 16-bit code of the fp32 value with bits b (in the low half);
//   dec2(w: u32) -> vec2<u32>  the fp32 bits of a word's two values (low half first).
// Values move as raw u32 bits where the codec allows (bf16), so no device flushes subnormals or
// canonicalises NaN payloads there.
//
// pack / unpack: one invocation per quad (4 values = 2 words), vec4 loads and stores.
// pack_tail / unpack_tail: the last n % 4 values (one workgroup, scalar), a dispatch of their own
// because the vec4 views cover only whole quads.
// The grid may be 2-D (more than 65535 workgroups): flat index gid.x + gid.y · (row width).
struct Params { quads: u32, n: u32, _p0: u32, _p1: u32 }

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

fn enc2(a: u32, b: u32) -> u32 { return enc(a) | (enc(b) << 16u); }

//--- pack
@group(0) @binding(0) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read_write> words: array<vec2<u32>>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(256)
fn pack(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.quads) { return; }
  let v = x[i];
  words[i] = vec2<u32>(enc2(v.x, v.y), enc2(v.z, v.w));
}

//--- pack_tail
@group(0) @binding(0) var<storage, read> xs: array<u32>;
@group(0) @binding(1) var<storage, read_write> ws: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(2)
fn pack_tail(@builtin(local_invocation_id) lid: vec3<u32>) {
  let e = p.quads * 4u + lid.x * 2u;
  if (e >= p.n) { return; }
  var w = enc(xs[e]);
  if (e + 1u < p.n) { w = w | (enc(xs[e + 1u]) << 16u); }
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
  out[i] = vec4<u32>(dec2(w.x), dec2(w.y));
}

//--- unpack_tail
@group(0) @binding(0) var<storage, read> ws: array<u32>;
@group(0) @binding(1) var<storage, read_write> outs: array<u32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(4)
fn unpack_tail(@builtin(local_invocation_id) lid: vec3<u32>) {
  let e = p.quads * 4u + lid.x;
  if (e >= p.n) { return; }
  let w = dec2(ws[e / 2u]);
  outs[e] = select(w.x, w.y, (e & 1u) == 1u);
}
