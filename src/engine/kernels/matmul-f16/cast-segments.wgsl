// Several fp32 → f16 operand casts in one dispatch (./cast.ts castF16Segments): segment j casts x's
// n_j values from vec4 x_j into out from vec4 d_j, the words castF16Operand (./cast.ts, the one
// cast) writes for it and nothing else. Launch overhead, not bandwidth, bounded one cast a
// weight (84 a step at base, ~12 µs each).
// The host prepends half(), kernels/f16/f16.wgsl's codec (enc) and `const SEGS`.
//
// Each segment's quads (4 values, one invocation) start a workgroup of their own, so a workgroup finds
// its segment with a binary search over the first-workgroup column, the same path in every invocation.
// seg[j] = (first workgroup, x_j, d_j, n_j); x_j, d_j in vec4s of the bindings (16-byte source, 4-value destination).
struct Params { count: u32, groups: u32, _p0: u32, _p1: u32, seg: array<vec4<u32>, SEGS> }
@group(0) @binding(0) var<storage, read> x: array<vec4<u32>>;
@group(0) @binding(2) var<uniform> P: Params;

/** Workgroup wg's segment (seg[0].x is 0): the last j with seg[j].x ≤ wg. */
fn segment(wg: u32) -> vec4<u32> {
  var lo = 0u;
  var hi = P.count;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (P.seg[mid].x <= wg) { lo = mid; } else { hi = mid; }
  }
  return P.seg[lo];
}

/** This invocation's segment and quad in it (q.x: the quad's index in the segment); q.y 0 where it has none. */
fn quad(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> vec4<u32> {
  let wg = wid.x + wid.y * nwg.x;
  if (wg >= P.groups) { return vec4<u32>(0u); }
  let s = segment(wg);
  let q = (wg - s.x) * 256u + lid;
  if (q * 4u >= s.w) { return vec4<u32>(0u); }
  // (x index, out index, values left from this quad's first, 1)
  return vec4<u32>(s.y + q, s.z + q, s.w - q * 4u, 1u);
}

//--- words
// Packed f16 (castF16Operand's words): two per quad; a segment's last n % 4 values write only their
// ⌈(n % 4) / 2⌉ words (an odd n's last high half 0), so the padding between slots stays as it was.
@group(0) @binding(1) var<storage, read_write> out: array<vec2<u32>>;

@compute @workgroup_size(256)
fn words(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let q = quad(wid, nwg, lid);
  if (q.w == 0u) { return; }
  let v = x[q.x];
  let lo = enc(v.x) | (select(0u, enc(v.y), q.z > 1u) << 16u);
  if (q.z >= 4u) {
    out[q.y] = vec2<u32>(lo, enc(v.z) | (enc(v.w) << 16u));
  } else if (q.z == 3u) {
    out[q.y] = vec2<u32>(lo, enc(v.z));
  } else {
    out[q.y].x = lo;
  }
}

//--- twin
// The f32 twin (elem 'f32', castF16Operand's twin): each value as the f32 its f16 rounds to.
@group(0) @binding(1) var<storage, read_write> out: array<vec4<f32>>;

fn r(b: u32) -> f32 { return unpack2x16float(enc(b)).x; }

@compute @workgroup_size(256)
fn twin(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let q = quad(wid, nwg, lid);
  if (q.w == 0u) { return; }
  let v = x[q.x];
  if (q.z >= 4u) {
    out[q.y] = vec4<f32>(r(v.x), r(v.y), r(v.z), r(v.w));
    return;
  }
  out[q.y].x = r(v.x);
  if (q.z > 1u) { out[q.y].y = r(v.y); }
  if (q.z > 2u) { out[q.y].z = r(v.z); }
}
