// Second pass of qgemmI8's split-K (src/engine/kernels/qgemm-splitk.ts): the workspace PARTS holds
// the raw i32 sums [S, M, N] of the S K slices; they are added in i32, which is exact (the caller
// checks that no sum can overflow) and so the same integer as one pass over K, and then
// dequantized exactly as the unsplit kernels' epilogue does (f32(sum) · sx[row] · sw[col], added
// to C where ACC): the same bits as the unsplit GEMM.
// The grid is 2-D for more than 65535 workgroups (launch.ts grid2d): index = wid.x + wid.y·nwg.x.

override ACC: u32 = 0u;

// one = 1.0 at run time: C + y·one is RN(C + y) even where the compiler fuses the add (qgemm.wgsl).
struct Params { M: u32, N: u32, parts: u32, one: f32 }

@group(0) @binding(0) var<storage, read> PARTS: array<i32>;
@group(0) @binding(1) var<storage, read> SX: array<f32>;
@group(0) @binding(2) var<storage, read> SW: array<f32>;
@group(0) @binding(3) var<storage, read_write> C: array<f32>;
@group(0) @binding(4) var<uniform> P: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  let count = P.M * P.N;
  if (i >= count) { return; }
  var s = PARTS[i];
  for (var p = 1u; p < P.parts; p++) { s += PARTS[p * count + i]; }
  let y = f32(s) * SX[i / P.N] * SW[i % P.N];
  C[i] = select(y, C[i] + y * P.one, ACC != 0u);
}
