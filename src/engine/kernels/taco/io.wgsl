// Bindings and fp32 access of the TACO kernels (taco.wgsl), one section per entry point and access
// width; src/engine/kernels/taco.ts prepends one (split at the `//--- name` lines). The payload
// (array<u32>) is binding 0, the fp32 chunk binding 1, the Params uniform binding 2 (taco.wgsl).
// `q` indexes 16-byte words of the chunk (elements 4q..4q+3). The vec4 sections move whole words
// and need n % 4 == 0 (every real chunk); the scalar ones check each element. Elements ≥ n read
// as 0 (the zero padding of the last group) and are never written.

//--- compress_vec4
@group(0) @binding(0) var<storage, read_write> payload: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;

fn load4(q: u32) -> vec4<f32> {
  if (q < P.n / 4u) { return x[q]; }
  return vec4<f32>(0.0);
}

//--- compress_scalar
@group(0) @binding(0) var<storage, read_write> payload: array<u32>;
@group(0) @binding(1) var<storage, read> x: array<f32>;

fn load4(q: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var c = 0u; c < 4u; c++) {
    if (4u * q + c < P.n) { v[c] = x[4u * q + c]; }
  }
  return v;
}

//--- decompress_vec4
@group(0) @binding(0) var<storage, read> payload: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;

fn store4(q: u32, v: vec4<f32>) {
  if (q < P.n / 4u) { y[q] = v; }
}

//--- decompress_scalar
@group(0) @binding(0) var<storage, read> payload: array<u32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;

fn store4(q: u32, v: vec4<f32>) {
  for (var c = 0u; c < 4u; c++) {
    if (4u * q + c < P.n) { y[4u * q + c] = v[c]; }
  }
}
