// Column blocks of row-major f32 matrices, for simulated tensor parallelism (a rank's shard of a
// weight or activation is a block of columns).
// Legend: R = rows (p.rows), W = block width (p.width); A = source with row stride p.sa, block at
// column p.ca; B = destination with row stride p.sb, block at column p.cb.
//   B[r, cb + j] = A[r, ca + j]        (or += with p.accumulate, for sums of partial results)
// gather: A = [R, C] at c0, B = [R, W] at 0; scatter: A = [R, W] at 0, B = [R, C] at c0.
// One thread per block element in row-major order: consecutive threads touch consecutive columns
// of one row (coalesced while W is more than a few dozen). Each destination element has exactly
// one writer, so accumulation needs no atomics.
struct Params { rows: u32, width: u32, sa: u32, ca: u32, sb: u32, cb: u32, accumulate: u32, _p: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(256)
fn copy_block(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = gid.x + gid.y * nwg.x * 256u;
  if (k >= p.rows * p.width) { return; }
  let r = k / p.width;
  let j = k - r * p.width;
  let v = src[r * p.sa + p.ca + j];
  let o = r * p.sb + p.cb + j;
  if (p.accumulate != 0u) {
    dst[o] = dst[o] + v;
  } else {
    dst[o] = v;
  }
}
