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
// The io section (vec4 when D % 4 == 0, else vec2) declares k (binding 1), dq (binding 3), ldK4, stDq4;
// attention-ds.wgsl's read_f32 / read_bf16 section dS (binding 0) and ldDsAt.
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, nRows: u32, pair0: u32 }

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

// Staging. A step is BK K rows (K_ITEMS vec4s) and the BQ × BK block of dS (DS_ITEMS vec4s of 4
// keys of a query row), scattered transposed into dsT. A thread's items are lid + NT·j. PREFETCH
// holds them in a Staged value from one step's FMAs to the next step's put (at most 4 K and 4 dS
// vec4s per thread: checked in TS); 4 × 4 blocks transposed in registers instead of the scatter
// measured slower on the H200.
override PREFETCH: bool = false;
override K_ITEMS: u32 = BK * DP;
override DS_ITEMS: u32 = BQ * BK4;
struct Staged { x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>, y0: vec4<f32>, y1: vec4<f32>, y2: vec4<f32>, y3: vec4<f32> }

fn noStaged() -> Staged {
  let z = vec4<f32>(0.0);
  return Staged(z, z, z, z, z, z, z, z);
}

fn fetchK(b: u32, g: u32, k0: u32, i: u32) -> vec4<f32> {
  if (i >= K_ITEMS || k0 + i / DP >= p.T) { return vec4<f32>(0.0); }
  return ldK4((b * p.T + k0 + i / DP) * p.nKV + g, i % DP);
}

fn fetchKs(b: u32, g: u32, k0: u32, lid: u32) -> Staged {
  var s = noStaged();
  s.x0 = fetchK(b, g, k0, lid);
  if (K_ITEMS > NT) { s.x1 = fetchK(b, g, k0, lid + NT); }
  if (K_ITEMS > 2u * NT) { s.x2 = fetchK(b, g, k0, lid + 2u * NT); }
  if (K_ITEMS > 3u * NT) { s.x3 = fetchK(b, g, k0, lid + 3u * NT); }
  return s;
}

fn putK(i: u32, x: vec4<f32>) {
  if (i < K_ITEMS) { Ks[(i / DP) * KSTR + i % DP] = x; }
}

fn putKs(lid: u32, s: Staged) {
  putK(lid, s.x0);
  if (K_ITEMS > NT) { putK(lid + NT, s.x1); }
  if (K_ITEMS > 2u * NT) { putK(lid + 2u * NT, s.x2); }
  if (K_ITEMS > 3u * NT) { putK(lid + 3u * NT, s.x3); }
}

// dS of query t, keys 4·key4 .. 4·key4 + 3 (zero past t or T).
fn ldDs(head: u32, t: u32, key4: u32) -> vec4<f32> {
  if (t >= p.T || 4u * key4 > t) { return vec4<f32>(0.0); }
  // select, not multiply: a key past t may be unwritten (attention-ds.wgsl), even NaN.
  let keys = vec4<u32>(4u * key4) + vec4<u32>(0u, 1u, 2u, 3u);
  return select(vec4<f32>(0.0), ldDsAt(dsIndex(head, t, key4)), keys <= vec4<u32>(t));
}

// Item i: query row i / BK4 of the step, keys 4·(i % BK4) .. +3.
fn fetchDsItem(head: u32, q0: u32, k0: u32, i: u32) -> vec4<f32> {
  if (i >= DS_ITEMS) { return vec4<f32>(0.0); }
  return ldDs(head, q0 + i / BK4, k0 / 4u + i % BK4);
}

fn fetchDsT(head: u32, q0: u32, k0: u32, lid: u32) -> Staged {
  var s = noStaged();
  s.y0 = fetchDsItem(head, q0, k0, lid);
  if (DS_ITEMS > NT) { s.y1 = fetchDsItem(head, q0, k0, lid + NT); }
  if (DS_ITEMS > 2u * NT) { s.y2 = fetchDsItem(head, q0, k0, lid + 2u * NT); }
  if (DS_ITEMS > 3u * NT) { s.y3 = fetchDsItem(head, q0, k0, lid + 3u * NT); }
  return s;
}

// One vec4 of query row r (r < BQ), keys 4·j .. 4·j + 3 of the step, scattered into dsT.
fn putDs1(i: u32, x: vec4<f32>) {
  if (i >= DS_ITEMS) { return; }
  let r = i / BK4;
  let o = 4u * (i % BK4) * SSTR + r / 4u;
  let e = r % 4u;
  dsT[o][e] = x.x;
  dsT[o + SSTR][e] = x.y;
  dsT[o + 2u * SSTR][e] = x.z;
  dsT[o + 3u * SSTR][e] = x.w;
}

fn putDsT(lid: u32, s: Staged) {
  putDs1(lid, s.y0);
  if (DS_ITEMS > NT) { putDs1(lid + NT, s.y1); }
  if (DS_ITEMS > 2u * NT) { putDs1(lid + 2u * NT, s.y2); }
  if (DS_ITEMS > 3u * NT) { putDs1(lid + 3u * NT, s.y3); }
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
  var pk = noStaged();
  var ps = noStaged();
  if (PREFETCH) { pk = fetchKs(b, g, 0u, lid); ps = fetchDsT(head, q0, 0u, lid); }
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BK;
    workgroupBarrier();   // the previous step's reads of Ks and dsT are done
    if (PREFETCH) {
      putKs(lid, pk);
      putDsT(lid, ps);
    } else {
      for (var i = lid; i < K_ITEMS; i += NT) { putK(i, fetchK(b, g, k0, i)); }
      for (var i = lid; i < DS_ITEMS; i += NT) { putDs1(i, fetchDsItem(head, q0, k0, i)); }
    }
    workgroupBarrier();
    // PREFETCH: the next step's global loads are in flight during this step's FMAs.
    if (PREFETCH && kb + 1u < nKB) { pk = fetchKs(b, g, k0 + BK, lid); ps = fetchDsT(head, q0, k0 + BK, lid); }
    // unroll
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
