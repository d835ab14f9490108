// The register-blocked backward's streamed kernels, attn_bwd_dkdv_stream and attn_bwd_dq_stream
// (D % 4 == 0). Appended by attention.ts after attention-bwd-blocked.wgsl (legend, bindings, tiles,
// helpers) and attention-bwd-blocked-resident.wgsl (the resident kernels), whose text it uses.
//
// The resident kernels (attention-bwd-blocked-resident.wgsl) keep the own pair resident, so a tile
// costs 2·(OWNR + OTHR) rows of workgroup memory plus PT, and 64×64 tiles do not fit in 48 KiB at
// D 64. Here nothing stays resident: every tile stages both pairs CH vec4 columns of D at a time
// (GEMM-style; the own rows are re-read from L2 each tile), and then only the full other rows its
// gradient products need (dq: K; dkdv: dO, then Q) into the same memory. Workgroup memory is
// max(2·(OWNR + OTHR)·CHS, OTHR·KSTR) + PT vec4s: 37 KiB at 64×64, D 64, so 256 threads each own a
// 4 × 4 block of S and dP (128 FMAs per 16 vec4 loads per d4 step, twice the 32×32/128 kernel's
// other-row reuse). Global access is whole vec4s (q4 .. dv4 alias q .. dv). Same thread layout, P/dS
// maths, reduction order (deterministic dK/dV) and results as the resident kernels.
// KEEP stages the other pair's first operand (dq: K, dkdv: Q) chunk by chunk straight into full rows
// at the start of `stage` and keeps it for the gradient product instead of staging it again (one
// full step less per tile; STAGE_FULL is false for dq, which then has no full step at all).
// Barriers per tile: 2·NCH + 2 for dq (2·NCH + 1 kept), 2·NCH + 4 for dkdv (kept too): 10 and 12
// at 64×64, D 64, CH 4, for four times the work of a 32×32 tile (3 and 5 in the resident ones).
@group(0) @binding(0) var<storage, read> q4: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> k4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> v4: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> dO4: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> dq4: array<vec4<f32>>;   // attn_bwd_dq_stream
@group(0) @binding(7) var<storage, read_write> dk4: array<vec4<f32>>;   // attn_bwd_dkdv_stream
@group(0) @binding(8) var<storage, read_write> dv4: array<vec4<f32>>;   // attn_bwd_dkdv_stream

// I8 (the dK/dV pass with stored dS only): S from Q's and K's INT8 codes per (token, head) row, and
// with DP8 dP from dO's and V's; the codes' bindings, arrays and helpers are in attention-bwd-i8-codes.wgsl.
override DP8_ON: bool = false;              // set with the DP8 text (no chunk steps)
override NCH_RUN: u32 = select(NCH, 0u, DP8_ON);   // chunk steps per tile
override FIRST_STEP: u32 = select(0u, NCH, DP8_ON); // a tile's first staging step

override CH: u32 = 4u;                 // vec4 columns of D per staging step
override CHS: u32 = CH | 1u;           // odd chunk row stride (other rows of neighbouring ts on different banks)
override NCH: u32 = (DP + CH - 1u) / CH;
override KEEP: bool = false;
override STAGE_FULL: bool = true;      // a full step's rows (at CB) share stage with the chunks
override CB: u32 = select(0u, OTHR * KSTR, KEEP);   // chunk area (and full-step rows) base
override OWN_A: u32 = CB;              // chunk sections: own A, own B, other A (unless kept), other B
override OTH_A: u32 = select(CB + 2u * OWNR * CHS, 0u, KEEP);
override OA_STR: u32 = select(CHS, KSTR, KEEP);     // row stride of other A rows
// #if I8
// The scores come from the codes: a chunk stages only V (own B) and dO (other B), for dP.
override OWN_B: u32 = CB;
override OTH_B: u32 = CB + OWNR * CHS;
// #else
override OWN_B: u32 = CB + OWNR * CHS;
override OTH_B: u32 = select(OTH_A + OTHR * CHS, CB + 2u * OWNR * CHS, KEEP);
// #endif
override STAGE_N: u32 = max(OTH_B + OTHR * CHS, select(0u, CB + OTHR * KSTR, STAGE_FULL));
var<workgroup> stage: array<vec4<f32>, STAGE_N>;

const SRC_Q = 0u;
const SRC_K = 1u;
const SRC_V = 2u;
const SRC_DO = 3u;

// vec4 column d4 of row t of batch b, head `head` of a q/dO-shaped (nH heads) or k/v-shaped (nKV)
// tensor; zero past T or past D (a last chunk wider than what is left of D).
fn ldRow4(src: u32, b: u32, t: u32, head: u32, d4: u32) -> vec4<f32> {
  if (t >= p.T || d4 >= DP) { return vec4<f32>(0.0); }
  if (src == SRC_Q) { return q4[((b * p.T + t) * p.nH + head) * DP + d4]; }
  if (src == SRC_DO) { return dO4[((b * p.T + t) * p.nH + head) * DP + d4]; }
  // #if F32
  if (src == SRC_K) { return k4[((b * p.T + t) * p.nKV + head) * DP + d4]; }
  // #endif
  // #if DP8
  return vec4<f32>(0.0);   // V is never staged
  // #else
  return v4[((b * p.T + t) * p.nKV + head) * DP + d4];
  // #endif
}

// Staging. A tile is staged in steps: step c < NCH is vec4 columns c·CH .. c·CH+CH-1 of all four
// operands (CHUNK_ITEMS vec4s), a step >= NCH the full rows of one other operand (FULL_ITEMS). A
// thread fetches items lid + NT·j (j < PFN) of a step from global memory into a Staged value and
// puts them into `stage` after the barrier. PREFETCH fetches the next step before the FMAs on the
// current one (global latency hidden behind them, PFN more live vec4s); without it a step is
// fetched just before the barrier that precedes its put.
override PREFETCH: bool = false;
// #if I8
override CHUNK_ITEMS: u32 = (OWNR + OTHR) * CH;
// #else
override CHUNK_ITEMS: u32 = 2u * (OWNR + OTHR) * CH;
// #endif
override FULL_ITEMS: u32 = OTHR * DP;
override PFN: u32 = (max(CHUNK_ITEMS, FULL_ITEMS) + NT - 1u) / NT;   // <= 8, checked in TS

// Where a tile's rows come from (SRC_* and head per operand): own pair from row own0, other pair from oth0.
struct TileRows { b: u32, ownA: u32, ownB: u32, ownHead: u32, own0: u32, othA: u32, othB: u32, othHead: u32, oth0: u32 }
struct Item { slot: u32, src: u32, head: u32, t: u32, d4: u32 }
struct Staged { x0: vec4<f32>, x1: vec4<f32>, x2: vec4<f32>, x3: vec4<f32>, x4: vec4<f32>, x5: vec4<f32>, x6: vec4<f32>, x7: vec4<f32> }

// Item i of a step (fullSrc: the operand of a full step): its stage index and what to load.
fn stepItem(r: TileRows, step: u32, fullSrc: u32, i: u32) -> Item {
  if (step >= NCH) {
    return Item(CB + (i / DP) * KSTR + i % DP, fullSrc, r.othHead, r.oth0 + i / DP, i % DP);
  }
  let d0 = step * CH;
  // #if I8
  if (i < OWNR * CH) { return Item(OWN_B + (i / CH) * CHS + i % CH, r.ownB, r.ownHead, r.own0 + i / CH, d0 + i % CH); }
  let j = i - OWNR * CH;
  return Item(OTH_B + (j / CH) * CHS + j % CH, r.othB, r.othHead, r.oth0 + j / CH, d0 + j % CH);
  // #endif
  // #if F32
  if (i < 2u * OWNR * CH) {
    let sec = i / (OWNR * CH);
    let j = i % (OWNR * CH);
    return Item(OWN_A + sec * OWNR * CHS + (j / CH) * CHS + j % CH, select(r.ownA, r.ownB, sec == 1u), r.ownHead, r.own0 + j / CH, d0 + j % CH);
  }
  let j = (i - 2u * OWNR * CH) % (OTHR * CH);
  if (i < 2u * OWNR * CH + OTHR * CH) {   // other A: kept rows take the chunk at its D offset
    return Item(OTH_A + (j / CH) * OA_STR + select(0u, d0, KEEP) + j % CH, r.othA, r.othHead, r.oth0 + j / CH, d0 + j % CH);
  }
  return Item(OTH_B + (j / CH) * CHS + j % CH, r.othB, r.othHead, r.oth0 + j / CH, d0 + j % CH);
  // #endif
}

fn stepItems(step: u32) -> u32 { return select(CHUNK_ITEMS, FULL_ITEMS, step >= NCH); }

fn fetchItem(r: TileRows, step: u32, fullSrc: u32, i: u32) -> vec4<f32> {
  if (i >= stepItems(step)) { return vec4<f32>(0.0); }
  let it = stepItem(r, step, fullSrc, i);
  return ldRow4(it.src, r.b, it.t, it.head, it.d4);
}

fn putItem(r: TileRows, step: u32, i: u32, x: vec4<f32>) {
  if (i < stepItems(step)) { stage[stepItem(r, step, 0u, i).slot] = x; }
}

fn noStaged() -> Staged {
  let z = vec4<f32>(0.0);
  return Staged(z, z, z, z, z, z, z, z);
}

fn fetchStep(r: TileRows, step: u32, fullSrc: u32, lid: u32) -> Staged {
  var s = noStaged();
  if (PFN > 0u) { s.x0 = fetchItem(r, step, fullSrc, lid); }
  if (PFN > 1u) { s.x1 = fetchItem(r, step, fullSrc, lid + NT); }
  if (PFN > 2u) { s.x2 = fetchItem(r, step, fullSrc, lid + 2u * NT); }
  if (PFN > 3u) { s.x3 = fetchItem(r, step, fullSrc, lid + 3u * NT); }
  if (PFN > 4u) { s.x4 = fetchItem(r, step, fullSrc, lid + 4u * NT); }
  if (PFN > 5u) { s.x5 = fetchItem(r, step, fullSrc, lid + 5u * NT); }
  if (PFN > 6u) { s.x6 = fetchItem(r, step, fullSrc, lid + 6u * NT); }
  if (PFN > 7u) { s.x7 = fetchItem(r, step, fullSrc, lid + 7u * NT); }
  return s;
}

fn putStep(r: TileRows, step: u32, lid: u32, s: Staged) {
  if (PFN > 0u) { putItem(r, step, lid, s.x0); }
  if (PFN > 1u) { putItem(r, step, lid + NT, s.x1); }
  if (PFN > 2u) { putItem(r, step, lid + 2u * NT, s.x2); }
  if (PFN > 3u) { putItem(r, step, lid + 3u * NT, s.x3); }
  if (PFN > 4u) { putItem(r, step, lid + 4u * NT, s.x4); }
  if (PFN > 5u) { putItem(r, step, lid + 5u * NT, s.x5); }
  if (PFN > 6u) { putItem(r, step, lid + 6u * NT, s.x6); }
  if (PFN > 7u) { putItem(r, step, lid + 7u * NT, s.x7); }
}


@compute @workgroup_size(NT)
fn attn_bwd_dkdv_stream(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let k0 = wid.x * OWNR;   // block 0 sees every query: heaviest first
  // #if DS
  let pair = wid.y + p.pair0;   // (b, KV head) pair: the stored-dS path runs a chunk of them
  // #else
  let pair = wid.y;
  // #endif
  let b = pair / p.nKV;
  let g = pair % p.nKV;
  let to = lid / TS;
  let ts = lid % TS;
  let keys = vec4<u32>(k0 + 4u * to) + vec4<u32>(0u, 1u, 2u, 3u);

  var aK0 = mat4x4<f32>(); var aK1 = mat4x4<f32>(); var aK2 = mat4x4<f32>(); var aK3 = mat4x4<f32>();
  var aV0 = mat4x4<f32>(); var aV1 = mat4x4<f32>(); var aV2 = mat4x4<f32>(); var aV3 = mat4x4<f32>();
  let nQT = (T + OTHR - 1u) / OTHR;
  let qt0 = k0 / OTHR;
  // #if F32
  var rows = TileRows(b, SRC_K, SRC_V, g, k0, SRC_Q, SRC_DO, g * p.G, qt0 * OTHR);
  // #endif
  // #if I8
  var rows = TileRows(b, SRC_V, SRC_V, g, k0, SRC_Q, SRC_DO, g * p.G, qt0 * OTHR);   // own A unused
  putOwnCodes(SRC_K, lid, b, g, k0);
  let sk = ownScales(SRC_K, b, g, keys);
  // #endif
  // #if DP8
  putOwnCodes(SRC_V, lid, b, g, k0);
  let sv = ownScales(SRC_V, b, g, keys);
  // #endif
  var pf = noStaged();
  if (PREFETCH) { pf = fetchStep(rows, FIRST_STEP, SRC_DO, lid); }
  for (var hh = 0u; hh < p.G; hh++) {
    let h = g * p.G + hh;
    let bh = b * p.nH + h;
    for (var qt = qt0; qt < nQT; qt++) {
      let q0 = qt * OTHR;
      rows.othHead = h;
      rows.oth0 = q0;
      // Row statistics first: their loads overlap the score phase.
      let st0 = rowStats(bh, q0 + ts);
      var st1 = vec2<f32>(0.0); var st2 = vec2<f32>(0.0); var st3 = vec2<f32>(0.0);
      if (RS > 1u) { st1 = rowStats(bh, q0 + ts + TS); }
      if (RS > 2u) { st2 = rowStats(bh, q0 + ts + 2u * TS); st3 = rowStats(bh, q0 + ts + 3u * TS); }

      var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
      var dp0 = vec4<f32>(0.0); var dp1 = vec4<f32>(0.0); var dp2 = vec4<f32>(0.0); var dp3 = vec4<f32>(0.0);
      // #if I8
      let qcHere = fetchTileCodes(SRC_Q, lid, b, h, q0);
      // #endif
      // #if DP8
      let ocHere = fetchTileCodes(SRC_DO, lid, b, h, q0);
      workgroupBarrier();   // the previous tile's reads of the codes (and of stage and PT) are done
      putTileCodes(SRC_Q, lid, qcHere);
      putTileCodes(SRC_DO, lid, ocHere);
      workgroupBarrier();
      // #endif
      for (var c = 0u; c < NCH_RUN; c++) {
        if (!PREFETCH) { pf = fetchStep(rows, c, 0u, lid); }
        workgroupBarrier();   // the previous chunk's (or tile's) reads of stage are done
        putStep(rows, c, lid, pf);
        // #if I8
        if (c == 0u) { putTileCodes(SRC_Q, lid, qcHere); }   // the previous tile's score reads are done too
        // #endif
        workgroupBarrier();
        if (PREFETCH) { pf = fetchStep(rows, c + 1u, SRC_DO, lid); }   // after the last chunk: the full dO rows
        for (var c4 = 0u; c4 < CH; c4++) {
          let o = 4u * to * CHS + c4;
          let vm = mat4x4<f32>(stage[OWN_B + o], stage[OWN_B + o + CHS], stage[OWN_B + o + 2u * CHS], stage[OWN_B + o + 3u * CHS]);
          let rb = OTH_B + ts * CHS + c4;
          // #if F32
          let km = mat4x4<f32>(stage[OWN_A + o], stage[OWN_A + o + CHS], stage[OWN_A + o + 2u * CHS], stage[OWN_A + o + 3u * CHS]);
          let ra = OTH_A + ts * OA_STR + select(0u, c * CH, KEEP) + c4;
          s0 += stage[ra] * km;
          if (RS > 1u) { s1 += stage[ra + TS * OA_STR] * km; }
          if (RS > 2u) { s2 += stage[ra + 2u * TS * OA_STR] * km; s3 += stage[ra + 3u * TS * OA_STR] * km; }
          // #endif
          dp0 += stage[rb] * vm;
          if (RS > 1u) { dp1 += stage[rb + TS * CHS] * vm; }
          if (RS > 2u) { dp2 += stage[rb + 2u * TS * CHS] * vm; dp3 += stage[rb + 3u * TS * CHS] * vm; }
        }
      }
      // #if I8
      let kr = 4u * to * CSTR;
      var i0 = dotKeys(ts * CSTR, kr); var i1 = vec4<i32>(0); var i2 = vec4<i32>(0); var i3 = vec4<i32>(0);
      if (RS > 1u) { i1 = dotKeys((ts + TS) * CSTR, kr); }
      if (RS > 2u) { i2 = dotKeys((ts + 2u * TS) * CSTR, kr); i3 = dotKeys((ts + 3u * TS) * CSTR, kr); }
      // The forward's scores bit for bit: f32(acc)·(sq·c2)·sk, in that order.
      s0 = vec4<f32>(i0) * qScaleC2(b, h, q0 + ts) * sk;
      if (RS > 1u) { s1 = vec4<f32>(i1) * qScaleC2(b, h, q0 + ts + TS) * sk; }
      if (RS > 2u) { s2 = vec4<f32>(i2) * qScaleC2(b, h, q0 + ts + 2u * TS) * sk; s3 = vec4<f32>(i3) * qScaleC2(b, h, q0 + ts + 3u * TS) * sk; }
      // #endif
      // #if DP8
      var j0 = dotValues(ts * CSTR, kr); var j1 = vec4<i32>(0); var j2 = vec4<i32>(0); var j3 = vec4<i32>(0);
      if (RS > 1u) { j1 = dotValues((ts + TS) * CSTR, kr); }
      if (RS > 2u) { j2 = dotValues((ts + 2u * TS) * CSTR, kr); j3 = dotValues((ts + 3u * TS) * CSTR, kr); }
      dp0 = vec4<f32>(j0) * oScale(b, h, q0 + ts) * sv;
      if (RS > 1u) { dp1 = vec4<f32>(j1) * oScale(b, h, q0 + ts + TS) * sv; }
      if (RS > 2u) { dp2 = vec4<f32>(j2) * oScale(b, h, q0 + ts + 2u * TS) * sv; dp3 = vec4<f32>(j3) * oScale(b, h, q0 + ts + 3u * TS) * sv; }
      // #endif

      let p0 = probs(s0, vec4<f32>(st0.x), keys, vec4<u32>(q0 + ts));
      let ds0 = p0 * (dp0 - st0.y);
      var p1 = vec4<f32>(0.0); var p2 = vec4<f32>(0.0); var p3 = vec4<f32>(0.0);
      var ds1 = vec4<f32>(0.0); var ds2 = vec4<f32>(0.0); var ds3 = vec4<f32>(0.0);
      if (RS > 1u) { p1 = probs(s1, vec4<f32>(st1.x), keys, vec4<u32>(q0 + ts + TS)); ds1 = p1 * (dp1 - st1.y); }
      if (RS > 2u) {
        p2 = probs(s2, vec4<f32>(st2.x), keys, vec4<u32>(q0 + ts + 2u * TS)); ds2 = p2 * (dp2 - st2.y);
        p3 = probs(s3, vec4<f32>(st3.x), keys, vec4<u32>(q0 + ts + 3u * TS)); ds3 = p3 * (dp3 - st3.y);
      }
      // #if DS
      storeDs4(pair, hh, q0 + ts, keys.x, ds0);
      if (RS > 1u) { storeDs4(pair, hh, q0 + ts + TS, keys.x, ds1); }
      if (RS > 2u) { storeDs4(pair, hh, q0 + ts + 2u * TS, keys.x, ds2); storeDs4(pair, hh, q0 + ts + 3u * TS, keys.x, ds3); }
      // #endif

      if (!PREFETCH) { pf = fetchStep(rows, NCH, SRC_DO, lid); }
      workgroupBarrier();   // chunk reads are done: stage takes the full dO rows, PT takes P
      PT[ts * PSTR + to] = p0;
      if (RS > 1u) { PT[(ts + TS) * PSTR + to] = p1; }
      if (RS > 2u) { PT[(ts + 2u * TS) * PSTR + to] = p2; PT[(ts + 3u * TS) * PSTR + to] = p3; }
      putStep(rows, NCH, lid, pf);
      workgroupBarrier();
      let hasNext = qt + 1u < nQT || hh + 1u < p.G;
      var next = rows;   // the next tile's rows
      next.othHead = select(h + 1u, h, qt + 1u < nQT);
      next.oth0 = select(qt0 * OTHR, q0 + OTHR, qt + 1u < nQT);
      if (!KEEP) { pf = fetchStep(rows, NCH, SRC_Q, lid); }   // prefetched or not: put after the next barrier
      else if (PREFETCH && hasNext) { pf = fetchStep(next, 0u, 0u, lid); }
      // dV += Pᵀ·dO over the tile's query rows.
      for (var m = 0u; m < OTHR; m++) {
        let w = PT[m * PSTR + to];
        let r = CB + m * KSTR + ts;
        if (ts < DP) { aV0 += outer(stage[r], w); }
        if (CS > 1u && ts + TS < DP) { aV1 += outer(stage[r + TS], w); }
        if (CS > 2u && ts + 2u * TS < DP) { aV2 += outer(stage[r + 2u * TS], w); }
        if (CS > 3u && ts + 3u * TS < DP) { aV3 += outer(stage[r + 3u * TS], w); }
      }
      workgroupBarrier();   // P and dO reads are done: PT takes dS, stage the full Q rows
      PT[ts * PSTR + to] = ds0;
      if (RS > 1u) { PT[(ts + TS) * PSTR + to] = ds1; }
      if (RS > 2u) { PT[(ts + 2u * TS) * PSTR + to] = ds2; PT[(ts + 3u * TS) * PSTR + to] = ds3; }
      if (!KEEP) { putStep(rows, NCH, lid, pf); }   // Q rows at 0, where KEEP already has them
      workgroupBarrier();
      if (PREFETCH && !KEEP && hasNext) { pf = fetchStep(next, FIRST_STEP, SRC_DO, lid); }
      // dK += dSᵀ·Q (scale applied at the end).
      for (var m = 0u; m < OTHR; m++) {
        let w = PT[m * PSTR + to];
        let r = m * KSTR + ts;
        if (ts < DP) { aK0 += outer(stage[r], w); }
        if (CS > 1u && ts + TS < DP) { aK1 += outer(stage[r + TS], w); }
        if (CS > 2u && ts + 2u * TS < DP) { aK2 += outer(stage[r + 2u * TS], w); }
        if (CS > 3u && ts + 3u * TS < DP) { aK3 += outer(stage[r + 3u * TS], w); }
      }
    }
  }

  let key0 = k0 + 4u * to;
  if (ts < DP) { putKVColumn4(b, g, key0, ts, aK0, aV0); }
  if (CS > 1u && ts + TS < DP) { putKVColumn4(b, g, key0, ts + TS, aK1, aV1); }
  if (CS > 2u && ts + 2u * TS < DP) { putKVColumn4(b, g, key0, ts + 2u * TS, aK2, aV2); }
  if (CS > 3u && ts + 3u * TS < DP) { putKVColumn4(b, g, key0, ts + 3u * TS, aK3, aV3); }
}

// Gradient column d4 of keys key0..key0+3 (matrix column i = key key0 + i), whole vec4s.
fn putKVColumn4(b: u32, g: u32, key0: u32, d4: u32, aK: mat4x4<f32>, aV: mat4x4<f32>) {
  let base = ((b * p.T + key0) * p.nKV + g) * DP + d4;
  let rowStride = p.nKV * DP;
  if (key0 < p.T) { dk4[base] = aK[0] * p.scale; dv4[base] = aV[0]; }
  if (key0 + 1u < p.T) { dk4[base + rowStride] = aK[1] * p.scale; dv4[base + rowStride] = aV[1]; }
  if (key0 + 2u < p.T) { dk4[base + 2u * rowStride] = aK[2] * p.scale; dv4[base + 2u * rowStride] = aV[2]; }
  if (key0 + 3u < p.T) { dk4[base + 3u * rowStride] = aK[3] * p.scale; dv4[base + 3u * rowStride] = aV[3]; }
// #if DV16
  // dv's f16 copy: vec4 column i4 of dv is f16 pairs 2·i4 and 2·i4 + 1.
  if (key0 < p.T) { dv16_store2(2u * base, aV[0].x, aV[0].y); dv16_store2(2u * base + 1u, aV[0].z, aV[0].w); }
  if (key0 + 1u < p.T) { let i = 2u * (base + rowStride); dv16_store2(i, aV[1].x, aV[1].y); dv16_store2(i + 1u, aV[1].z, aV[1].w); }
  if (key0 + 2u < p.T) { let i = 2u * (base + 2u * rowStride); dv16_store2(i, aV[2].x, aV[2].y); dv16_store2(i + 1u, aV[2].z, aV[2].w); }
  if (key0 + 3u < p.T) { let i = 2u * (base + 3u * rowStride); dv16_store2(i, aV[3].x, aV[3].y); dv16_store2(i + 1u, aV[3].z, aV[3].w); }
// #endif
}

// Gradient column d4 of queries t0..t0+3 of head h (matrix column i = query t0 + i), whole vec4s.
fn putQColumn4(b: u32, h: u32, t0: u32, d4: u32, a: mat4x4<f32>) {
  let base = ((b * p.T + t0) * p.nH + h) * DP + d4;
  let rowStride = p.nH * DP;
  if (t0 < p.T) { dq4[base] = a[0] * p.scale; }
  if (t0 + 1u < p.T) { dq4[base + rowStride] = a[1] * p.scale; }
  if (t0 + 2u < p.T) { dq4[base + 2u * rowStride] = a[2] * p.scale; }
  if (t0 + 3u < p.T) { dq4[base + 3u * rowStride] = a[3] * p.scale; }
}

// #if F32
@compute @workgroup_size(NT)
fn attn_bwd_dq_stream(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + OWNR - 1u) / OWNR;
  let q0 = (nQB - 1u - wid.x) * OWNR;   // heaviest causal block first
  let bh = wid.y;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let to = lid / TS;
  let ts = lid % TS;

  let t0 = q0 + 4u * to;
  let queries = vec4<u32>(t0) + vec4<u32>(0u, 1u, 2u, 3u);
  let st0 = rowStats(bh, t0);
  let st1 = rowStats(bh, t0 + 1u);
  let st2 = rowStats(bh, t0 + 2u);
  let st3 = rowStats(bh, t0 + 3u);
  let lse2 = vec4<f32>(st0.x, st1.x, st2.x, st3.x);
  let di = vec4<f32>(st0.y, st1.y, st2.y, st3.y);

  var aQ0 = mat4x4<f32>(); var aQ1 = mat4x4<f32>(); var aQ2 = mat4x4<f32>(); var aQ3 = mat4x4<f32>();
  let nKB = (min(T, q0 + OWNR) + OTHR - 1u) / OTHR;
  var rows = TileRows(b, SRC_Q, SRC_DO, h, q0, SRC_K, SRC_V, g, 0u);
  var pf = noStaged();
  if (PREFETCH) { pf = fetchStep(rows, 0u, 0u, lid); }
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * OTHR;
    rows.oth0 = k0;
    var s0 = vec4<f32>(0.0); var s1 = vec4<f32>(0.0); var s2 = vec4<f32>(0.0); var s3 = vec4<f32>(0.0);
    var dp0 = vec4<f32>(0.0); var dp1 = vec4<f32>(0.0); var dp2 = vec4<f32>(0.0); var dp3 = vec4<f32>(0.0);
    for (var c = 0u; c < NCH; c++) {
      if (!PREFETCH) { pf = fetchStep(rows, c, 0u, lid); }
      workgroupBarrier();   // the previous chunk's (or tile's) reads of stage and PT are done
      putStep(rows, c, lid, pf);
      workgroupBarrier();
      if (PREFETCH) {
        if (c + 1u < NCH || !KEEP) { pf = fetchStep(rows, c + 1u, SRC_K, lid); }   // after the last chunk: the full K rows
        else if (kb + 1u < nKB) { var next = rows; next.oth0 = k0 + OTHR; pf = fetchStep(next, 0u, 0u, lid); }
      }
      for (var c4 = 0u; c4 < CH; c4++) {
        let o = 4u * to * CHS + c4;
        let qm = mat4x4<f32>(stage[OWN_A + o], stage[OWN_A + o + CHS], stage[OWN_A + o + 2u * CHS], stage[OWN_A + o + 3u * CHS]);
        let om = mat4x4<f32>(stage[OWN_B + o], stage[OWN_B + o + CHS], stage[OWN_B + o + 2u * CHS], stage[OWN_B + o + 3u * CHS]);
        let ra = OTH_A + ts * OA_STR + select(0u, c * CH, KEEP) + c4;
        let rb = OTH_B + ts * CHS + c4;
        s0 += stage[ra] * qm; dp0 += stage[rb] * om;
        if (RS > 1u) { s1 += stage[ra + TS * OA_STR] * qm; dp1 += stage[rb + TS * CHS] * om; }
        if (RS > 2u) {
          s2 += stage[ra + 2u * TS * OA_STR] * qm; dp2 += stage[rb + 2u * TS * CHS] * om;
          s3 += stage[ra + 3u * TS * OA_STR] * qm; dp3 += stage[rb + 3u * TS * CHS] * om;
        }
      }
    }

    // Unless K is kept: stage takes the full K rows once the chunk reads are done. PT's last reads
    // were the previous tile's, before this tile's chunk barriers.
    if (!KEEP) {
      if (!PREFETCH) { pf = fetchStep(rows, NCH, SRC_K, lid); }
      workgroupBarrier();
    }
    PT[ts * PSTR + to] = probs(s0, lse2, vec4<u32>(k0 + ts), queries) * (dp0 - di);
    if (RS > 1u) { PT[(ts + TS) * PSTR + to] = probs(s1, lse2, vec4<u32>(k0 + ts + TS), queries) * (dp1 - di); }
    if (RS > 2u) {
      PT[(ts + 2u * TS) * PSTR + to] = probs(s2, lse2, vec4<u32>(k0 + ts + 2u * TS), queries) * (dp2 - di);
      PT[(ts + 3u * TS) * PSTR + to] = probs(s3, lse2, vec4<u32>(k0 + ts + 3u * TS), queries) * (dp3 - di);
    }
    if (!KEEP) { putStep(rows, NCH, lid, pf); }
    workgroupBarrier();
    if (PREFETCH && !KEEP && kb + 1u < nKB) {   // chunk 0 of the next tile
      var next = rows;
      next.oth0 = k0 + OTHR;
      pf = fetchStep(next, 0u, 0u, lid);
    }
    // dQ += dS·K (scale applied at the end).
    for (var n = 0u; n < OTHR; n++) {
      let w = PT[n * PSTR + to];
      let r = n * KSTR + ts;
      if (ts < DP) { aQ0 += outer(stage[r], w); }
      if (CS > 1u && ts + TS < DP) { aQ1 += outer(stage[r + TS], w); }
      if (CS > 2u && ts + 2u * TS < DP) { aQ2 += outer(stage[r + 2u * TS], w); }
      if (CS > 3u && ts + 3u * TS < DP) { aQ3 += outer(stage[r + 3u * TS], w); }
    }
  }

  if (ts < DP) { putQColumn4(b, h, t0, ts, aQ0); }
  if (CS > 1u && ts + TS < DP) { putQColumn4(b, h, t0, ts + TS, aQ1); }
  if (CS > 2u && ts + 2u * TS < DP) { putQColumn4(b, h, t0, ts + 2u * TS, aQ2); }
  if (CS > 3u && ts + 3u * TS < DP) { putQColumn4(b, h, t0, ts + 3u * TS, aQ3); }
}
// #endif
