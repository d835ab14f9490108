// dq = scale·dS·K from the stored dS (attention-ds.wgsl's layout), the stored-dS backward path's dQ
// pass: a small register-tiled GEMM per (query block, chunk head) over the key blocks up to the
// diagonal, with no S, P or dP to rebuild. Results as attn_bwd_dq (same dS, same key order).
// Workgroup (wid.x: query block, heaviest first; wid.y: head of the chunk, bh = pair0·G + wid.y)
// owns BQ query rows; per step of BK keys it stages K rows (Ks) and dS transposed (dsT: per key, one
// vec4 of 4 query rows), then thread (tr = lid / TC, tc = lid % TC) accumulates query row groups
// tr + TR·j (j < RG, 4 rows each) × vec4 columns tc + TC·c (c < CV) of dq: per key RG dsT vec4s and
// CV K vec4s for 16·RG·CV FMAs. Neighbouring lanes take neighbouring columns (coalesced K loads and
// dq stores). Named accumulators and override-tested branches, as in attention-bwd-blocked.wgsl.
// Needs (checked in TS): BQ % (4·RG) == 0, BK % 4 == 0, RG ∈ {1, 2}, CV ∈ {1, 2, 4}.
// The io section (vec4 when D % 4 == 0, else vec2) declares k (binding 1), dq (binding 3), ldK4, stDq4.
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, nRows: u32, pair0: u32 }

@group(0) @binding(0) var<storage, read> dS: array<vec4<f32>>;
@group(0) @binding(2) var<uniform> p: Params;

override D: u32;
override BQ: u32 = 64u;
override BK: u32 = 32u;
override RG: u32 = 1u;
override CV: u32 = 1u;
override NT: u32 = 256u;
override DP: u32 = (D + 3u) / 4u;
override TC: u32 = (DP + CV - 1u) / CV;   // threads along D
override TR: u32 = BQ / 4u / RG;          // threads along query row groups
override KSTR: u32 = DP | 1u;
override SSTR: u32 = (BQ / 4u) | 1u;
override KS_N: u32 = BK * KSTR;
override DST_N: u32 = BK * SSTR;
override BK4: u32 = BK / 4u;

var<workgroup> Ks: array<vec4<f32>, KS_N>;
var<workgroup> dsT: array<vec4<f32>, DST_N>;   // [key][query row group] → 4 query rows

// Column i of the result is w[i]·x: key row x's contribution to query row i.
fn outer(x: vec4<f32>, w: vec4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(x * w.x, x * w.y, x * w.z, x * w.w);
}

// dq column c4 of the 4 queries t0..t0+3 of head h (matrix column i = query t0 + i).
fn putQ(b: u32, h: u32, t0: u32, c4: u32, a: mat4x4<f32>) {
  if (c4 >= DP) { return; }
  let row = (b * p.T + t0) * p.nH + h;
  if (t0 < p.T) { stDq4(row, c4, a[0] * p.scale); }
  if (t0 + 1u < p.T) { stDq4(row + p.nH, c4, a[1] * p.scale); }
  if (t0 + 2u < p.T) { stDq4(row + 2u * p.nH, c4, a[2] * p.scale); }
  if (t0 + 3u < p.T) { stDq4(row + 3u * p.nH, c4, a[3] * p.scale); }
}

@compute @workgroup_size(NT)
fn attn_dq_from_ds(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + BQ - 1u) / BQ;
  let q0 = (nQB - 1u - wid.x) * BQ;
  let head = wid.y;
  let bh = p.pair0 * p.G + head;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let tr = lid / TC;
  let tc = lid % TC;

  // a<j><c>: row group tr + TR·j, column tc + TC·c.
  var a00 = mat4x4<f32>(); var a01 = mat4x4<f32>(); var a02 = mat4x4<f32>(); var a03 = mat4x4<f32>();
  var a10 = mat4x4<f32>(); var a11 = mat4x4<f32>(); var a12 = mat4x4<f32>(); var a13 = mat4x4<f32>();
  let nKB = (min(T, q0 + BQ) + BK - 1u) / BK;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BK;
    workgroupBarrier();   // the previous step's reads of Ks and dsT are done
    for (var i = lid; i < BK * DP; i += NT) {
      let r = i / DP;
      let c4 = i % DP;
      var x = vec4<f32>(0.0);
      if (k0 + r < T) { x = ldK4((b * T + k0 + r) * p.nKV + g, c4); }
      Ks[r * KSTR + c4] = x;
    }
    for (var i = lid; i < BQ * BK4; i += NT) {
      let r = i / BK4;
      let j = i % BK4;
      let t = q0 + r;
      let key4 = k0 / 4u + j;
      var x = vec4<f32>(0.0);
      if (t < T && 4u * key4 <= t) {
        // select, not multiply: a key past t may be unwritten (attention-ds.wgsl), even NaN.
        let keys = vec4<u32>(4u * key4) + vec4<u32>(0u, 1u, 2u, 3u);
        x = select(vec4<f32>(0.0), dS[dsIndex(head, t, key4)], keys <= vec4<u32>(t));
      }
      let o = 4u * j * SSTR + r / 4u;
      let e = r % 4u;
      dsT[o][e] = x.x;
      dsT[o + SSTR][e] = x.y;
      dsT[o + 2u * SSTR][e] = x.z;
      dsT[o + 3u * SSTR][e] = x.w;
    }
    workgroupBarrier();
    for (var kk = 0u; kk < BK; kk++) {
      let w0 = dsT[kk * SSTR + tr];
      var w1 = vec4<f32>(0.0);
      if (RG > 1u) { w1 = dsT[kk * SSTR + tr + TR]; }
      let kr = kk * KSTR + tc;
      let x0 = Ks[kr];
      a00 += outer(x0, w0);
      if (RG > 1u) { a10 += outer(x0, w1); }
      if (CV > 1u && tc + TC < DP) {
        let x1 = Ks[kr + TC];
        a01 += outer(x1, w0);
        if (RG > 1u) { a11 += outer(x1, w1); }
      }
      if (CV > 2u && tc + 2u * TC < DP) {
        let x2 = Ks[kr + 2u * TC];
        let x3 = Ks[kr + 3u * TC];
        a02 += outer(x2, w0); a03 += outer(x3, w0);
        if (RG > 1u) { a12 += outer(x2, w1); a13 += outer(x3, w1); }
      }
    }
  }

  let t0 = q0 + 4u * tr;
  putQ(b, h, t0, tc, a00);
  if (CV > 1u) { putQ(b, h, t0, tc + TC, a01); }
  if (CV > 2u) { putQ(b, h, t0, tc + 2u * TC, a02); putQ(b, h, t0, tc + 3u * TC, a03); }
  if (RG > 1u) {
    let t1 = t0 + 4u * TR;
    putQ(b, h, t1, tc, a10);
    if (CV > 1u) { putQ(b, h, t1, tc + TC, a11); }
    if (CV > 2u) { putQ(b, h, t1, tc + 2u * TC, a12); putQ(b, h, t1, tc + 3u * TC, a13); }
  }
}

//--- vec4
@group(0) @binding(1) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> dq: array<vec4<f32>>;
fn ldK4(row: u32, c4: u32) -> vec4<f32> { return k[row * DP + c4]; }
fn stDq4(row: u32, c4: u32, val: vec4<f32>) { dq[row * DP + c4] = val; }

//--- vec2
// D % 4 == 2: the last vec4 column of a row has only its first half in the row.
@group(0) @binding(1) var<storage, read> k: array<vec2<f32>>;
@group(0) @binding(3) var<storage, read_write> dq: array<vec2<f32>>;
fn inRow(c4: u32) -> bool { return 4u * c4 + 2u < D; }
fn ldK4(row: u32, c4: u32) -> vec4<f32> {
  let i = row * (D / 2u) + 2u * c4;
  var r = vec4<f32>(k[i], 0.0, 0.0);
  if (inRow(c4)) { r = vec4<f32>(r.xy, k[i + 1u]); }
  return r;
}
fn stDq4(row: u32, c4: u32, val: vec4<f32>) {
  let i = row * (D / 2u) + 2u * c4;
  dq[i] = val.xy;
  if (inRow(c4)) { dq[i + 1u] = val.zw; }
}
