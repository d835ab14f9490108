// Global-memory access for matmul.wgsl, one section per operand and width; src/engine/kernels/
// matmul.ts picks one section of each (split at the `//--- name` lines) and prepends them.
// Stored matrices are row-major [rows, cols]; "4" helpers touch cols c..c+3 of row r.
// vec4 sections require cols % 4 == 0 (so a group is wholly in or out of bounds) and a binding
// offset that is a multiple of 16 bytes (bindings here are 256-aligned). Out-of-bounds elements
// read as 0, which is what the zero padding of partial tiles needs. FULL_TILES (matmul.wgsl):
// every tile is whole, so the checks are skipped.

//--- a_vec4
@group(0) @binding(0) var<storage, read> A: array<vec4<f32>>;
fn loadA4i(i: u32) -> vec4<f32> { return A[i]; }  // vec4 i, no checks (FULL_TILES)
fn loadA4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (FULL_TILES || (r < rows && c < cols)) { return A[(r * cols + c) / 4u]; }
  return vec4<f32>(0.0);
}

//--- a_scalar
@group(0) @binding(0) var<storage, read> A: array<f32>;
fn loadA4i(i: u32) -> vec4<f32> { return vec4<f32>(A[4u * i], A[4u * i + 1u], A[4u * i + 2u], A[4u * i + 3u]); }
fn loadA4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (r < rows) {
    let base = r * cols + c;
    for (var e = 0u; e < 4u; e++) {
      if (c + e < cols) { v[e] = A[base + e]; }
    }
  }
  return v;
}

//--- b_vec4
@group(0) @binding(1) var<storage, read> B: array<vec4<f32>>;
fn loadB4i(i: u32) -> vec4<f32> { return B[i]; }  // vec4 i, no checks (FULL_TILES)
fn loadB4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (FULL_TILES || (r < rows && c < cols)) { return B[(r * cols + c) / 4u]; }
  return vec4<f32>(0.0);
}

//--- b_scalar
@group(0) @binding(1) var<storage, read> B: array<f32>;
fn loadB4i(i: u32) -> vec4<f32> { return vec4<f32>(B[4u * i], B[4u * i + 1u], B[4u * i + 2u], B[4u * i + 3u]); }
fn loadB4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (r < rows) {
    let base = r * cols + c;
    for (var e = 0u; e < 4u; e++) {
      if (c + e < cols) { v[e] = B[base + e]; }
    }
  }
  return v;
}

//--- b_half
// B as packed f16, two a u32 word (element 2i in the low half: kernels/matmul-f16/cast.ts), each
// group of 4 a vec2<u32>, widened to f32 at load (unpack2x16float, core WGSL: no shader-f16). An f16
// value widened is exact, so the GEMM's sums are those of B's fp32 unpack. vec4 rules as b_vec4
// (an 8-byte binding offset; matmul.ts checks).
@group(0) @binding(1) var<storage, read> B: array<vec2<u32>>;
fn widenB(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }
fn loadB4i(i: u32) -> vec4<f32> { return widenB(B[i]); }  // vec4 i, no checks (FULL_TILES)
fn loadB4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (FULL_TILES || (r < rows && c < cols)) { return widenB(B[(r * cols + c) / 4u]); }
  return vec4<f32>(0.0);
}

//--- c_vec4
// C is [M, N]; to accumulate, matmul.wgsl reads it (loadC4) before it writes.
@group(0) @binding(2) var<storage, read_write> C: array<vec4<f32>>;
fn loadC4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (FULL_TILES || (r < rows && c < cols)) { return C[(r * cols + c) / 4u]; }
  return vec4<f32>(0.0);
}

fn storeC4(r: u32, c: u32, v: vec4<f32>, rows: u32, cols: u32) {
  if (FULL_TILES || (r < rows && c < cols)) { C[(r * cols + c) / 4u] = v; }
}

//--- c_scalar
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
fn loadC4(r: u32, c: u32, rows: u32, cols: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  if (r < rows) {
    let base = r * cols + c;
    for (var e = 0u; e < 4u; e++) {
      if (c + e < cols) { v[e] = C[base + e]; }
    }
  }
  return v;
}

fn storeC4(r: u32, c: u32, v: vec4<f32>, rows: u32, cols: u32) {
  if (r < rows) {
    let base = r * cols + c;
    for (var e = 0u; e < 4u; e++) {
      if (c + e < cols) { C[base + e] = v[e]; }
    }
  }
}
//--- lr_u_vec4
// The low-rank epilogue's U [LR_R, M] (matmul.wgsl LOW_RANK): rows r..r+3 of C are U[j, r..r+3].
// vec4 needs M % 4 == 0 (so r < M covers all four) and a 16-byte binding offset.
@group(0) @binding(4) var<storage, read> LRU: array<vec4<f32>>;
fn lrU4(j: u32, r: u32, M: u32) -> vec4<f32> {
  if (FULL_TILES || r < M) { return LRU[(j * M + r) / 4u]; }
  return vec4<f32>(0.0);
}

//--- lr_u_scalar
@group(0) @binding(4) var<storage, read> LRU: array<f32>;
fn lrU4(j: u32, r: u32, M: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var e = 0u; e < 4u; e++) {
    if (r + e < M) { v[e] = LRU[j * M + r + e]; }
  }
  return v;
}

//--- lr_v_vec4
// The low-rank epilogue's V [LR_R, N]: columns c..c+3 of C are V[j, c..c+3] (N % 4 == 0).
@group(0) @binding(5) var<storage, read> LRV: array<vec4<f32>>;
fn lrV4(j: u32, c: u32, N: u32) -> vec4<f32> {
  if (FULL_TILES || c < N) { return LRV[(j * N + c) / 4u]; }
  return vec4<f32>(0.0);
}

//--- lr_v_scalar
// V [LR_R, N], or [N, LR_R] when LR_TRANS_V (LoRA's B as PEFT stores it, [out, r]); 0 past its bounds.
@group(0) @binding(5) var<storage, read> LRV: array<f32>;
fn lrV4(j: u32, c: u32, N: u32) -> vec4<f32> {
  var v = vec4<f32>(0.0);
  for (var e = 0u; e < 4u; e++) {
    if (c + e < N && j < LR_R) { v[e] = LRV[select(j * N + c + e, (c + e) * LR_R + j, LR_TRANS_V)]; }
  }
  return v;
}
