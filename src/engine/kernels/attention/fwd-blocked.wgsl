// Causal grouped-query attention, forward, register-blocked (flash-attention-2 work split on SIMT).
// Same grid, numerics and outputs as attn_fwd in attention.wgsl (read its header first): heaviest
// query block first, q pre-scaled into the log2 domain, D zero-padded to DP vec4s, o and lse saved.
// Global access (the q, k, v, o bindings; ldQ4, ldK4, ldV4, stO4) comes from a section of
// attention-fwd-blocked-io.wgsl: one 16-byte access per vec4 when D % 4 == 0, two 8-byte ones else.
//
// Work split: TY = BQ/4 row groups × TX = NT/TY threads each. Thread (ty, tx) owns
//  - the 4 query rows 4·ty .. 4·ty+3: their scores, maxima, sums and probabilities are vec4s
//    (component i = row 4·ty+i), so the online softmax runs on 4 rows per instruction;
//  - keys tx + TX·j (j < RK = BK/TX ≤ 8) of each key tile: an S block of 4 × RK (s0..s7);
//  - output vec4 columns tx + TX·c (c < OC = ceil(DP/TX) ≤ 2): an O block of 4 rows × OC vec4s.
// Per d4 step of S = Q·Kᵀ a thread loads 4 Q vec4s and RK K vec4s and does 16·RK FMAs; per key of
// O += P·V it loads 1 P vec4 and OC V vec4s and does 16·OC FMAs; per tile it also reads the TX
// partial maxima of its rows. At D 64 that is 5.8 FMAs per workgroup-memory load for 64x32/256
// (RK 2, OC 1), 8.8 for 64x32/128 (RK 4, OC 2).
//
// Lanes: XL = min(TX, 8) consecutive lanes take consecutive tx, the next XL lanes the next row group,
// so a 32-lane warp spans 4 row groups × 8 tx (TX ≥ 8) and each inner-loop read touches at most 8
// distinct vec4s on distinct banks (one wavefront): Q and P reads are 4 consecutive row-group vec4s
// (broadcast along tx; Q is stored column-major by row group for that), K reads 8 rows KSTR (odd)
// apart, V reads 8 consecutive vec4s of one row.
//
// Pipeline of key tile kb: two barriers, global latency hidden behind the S phase.
//   fetch K(kb+1) and V(kb) into registers (Stage);
//   S(kb) from Qs and Ks; this thread's tile maxima → red;          barrier A
//   row maxima from red; P(kb) → Ps; K(kb+1) → Ks; V(kb) → Vs;      barrier B
//   O += P(kb)·V(kb) from Ps and Vs.
// Between A and B every store overwrites what was last read before A (Ks: S(kb); Vs, Ps: O += of
// tile kb-1); red, written after S(kb), was last read before B of tile kb-1. So nothing else is
// needed; the previous kernel had four barriers per tile and waited for each K and V load.
//
// Scores and accumulators are named vec4s, not arrays (see matmul.wgsl): nothing is dynamically
// indexed, so nothing can spill to local memory, and the RK / OC / UN branches fold away at pipeline
// creation. attentionTileProblem (attention.ts) checks BQ % 4, NT % TY, TX % XL, BK % TX, RK ≤ 8,
// OC ≤ 2, and attentionTileBytes mirrors the workgroup arrays below.
// Loops marked `// unroll` are written out for each pipeline's bounds (attention.ts, wgsl.ts).
//
// I8 (attention-i8.ts): S = Q·Kᵀ from INT8 codes per (token, head) row, exactly in integers with
// dot4I8Packed (each thread its 4 × RK block), then f32(acc)·(sq·c2)·sk, as SageAttention does;
// softmax and P·V stay fp32. Q and K codes are staged row-major (CSTR words a row, odd) instead of Qs/Ks.
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, _p0: u32, _p1: u32 }

@group(0) @binding(4) var<storage, read_write> lse: array<f32>;
@group(0) @binding(5) var<uniform> p: Params;

override D: u32;
override BQ: u32 = 32u;
override BK: u32 = 32u;
override NT: u32 = 64u;
override DP: u32 = (D + 3u) / 4u;
override TY: u32 = BQ / 4u;
override TX: u32 = NT / TY;
override XL: u32 = min(TX, 8u);
override RK: u32 = BK / TX;
override OC: u32 = (DP + TX - 1u) / TX;
override KSTR: u32 = DP | 1u;
override PSTR: u32 = TY | 1u;
override TILE_N: u32 = BK * DP;              // vec4s of a K or V tile
override UN: u32 = (TILE_N + NT - 1u) / NT;  // of them per thread
override QS_N: u32 = BQ * DP;
override KS_N: u32 = BK * KSTR;
override PS_N: u32 = BK * PSTR;
override RED_N: u32 = TX * PSTR;

// Finite stand-in for −inf, as in attention.wgsl (key 0 is visible to every query row).
const NEG = -3.0e38;
const LN2 = 0.6931471805599453;

// #if I8
override DW: u32 = D / 4u;                    // code words of a head row
override CSTR: u32 = DW | 1u;                 // word stride of a staged code row
override QW4: u32 = BQ * DW / 4u;             // vec4<u32>s of the block's Q codes
override KW4: u32 = BK * DW / 4u;             // of a K tile's codes (<= NT, attention-i8.ts checks)
var<workgroup> Qc: array<i32, BQ * CSTR>;     // Qc[row·CSTR + w]: code word w of query row q0 + row
var<workgroup> Kc: array<i32, BK * CSTR>;     // Kc[key·CSTR + w]
override KPT: u32 = (BK * DW + NT - 1u) / NT; // K code words per thread and tile (<= 4)
// #endif
// #if F32
var<workgroup> Qs: array<vec4<f32>, QS_N>;    // Qs[(4·d4 + i)·TY + ty]: column d4 of row 4·ty + i
var<workgroup> Ks: array<vec4<f32>, KS_N>;    // Ks[key·KSTR + d4]
// #endif
var<workgroup> Vs: array<vec4<f32>, TILE_N>;  // Vs[key·DP + d4]
var<workgroup> Ps: array<vec4<f32>, PS_N>;    // Ps[key·PSTR + ty]: P of rows 4·ty..4·ty+3
var<workgroup> red: array<vec4<f32>, RED_N>;  // red[tx·PSTR + ty]: a thread's row maxima, then sums

// Vec4 i of the K (or V) tile at key k0 of KV head g (key k0 + i / DP, column i % DP); zeros past T
// and past the tile (i ≥ TILE_N, when NT does not divide it).
fn fetchKV(isV: bool, i: u32, b: u32, g: u32, k0: u32) -> vec4<f32> {
  let key = k0 + i / DP;
  if (i >= TILE_N || key >= p.T) { return vec4<f32>(0.0); }
  let row = (b * p.T + key) * p.nKV + g;
  // #if F32
  if (!isV) { return ldK4(row, i % DP); }
  // #endif
  return ldV4(row, i % DP);
}

fn putKV(isV: bool, i: u32, val: vec4<f32>) {
  if (i >= TILE_N) { return; }
  // #if F32
  if (!isV) { Ks[(i / DP) * KSTR + i % DP] = val; return; }
  // #endif
  Vs[i] = val;
}

// A thread's first 4 vec4s of a K or V tile (lid + NT·u, u < 4), held in registers from fetch to store.
struct Stage { r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32> }

fn fetchTile(isV: bool, lid: u32, b: u32, g: u32, k0: u32) -> Stage {
  var s: Stage;
  s.r0 = fetchKV(isV, lid, b, g, k0);
  if (UN > 1u) { s.r1 = fetchKV(isV, lid + NT, b, g, k0); }
  if (UN > 2u) { s.r2 = fetchKV(isV, lid + 2u * NT, b, g, k0); }
  if (UN > 3u) { s.r3 = fetchKV(isV, lid + 3u * NT, b, g, k0); }
  return s;
}

// Stores the tile fetched into s; a thread's vec4s past the first 4 (tiles of more than 4·NT vec4s,
// D 128 with small tiles) are fetched only now.
fn putTile(isV: bool, lid: u32, b: u32, g: u32, k0: u32, s: Stage) {
  putKV(isV, lid, s.r0);
  if (UN > 1u) { putKV(isV, lid + NT, s.r1); }
  if (UN > 2u) { putKV(isV, lid + 2u * NT, s.r2); }
  if (UN > 3u) { putKV(isV, lid + 3u * NT, s.r3); }
  for (var u = 4u; u < UN; u++) { putKV(isV, lid + u * NT, fetchKV(isV, lid + u * NT, b, g, k0)); }
}

// #if I8
// A thread's K code words of the tile at key k0 (word lid + NT·u of the tile, u < KPT); 0 past T.
fn fetchKc(lid: u32, b: u32, g: u32, k0: u32) -> vec4<u32> {
  var r = vec4<u32>(0u);
  for (var u = 0u; u < KPT; u++) {
    let i = lid + NT * u;
    let key = k0 + i / DW;
    if (i < BK * DW && key < p.T) { r[u] = kc[((b * p.T + key) * p.nKV + g) * DW + i % DW]; }
  }
  return r;
}

fn putKc(lid: u32, r: vec4<u32>) {
  for (var u = 0u; u < KPT; u++) {
    let i = lid + NT * u;
    if (i < BK * DW) { Kc[(i / DW) * CSTR + i % DW] = bitcast<i32>(r[u]); }
  }
}

// The scale of a K row (0 past T, whose codes are 0 too).
fn kScale(b: u32, g: u32, key: u32) -> f32 {
  if (key >= p.T) { return 0.0; }
  return ksc[(b * p.T + key) * p.nKV + g];
}

// The integer scores of 4 Q code words (rows 4·ty .. +3) against one K code word.
fn dq4(a0: u32, a1: u32, a2: u32, a3: u32, kw: i32) -> vec4<i32> {
  let w = bitcast<u32>(kw);
  return vec4<i32>(dot4I8Packed(a0, w), dot4I8Packed(a1, w), dot4I8Packed(a2, w), dot4I8Packed(a3, w));
}

// The 4 rows' scores of key `key` from their integer sums: f32(acc)·(sq·c2)·sk, in that order.
fn scoreOf(acc: vec4<i32>, sq: vec4<f32>, b: u32, g: u32, key: u32) -> vec4<f32> {
  return vec4<f32>(acc) * sq * kScale(b, g, key);
}

// #endif
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

// Output vec4 column c4 of query row `row` of (b, h).
fn putO(b: u32, row: u32, h: u32, c4: u32, val: vec4<f32>) {
  if (row < p.T && c4 < DP) { stO4((b * p.T + row) * p.nH + h, c4, val); }
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
  let ty = (lid / XL) % TY;
  let tx = lid % XL + XL * (lid / (XL * TY));
  let r0 = q0 + 4u * ty;
  let rows = vec4<u32>(r0, r0 + 1u, r0 + 2u, r0 + 3u);
  // V columns this thread reads; clamped so that threads past DP (small D) read in bounds and
  // compute a column they never store.
  let c0 = min(tx, DP - 1u);
  let c1 = min(tx + TX, DP - 1u);

  // #if I8
  for (var i = lid; i < BQ * DW; i += NT) {
    let rr = i / DW;
    var w = 0u;
    if (q0 + rr < T) { w = qc[((b * T + q0 + rr) * p.nH + h) * DW + i % DW]; }
    Qc[rr * CSTR + i % DW] = bitcast<i32>(w);
  }
  putKc(lid, fetchKc(lid, b, g, 0u));
  var sq = vec4<f32>(0.0);   // the 4 rows' Q scales × c2 (0 past T)
  for (var i = 0u; i < 4u; i++) {
    if (r0 + i < T) { sq[i] = qsc[(b * T + r0 + i) * p.nH + h] * p.c2; }
  }
  // #endif
  // #if F32
  for (var i = lid; i < QS_N; i += NT) {
    let rr = i / DP;
    let d4 = i % DP;
    var val = vec4<f32>(0.0);
    if (q0 + rr < T) { val = ldQ4((b * T + q0 + rr) * p.nH + h, d4) * p.c2; }
    Qs[(4u * d4 + rr % 4u) * TY + rr / 4u] = val;
  }
  putTile(false, lid, b, g, 0u, fetchTile(false, lid, b, g, 0u));
  // #endif
  workgroupBarrier();

  var m = vec4<f32>(NEG);
  var l = vec4<f32>(0.0);   // this thread's share of the row sums (its own key columns)
  // o<c><i>: output column tx + TX·c of row 4·ty + i.
  var o00 = vec4<f32>(0.0); var o01 = vec4<f32>(0.0); var o02 = vec4<f32>(0.0); var o03 = vec4<f32>(0.0);
  var o10 = vec4<f32>(0.0); var o11 = vec4<f32>(0.0); var o12 = vec4<f32>(0.0); var o13 = vec4<f32>(0.0);
  let nKB = (min(T, q0 + BQ) + BK - 1u) / BK;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BK;
    let hasNext = kb + 1u < nKB;
    // #if I8
    var kcNext = vec4<u32>(0u);
    if (hasNext) { kcNext = fetchKc(lid, b, g, k0 + BK); }
    // #endif
    // #if F32
    var kNext: Stage;
    if (hasNext) { kNext = fetchTile(false, lid, b, g, k0 + BK); }
    // #endif
    let vHere = fetchTile(true, lid, b, g, k0);

    var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
    var s4 = vec4<f32>(0.0); var s5 = vec4<f32>(0.0); var s6 = vec4<f32>(0.0); var s7 = vec4<f32>(0.0);
    // #if I8
    var i0 = vec4<i32>(0); var i1 = vec4<i32>(0); var i2 = vec4<i32>(0); var i3 = vec4<i32>(0);
    var i4 = vec4<i32>(0); var i5 = vec4<i32>(0); var i6 = vec4<i32>(0); var i7 = vec4<i32>(0);
    // unroll
    for (var w = 0u; w < DW; w++) {
      let qr = 4u * ty * CSTR + w;
      let a0 = bitcast<u32>(Qc[qr]);
      let a1 = bitcast<u32>(Qc[qr + CSTR]);
      let a2 = bitcast<u32>(Qc[qr + 2u * CSTR]);
      let a3 = bitcast<u32>(Qc[qr + 3u * CSTR]);
      let kr = tx * CSTR + w;
      let ks = TX * CSTR;   // K rows of consecutive key slots
      i0 += dq4(a0, a1, a2, a3, Kc[kr]);
      if (RK > 1u) { i1 += dq4(a0, a1, a2, a3, Kc[kr + ks]); }
      if (RK > 2u) { i2 += dq4(a0, a1, a2, a3, Kc[kr + 2u * ks]); }
      if (RK > 3u) { i3 += dq4(a0, a1, a2, a3, Kc[kr + 3u * ks]); }
      if (RK > 4u) { i4 += dq4(a0, a1, a2, a3, Kc[kr + 4u * ks]); }
      if (RK > 5u) { i5 += dq4(a0, a1, a2, a3, Kc[kr + 5u * ks]); }
      if (RK > 6u) { i6 += dq4(a0, a1, a2, a3, Kc[kr + 6u * ks]); }
      if (RK > 7u) { i7 += dq4(a0, a1, a2, a3, Kc[kr + 7u * ks]); }
    }
    let key0 = k0 + tx;
    s0 = scoreOf(i0, sq, b, g, key0);
    if (RK > 1u) { s1 = scoreOf(i1, sq, b, g, key0 + TX); }
    if (RK > 2u) { s2 = scoreOf(i2, sq, b, g, key0 + 2u * TX); }
    if (RK > 3u) { s3 = scoreOf(i3, sq, b, g, key0 + 3u * TX); }
    if (RK > 4u) { s4 = scoreOf(i4, sq, b, g, key0 + 4u * TX); }
    if (RK > 5u) { s5 = scoreOf(i5, sq, b, g, key0 + 5u * TX); }
    if (RK > 6u) { s6 = scoreOf(i6, sq, b, g, key0 + 6u * TX); }
    if (RK > 7u) { s7 = scoreOf(i7, sq, b, g, key0 + 7u * TX); }
    // #endif
    // #if F32
    // unroll
    for (var d4 = 0u; d4 < DP; d4++) {
      let a0 = Qs[4u * d4 * TY + ty];
      let a1 = Qs[(4u * d4 + 1u) * TY + ty];
      let a2 = Qs[(4u * d4 + 2u) * TY + ty];
      let a3 = Qs[(4u * d4 + 3u) * TY + ty];
      let qx = vec4<f32>(a0.x, a1.x, a2.x, a3.x);
      let qy = vec4<f32>(a0.y, a1.y, a2.y, a3.y);
      let qz = vec4<f32>(a0.z, a1.z, a2.z, a3.z);
      let qw = vec4<f32>(a0.w, a1.w, a2.w, a3.w);
      let kr = tx * KSTR + d4;
      let ks = TX * KSTR;   // K rows of consecutive key slots
      s0 = qk(s0, qx, qy, qz, qw, Ks[kr]);
      if (RK > 1u) { s1 = qk(s1, qx, qy, qz, qw, Ks[kr + ks]); }
      if (RK > 2u) { s2 = qk(s2, qx, qy, qz, qw, Ks[kr + 2u * ks]); }
      if (RK > 3u) { s3 = qk(s3, qx, qy, qz, qw, Ks[kr + 3u * ks]); }
      if (RK > 4u) { s4 = qk(s4, qx, qy, qz, qw, Ks[kr + 4u * ks]); }
      if (RK > 5u) { s5 = qk(s5, qx, qy, qz, qw, Ks[kr + 5u * ks]); }
      if (RK > 6u) { s6 = qk(s6, qx, qy, qz, qw, Ks[kr + 6u * ks]); }
      if (RK > 7u) { s7 = qk(s7, qx, qy, qz, qw, Ks[kr + 7u * ks]); }
    }
    // #endif
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
    red[tx * PSTR + ty] = mt;
    workgroupBarrier();   // A
    // max is exact, so every thread of the row group gets the same maxima.
    // unroll
    for (var j = 0u; j < TX; j++) {
      mt = max(mt, red[j * PSTR + ty]);
    }
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
    // #if I8
    if (hasNext) { putKc(lid, kcNext); }
    // #endif
    // #if F32
    if (hasNext) { putTile(false, lid, b, g, k0 + BK, kNext); }
    // #endif
    putTile(true, lid, b, g, k0, vHere);
    workgroupBarrier();   // B

    // unroll
    for (var j = 0u; j < BK; j++) {
      let pj = Ps[j * PSTR + ty];
      let v0 = Vs[j * DP + c0];
      o00 += pj.x * v0; o01 += pj.y * v0; o02 += pj.z * v0; o03 += pj.w * v0;
      if (OC > 1u) {
        let v1 = Vs[j * DP + c1];
        o10 += pj.x * v1; o11 += pj.y * v1; o12 += pj.z * v1; o13 += pj.w * v1;
      }
    }
  }

  // red was last read before the last tile's barrier B, so it can take the row sums now.
  red[tx * PSTR + ty] = l;
  workgroupBarrier();
  var lt = vec4<f32>(0.0);
  // unroll
  for (var j = 0u; j < TX; j++) {
    lt += red[j * PSTR + ty];
  }
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
