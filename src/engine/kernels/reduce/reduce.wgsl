// Deterministic two-stage sum of squares (the global gradient norm).
// N = element count of one buffer, P = partials written by one stage-1 call, S = total partials.
// Stage 1 (sumsq_partials): a fixed grid of P workgroups; workgroup k sums x[i]² over
//   i = k·WG + lid + j·P·WG (grid-stride: every load of a sweep is coalesced), then a fixed-shape
//   tree in workgroup memory; partials[base + k] = that sum. The partition depends only on N, so
//   the result is bit-identical run to run (no float atomics).
// Stage 2 (norm_finalize): one workgroup sums partials[0..S) the same way and writes sqrt(total).
struct Params { n: u32, base: u32, _p0: u32, _p1: u32 }

// WG, red and wg_sum come from wg-sum.wgsl (prepended by the TS declaration).

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

@compute @workgroup_size(WG)
fn sumsq_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  var acc = 0.0;
  let stride = nwg.x * WG;
  for (var i = wid.x * WG + lid; i < p.n; i += stride) {
    let v = x[i];
    acc = fma(v, v, acc);
  }
  let s = wg_sum(acc, lid);
  if (lid == 0u) { partials[p.base + wid.x] = s; }
}

// Stage 2 bindings: the partials (read) and the 1-element output.
@group(0) @binding(0) var<storage, read> parts: array<f32>;
@group(0) @binding(1) var<storage, read_write> norm_out: array<f32>;

@compute @workgroup_size(WG)
fn norm_finalize(@builtin(local_invocation_index) lid: u32) {
  var acc = 0.0;
  for (var i = lid; i < p.n; i += WG) { acc += parts[i]; }
  let s = wg_sum(acc, lid);
  if (lid == 0u) { norm_out[0] = sqrt(s); }
}
