// Inverted dropout with a mask recomputed from (seed, index) instead of stored: the forward's
// `apply` and the backward's `accumulate_masked` of one step see the same mask for the same seed.
// keep(i) ⇔ hash(i ^ hash(seed)) ≥ threshold (threshold = p·2³²); kept values are scaled by 1/(1−p).
struct Params { n: u32, seed: u32, threshold: u32, scale: f32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@group(0) @binding(2) var<uniform> p: Params;

// lowbias32 (Chris Wellons): a cheap integer hash with good avalanche.
fn hash(v: u32) -> u32 {
  var h = v;
  h ^= h >> 16u;
  h *= 0x7feb352du;
  h ^= h >> 15u;
  h *= 0x846ca68bu;
  h ^= h >> 16u;
  return h;
}

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

fn kept(i: u32, v: f32) -> f32 {
  if (hash(i ^ hash(p.seed)) >= p.threshold) { return v * p.scale; }
  return 0.0;
}

// out = dropout(x)
@compute @workgroup_size(256)
fn apply(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out[i] = kept(i, x[i]); }
}

// out += dropout'(x): the gradient through the same mask, added to what is there.
@compute @workgroup_size(256)
fn accumulate_masked(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i < p.n) { out[i] = out[i] + kept(i, x[i]); }
}
