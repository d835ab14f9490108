// Causal grouped-query attention, forward (flash-attention style: saves o and lse, never P).
// Legend: B batch, T sequence, nH query heads, nKV KV heads, G = nH/nKV, D head dim (even),
// BQ queries per workgroup, BK keys per tile, NT threads, TPR = NT/BQ threads per query row.
// q, o: [B, T, nH, D]; k, v: [B, T, nKV, D]; lse: [B, nH, T] (natural log of Σ exp(scaled score)).
// Grid: x = query block (heaviest causal block first), y = b·nH + h.
//
// Thread (r = lid / TPR, kk = lid % TPR) owns query row r: scores for keys kk + TPR·i of each tile,
// and output vec4 columns kk + TPR·i (D split across the row's threads). Rows are kept in vec4s with
// D zero-padded to DP·4, so dot products over the padding are exact. Scores live in the log2 domain
// (q pre-scaled by scale·log2 e; exp2 is one instruction), converted back for lse.
// O16: o's f16 copy too (o16_store2, matmul-f16/cast.ts f16OutWgsl), what o_proj's f16 GEMM reads.
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
override NT: u32 = 256u;
override DP: u32 = (D + 3u) / 4u;
// Odd row stride (in vec4s) puts the rows that neighbouring threads read on different banks.
override KSTR: u32 = DP | 1u;
override TPR: u32 = NT / BQ;
override CPT: u32 = BK / TPR;
override OPT: u32 = (DP + TPR - 1u) / TPR;
override PSTR: u32 = BK + 1u;
override QS_N: u32 = BQ * KSTR;
override KV_N: u32 = BK * KSTR;
override PS_N: u32 = BQ * PSTR;

// Register arrays need const sizes; the override bounds (CPT, OPT) are checked against these in TS.
const MAXC = 16u;
const MAXO = 8u;
// Finite stand-in for −inf: exp2(NEG − m) = 0 for any finite m, and NEG − NEG never occurs for a
// real row because key 0 is visible to every query.
const NEG = -3.0e38;
const LN2 = 0.6931471805599453;

var<workgroup> Qs: array<vec4<f32>, QS_N>;
var<workgroup> KVs: array<vec4<f32>, KV_N>;   // K tile, then V tile of the same keys
var<workgroup> Ps: array<f32, PS_N>;
var<workgroup> red: array<f32, NT>;

// ldQ, ldK, ldV (vec4 loads of a head row) come from attention-load.wgsl.

@compute @workgroup_size(NT)
fn attn_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + BQ - 1u) / BQ;
  let q0 = (nQB - 1u - wid.x) * BQ;
  let bh = wid.y;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let r = lid / TPR;
  let kk = lid % TPR;
  let tq = q0 + r;

  for (var i = lid; i < BQ * DP; i += NT) {
    let rr = i / DP;
    let d4 = i % DP;
    var val = vec4<f32>(0.0);
    if (q0 + rr < T) { val = ldQ(((b * T + q0 + rr) * p.nH + h) * D, 4u * d4) * p.c2; }
    Qs[rr * KSTR + d4] = val;
  }

  var m = NEG;
  var l = 0.0;   // this thread's share of the row sum (its own key columns)
  var acc: array<vec4<f32>, MAXO>;
  let nKB = (min(T, q0 + BQ) + BK - 1u) / BK;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BK;
    workgroupBarrier();   // previous tile's V reads are done
    for (var i = lid; i < BK * DP; i += NT) {
      let j = i / DP;
      let d4 = i % DP;
      var val = vec4<f32>(0.0);
      if (k0 + j < T) { val = ldK(((b * T + k0 + j) * p.nKV + g) * D, 4u * d4); }
      KVs[j * KSTR + d4] = val;
    }
    workgroupBarrier();

    // Zeroed explicitly: Dawn/SwiftShader was seen not to redo a loop-local var's zero-init per tile.
    var s: array<f32, MAXC>;
    for (var i = 0u; i < CPT; i++) { s[i] = 0.0; }
    for (var d4 = 0u; d4 < DP; d4++) {
      let qv = Qs[r * KSTR + d4];
      for (var i = 0u; i < CPT; i++) { s[i] += dot(qv, KVs[(kk + TPR * i) * KSTR + d4]); }
    }
    var mt = NEG;
    for (var i = 0u; i < CPT; i++) {
      let key = k0 + kk + TPR * i;
      if (key > tq || key >= T) { s[i] = NEG; }
      mt = max(mt, s[i]);
    }
    red[lid] = mt;
    workgroupBarrier();   // also: every thread is past its K reads, so V may overwrite KVs
    // Every thread of the row reduces the same values in the same order: identical m, no broadcast.
    for (var j = 0u; j < TPR; j++) { mt = max(mt, red[r * TPR + j]); }
    let mNew = max(m, mt);
    let alpha = exp2(m - mNew);
    var ls = 0.0;
    for (var i = 0u; i < CPT; i++) {
      let pv = exp2(s[i] - mNew);
      Ps[r * PSTR + kk + TPR * i] = pv;
      ls += pv;
    }
    l = l * alpha + ls;
    m = mNew;
    for (var i = 0u; i < OPT; i++) { acc[i] *= alpha; }
    for (var i = lid; i < BK * DP; i += NT) {
      let j = i / DP;
      let d4 = i % DP;
      var val = vec4<f32>(0.0);
      if (k0 + j < T) { val = ldV(((b * T + k0 + j) * p.nKV + g) * D, 4u * d4); }
      KVs[j * KSTR + d4] = val;
    }
    workgroupBarrier();

    for (var j = 0u; j < BK; j++) {
      let pj = Ps[r * PSTR + j];
      for (var i = 0u; i < OPT; i++) {
        let d4 = kk + TPR * i;
        if (d4 < DP) { acc[i] += pj * KVs[j * KSTR + d4]; }
      }
    }
  }

  workgroupBarrier();
  red[lid] = l;
  workgroupBarrier();
  var lt = 0.0;
  for (var j = 0u; j < TPR; j++) { lt += red[r * TPR + j]; }
  if (tq < T) {
    let inv = 1.0 / lt;
    let base = ((b * T + tq) * p.nH + h) * D;
    for (var i = 0u; i < OPT; i++) {
      let d = 4u * (kk + TPR * i);
      let val = acc[i] * inv;
      if (d < D) { o[base + d] = val.x; o[base + d + 1u] = val.y; }
      if (d + 2u < D) { o[base + d + 2u] = val.z; o[base + d + 3u] = val.w; }
// #if O16
      if (d < D) { o16_store2((base + d) / 2u, val.x, val.y); }
      if (d + 2u < D) { o16_store2((base + d) / 2u + 1u, val.z, val.w); }
// #endif
    }
    if (kk == 0u) { lse[bh * T + tq] = (m + log2(lt)) * LN2; }
  }
}
