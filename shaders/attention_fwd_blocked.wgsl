// Causal grouped-query attention, forward, register-blocked (flash-attention-2 work split on SIMT).
// Same bindings, grid, numerics and outputs as attn_fwd in attention.wgsl (read its header first):
// heaviest query block first, q pre-scaled into the log2 domain, D zero-padded to DP vec4s, o and
// lse saved. Only the split of the work over threads differs.
//
// TY = BQ/4 row groups × TX = NT/TY threads each. Thread (ty = lid / TX, tx = lid % TX) owns
//  - the 4 query rows 4·ty .. 4·ty+3: their scores, maxima, sums and probabilities are vec4s
//    (component i = row 4·ty+i), so the online softmax runs on 4 rows per instruction;
//  - keys tx + TX·j (j < RK = BK/TX ≤ 8) of each key tile: an S block of 4 × RK (s0..s7);
//  - output vec4 columns tx + TX·c (c < OC = ceil(DP/TX) ≤ 2): an O block of 4 rows × OC vec4s.
// Per d4 step of S = Q·Kᵀ a thread loads 4 Q vec4s (broadcast along the row group) and RK K vec4s
// and does 16·RK FMAs; per key of O += P·V it loads 1 P vec4 (the 4 rows' probabilities of that key,
// stored key-major: one load) and OC V vec4s and does 16·OC FMAs. At D 64 that is 6.4 FMAs per
// workgroup-memory load for 64×32/256, 9.1 for 32×32/64 and 64×32/128, 10.7 for 32×64/64; the
// row-per-thread attn_fwd does about 3.
// Neighbouring lanes read neighbouring K rows (odd KSTR: distinct banks), neighbouring V vec4s of
// one row, and write P rows PSTR (odd) apart: no bank conflicts; Q and P reads are broadcasts.
// Row maxima (per tile) and row sums (once, at the end) meet across the TX threads of a row group
// through workgroup memory (red), every thread reducing the same values in the same order.
//
// Scores and accumulators are named vec4s, not arrays (see matmul.wgsl): nothing is dynamically
// indexed, so nothing can spill to local memory, and the RK / OC branches fold away at pipeline
// creation. attentionTileProblem (attention.ts) checks BQ % 4, NT % TY, BK % TX, RK ≤ 8, OC ≤ 2.
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, _p0: u32, _p1: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> o: array<f32>;
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

override D: u32;
override BQ: u32 = 32u;
override BK: u32 = 32u;
override NT: u32 = 64u;
override DP: u32 = (D + 3u) / 4u;
override KSTR: u32 = DP | 1u;
override TY: u32 = BQ / 4u;
override TX: u32 = NT / TY;
override RK: u32 = BK / TX;
override OC: u32 = (DP + TX - 1u) / TX;
override PSTR: u32 = TY | 1u;
override QS_N: u32 = BQ * DP;     // unpadded rows: Q reads are broadcasts
override KV_N: u32 = BK * KSTR;
override PS_N: u32 = BK * PSTR;

// Finite stand-in for −inf, as in attention.wgsl (key 0 is visible to every query row).
const NEG = -3.0e38;
const LN2 = 0.6931471805599453;

var<workgroup> Qs: array<vec4<f32>, QS_N>;
var<workgroup> KVs: array<vec4<f32>, KV_N>;   // K tile, then V tile of the same keys
var<workgroup> Ps: array<vec4<f32>, PS_N>;    // Ps[key·PSTR + ty]: P of rows 4·ty..4·ty+3
var<workgroup> red: array<vec4<f32>, NT>;

// ldQ, ldK, ldV (vec4 loads of a head row) come from attention_load.wgsl.

// Rows [k0, k0 + BK) of K (or V) of KV head g into KVs, zeros past T.
fn loadKV(isV: bool, lid: u32, b: u32, g: u32, k0: u32, T: u32) {
  for (var i = lid; i < BK * DP; i += NT) {
    let j = i / DP;
    let d4 = i % DP;
    var val = vec4<f32>(0.0);
    if (k0 + j < T) {
      let base = ((b * T + k0 + j) * p.nKV + g) * D;
      if (isV) { val = ldV(base, 4u * d4); } else { val = ldK(base, 4u * d4); }
    }
    KVs[j * KSTR + d4] = val;
  }
}

// s += the 4 rows' q · key for one d4 step; qx = (row0.x, row1.x, row2.x, row3.x), etc.
fn qk(s: vec4<f32>, qx: vec4<f32>, qy: vec4<f32>, qz: vec4<f32>, qw: vec4<f32>, key: vec4<f32>) -> vec4<f32> {
  return s + qx * key.x + qy * key.y + qz * key.z + qw * key.w;
}

// Scores of key `key` for the rows `rows`, with the causally hidden ones (key after the row) at NEG.
fn causal(s: vec4<f32>, key: u32, rows: vec4<u32>) -> vec4<f32> {
  return select(s, vec4<f32>(NEG), vec4<u32>(key) > rows);
}

// Probabilities of key slot j (relative to the row maxima mNew) into Ps; returns them for the row sums.
fn putP(j: u32, tx: u32, ty: u32, s: vec4<f32>, mNew: vec4<f32>) -> vec4<f32> {
  let pj = exp2(s - mNew);
  Ps[(tx + TX * j) * PSTR + ty] = pj;
  return pj;
}

// Output vec4 column c4 of query row `row` of (b, h) (D even: a vec4 is full, half, or past the end).
fn putO(b: u32, row: u32, h: u32, c4: u32, val: vec4<f32>) {
  if (row >= p.T || c4 >= DP) { return; }
  let base = ((b * p.T + row) * p.nH + h) * D + 4u * c4;
  o[base] = val.x;
  o[base + 1u] = val.y;
  if (4u * c4 + 2u < D) { o[base + 2u] = val.z; o[base + 3u] = val.w; }
}

@compute @workgroup_size(NT)
fn attn_fwd_blocked(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + BQ - 1u) / BQ;
  let q0 = (nQB - 1u - wid.x) * BQ;
  let bh = wid.y;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let ty = lid / TX;
  let tx = lid % TX;
  let r0 = q0 + 4u * ty;
  let rows = vec4<u32>(r0, r0 + 1u, r0 + 2u, r0 + 3u);
  let qr = 4u * ty * DP;   // Qs index of row 4·ty
  // V columns this thread reads; clamped so that threads past DP (small D) read in bounds and
  // compute a column they never store.
  let c0 = min(tx, DP - 1u);
  let c1 = min(tx + TX, DP - 1u);

  for (var i = lid; i < BQ * DP; i += NT) {
    let rr = i / DP;
    var val = vec4<f32>(0.0);
    if (q0 + rr < T) { val = ldQ(((b * T + q0 + rr) * p.nH + h) * D, 4u * (i % DP)) * p.c2; }
    Qs[i] = val;
  }

  var m = vec4<f32>(NEG);
  var l = vec4<f32>(0.0);   // this thread's share of the row sums (its own key columns)
  // o<c><i>: output column tx + TX·c of row 4·ty + i.
  var o00 = vec4<f32>(0.0); var o01 = vec4<f32>(0.0); var o02 = vec4<f32>(0.0); var o03 = vec4<f32>(0.0);
  var o10 = vec4<f32>(0.0); var o11 = vec4<f32>(0.0); var o12 = vec4<f32>(0.0); var o13 = vec4<f32>(0.0);
  let nKB = (min(T, q0 + BQ) + BK - 1u) / BK;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BK;
    workgroupBarrier();   // the previous tile's P and V reads are done
    loadKV(false, lid, b, g, k0, T);
    workgroupBarrier();

    var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
    var s4 = vec4<f32>(0.0); var s5 = vec4<f32>(0.0); var s6 = vec4<f32>(0.0); var s7 = vec4<f32>(0.0);
    for (var d4 = 0u; d4 < DP; d4++) {
      let a0 = Qs[qr + d4];
      let a1 = Qs[qr + DP + d4];
      let a2 = Qs[qr + 2u * DP + d4];
      let a3 = Qs[qr + 3u * DP + d4];
      let qx = vec4<f32>(a0.x, a1.x, a2.x, a3.x);
      let qy = vec4<f32>(a0.y, a1.y, a2.y, a3.y);
      let qz = vec4<f32>(a0.z, a1.z, a2.z, a3.z);
      let qw = vec4<f32>(a0.w, a1.w, a2.w, a3.w);
      let kr = tx * KSTR + d4;
      let ks = TX * KSTR;   // K rows of consecutive key slots
      s0 = qk(s0, qx, qy, qz, qw, KVs[kr]);
      if (RK > 1u) { s1 = qk(s1, qx, qy, qz, qw, KVs[kr + ks]); }
      if (RK > 2u) { s2 = qk(s2, qx, qy, qz, qw, KVs[kr + 2u * ks]); }
      if (RK > 3u) { s3 = qk(s3, qx, qy, qz, qw, KVs[kr + 3u * ks]); }
      if (RK > 4u) { s4 = qk(s4, qx, qy, qz, qw, KVs[kr + 4u * ks]); }
      if (RK > 5u) { s5 = qk(s5, qx, qy, qz, qw, KVs[kr + 5u * ks]); }
      if (RK > 6u) { s6 = qk(s6, qx, qy, qz, qw, KVs[kr + 6u * ks]); }
      if (RK > 7u) { s7 = qk(s7, qx, qy, qz, qw, KVs[kr + 7u * ks]); }
    }
    // Only tiles reaching past the block's first row hide anything (keys ≥ T, zero-loaded, are past
    // every stored row, so the causal test hides them too).
    if (k0 + BK > q0 + 1u) {
      let key = k0 + tx;
      s0 = causal(s0, key, rows);
      s1 = causal(s1, key + TX, rows);
      s2 = causal(s2, key + 2u * TX, rows);
      s3 = causal(s3, key + 3u * TX, rows);
      s4 = causal(s4, key + 4u * TX, rows);
      s5 = causal(s5, key + 5u * TX, rows);
      s6 = causal(s6, key + 6u * TX, rows);
      s7 = causal(s7, key + 7u * TX, rows);
    }
    var mt = s0;
    if (RK > 1u) { mt = max(mt, s1); }
    if (RK > 2u) { mt = max(mt, s2); }
    if (RK > 3u) { mt = max(mt, s3); }
    if (RK > 4u) { mt = max(mt, s4); }
    if (RK > 5u) { mt = max(mt, s5); }
    if (RK > 6u) { mt = max(mt, s6); }
    if (RK > 7u) { mt = max(mt, s7); }
    red[lid] = mt;
    workgroupBarrier();   // also: every thread is past its K reads, so V may overwrite KVs
    // max is exact, so every thread of the row group gets the same maxima.
    for (var j = 0u; j < TX; j++) { mt = max(mt, red[ty * TX + j]); }
    let mNew = max(m, mt);
    let alpha = exp2(m - mNew);
    m = mNew;
    var ls = putP(0u, tx, ty, s0, mNew);
    if (RK > 1u) { ls += putP(1u, tx, ty, s1, mNew); }
    if (RK > 2u) { ls += putP(2u, tx, ty, s2, mNew); }
    if (RK > 3u) { ls += putP(3u, tx, ty, s3, mNew); }
    if (RK > 4u) { ls += putP(4u, tx, ty, s4, mNew); }
    if (RK > 5u) { ls += putP(5u, tx, ty, s5, mNew); }
    if (RK > 6u) { ls += putP(6u, tx, ty, s6, mNew); }
    if (RK > 7u) { ls += putP(7u, tx, ty, s7, mNew); }
    l = l * alpha + ls;
    o00 *= alpha.x; o01 *= alpha.y; o02 *= alpha.z; o03 *= alpha.w;
    if (OC > 1u) { o10 *= alpha.x; o11 *= alpha.y; o12 *= alpha.z; o13 *= alpha.w; }
    loadKV(true, lid, b, g, k0, T);
    workgroupBarrier();

    for (var j = 0u; j < BK; j++) {
      let pj = Ps[j * PSTR + ty];
      let v0 = KVs[j * KSTR + c0];
      o00 += pj.x * v0; o01 += pj.y * v0; o02 += pj.z * v0; o03 += pj.w * v0;
      if (OC > 1u) {
        let v1 = KVs[j * KSTR + c1];
        o10 += pj.x * v1; o11 += pj.y * v1; o12 += pj.z * v1; o13 += pj.w * v1;
      }
    }
  }

  // red was last read before the PV barrier above, so it can take the row sums now.
  red[lid] = l;
  workgroupBarrier();
  var lt = vec4<f32>(0.0);
  for (var j = 0u; j < TX; j++) { lt += red[ty * TX + j]; }
  let inv = 1.0 / lt;
  putO(b, r0, h, tx, o00 * inv.x);
  putO(b, r0 + 1u, h, tx, o01 * inv.y);
  putO(b, r0 + 2u, h, tx, o02 * inv.z);
  putO(b, r0 + 3u, h, tx, o03 * inv.w);
  if (OC > 1u) {
    putO(b, r0, h, tx + TX, o10 * inv.x);
    putO(b, r0 + 1u, h, tx + TX, o11 * inv.y);
    putO(b, r0 + 2u, h, tx + TX, o12 * inv.z);
    putO(b, r0 + 3u, h, tx + TX, o13 * inv.w);
  }
  if (tx == 0u) {
    let ls2 = (m + log2(lt)) * LN2;
    for (var i = 0u; i < 4u; i++) {
      if (r0 + i < T) { lse[bh * T + r0 + i] = ls2[i]; }
    }
  }
}
