// Second pass of a split-K GEMM (matmul.wgsl with a z grid): C (+)= alpha · Σ_s W[s], where the
// workspace W holds the S partial products [S, M·N] of the K slices. The slices are summed in
// order s = 0..S-1, so the result is the same bits on every run (no atomics).
// The grid is 2-D for more than 65535 workgroups (launch.ts grid2d): index = wid.x + wid.y·nwg.x.

@group(0) @binding(0) var<storage, read> W: array<f32>;
@group(0) @binding(1) var<storage, read_write> C: array<f32>;
// count = M·N; parts = S; accumulate: 0 or 1.
struct Params { count: u32, parts: u32, alpha: f32, accumulate: u32 }
@group(0) @binding(2) var<uniform> P: Params;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let i = (wid.x + wid.y * nwg.x) * 256u + lid;
  if (i >= P.count) { return; }
  var s = W[i];
  for (var p = 1u; p < P.parts; p++) { s += W[p * P.count + i]; }
  let v = P.alpha * s;
  if (P.accumulate != 0u) { C[i] = C[i] + v; } else { C[i] = v; }
}
