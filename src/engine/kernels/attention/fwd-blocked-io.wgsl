// Global-memory access of attention-fwd-blocked.wgsl, one section per head-dim parity;
// src/engine/kernels/attention.ts prepends `vec4` when D % 4 == 0, else `vec2` (D is even), and
// `i8` for the INT8-score kernel (attention-i8.ts: Q and K as codes and scales, D % 4 == 0).
// `row` is a head row's index in its tensor (q, o: (b·T + t)·nH + h; k, v: (b·T + t)·nKV + g), so the
// row starts at float row·D; `c4` is a vec4 column (floats 4·c4 .. 4·c4 + 3 of the row, c4 < DP).
// Bindings are 256-byte aligned, so rows start 16-byte aligned (vec4) or 8-byte aligned (vec2).
// O16 (vec4, vec2): stO4 also writes o's f16 copy (o16_store4/2: matmul-f16/cast.ts f16OutWgsl).

//--- vec4
// One 16-byte access per vec4 column.
@group(0) @binding(0) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> o: array<vec4<f32>>;
fn ldQ4(row: u32, c4: u32) -> vec4<f32> { return q[row * DP + c4]; }
fn ldK4(row: u32, c4: u32) -> vec4<f32> { return k[row * DP + c4]; }
fn ldV4(row: u32, c4: u32) -> vec4<f32> { return v[row * DP + c4]; }
fn stO4(row: u32, c4: u32, val: vec4<f32>) {
  o[row * DP + c4] = val;
// #if O16
  o16_store4(row * DP + c4, val);
// #endif
}

//--- vec2
// D % 4 == 2: the last vec4 column of a row has only its first half in the row; the second reads as 0.
@group(0) @binding(0) var<storage, read> q: array<vec2<f32>>;
@group(0) @binding(1) var<storage, read> k: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> o: array<vec2<f32>>;
fn inRow(c4: u32) -> bool { return 4u * c4 + 2u < D; }
fn ldQ4(row: u32, c4: u32) -> vec4<f32> {
  let i = row * (D / 2u) + 2u * c4;
  var r = vec4<f32>(q[i], 0.0, 0.0);
  if (inRow(c4)) { r = vec4<f32>(r.xy, q[i + 1u]); }
  return r;
}
fn ldK4(row: u32, c4: u32) -> vec4<f32> {
  let i = row * (D / 2u) + 2u * c4;
  var r = vec4<f32>(k[i], 0.0, 0.0);
  if (inRow(c4)) { r = vec4<f32>(r.xy, k[i + 1u]); }
  return r;
}
fn ldV4(row: u32, c4: u32) -> vec4<f32> {
  let i = row * (D / 2u) + 2u * c4;
  var r = vec4<f32>(v[i], 0.0, 0.0);
  if (inRow(c4)) { r = vec4<f32>(r.xy, v[i + 1u]); }
  return r;
}
fn stO4(row: u32, c4: u32, val: vec4<f32>) {
  let i = row * (D / 2u) + 2u * c4;
  o[i] = val.xy;
  if (inRow(c4)) { o[i + 1u] = val.zw; }
// #if O16
  o16_store2(i, val.x, val.y);
  if (inRow(c4)) { o16_store2(i + 1u, val.z, val.w); }
// #endif
}

//--- i8
// Q and K as INT8 codes per (token, head) row, 4 to a word (DW words a row), and one scale a row.
@group(0) @binding(0) var<storage, read> qc: array<u32>;
@group(0) @binding(1) var<storage, read> kc: array<u32>;
@group(0) @binding(2) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> qsc: array<f32>;
@group(0) @binding(7) var<storage, read> ksc: array<f32>;
fn ldV4(row: u32, c4: u32) -> vec4<f32> { return v[row * DP + c4]; }
fn stO4(row: u32, c4: u32, val: vec4<f32>) { o[row * DP + c4] = val; }
