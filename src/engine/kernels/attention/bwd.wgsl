// Causal grouped-query attention, backward (flash-attention style: P rebuilt from q, k and lse).
// Legend: B batch, T sequence, nH query heads, nKV KV heads, G = nH/nKV, D head dim (even),
// BM queries per tile, BN keys per tile, NT threads.
// q, o, dO, dq: [B, T, nH, D]; k, v, dk, dv: [B, T, nKV, D]; lse, Di: [B, nH, T].
// Three passes, none with atomics, so results are bit-identical run to run:
//   attn_bwd_di:   Di = rowsum(dO∘O)
//   attn_bwd_dq:   one workgroup per (query block, b·nH + h) loops over key tiles: dq = scale·dS·K
//   attn_bwd_dkdv: one workgroup per (key block, b·nKV + g) loops over the G query heads of KV head
//                  g and their query tiles in a fixed order: dk = scale·Σ dSᵀ·Q, dv = Σ Pᵀ·dO
// with P = exp(s − lse), dS = P∘(dO·Vᵀ − Di). Rows are vec4s with D zero-padded to DP·4.
// nRows = B·nH·T (the Di pass's extent).
// DV16: the dk/dv kernels also write dv's f16 copy (dv16_store2, matmul-f16/cast.ts f16OutWgsl), what
// v_proj's f16 dX and dW GEMMs read.
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, nRows: u32, pair0: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> dO: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> Di: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;   // attn_bwd_dq
@group(0) @binding(7) var<storage, read_write> dk: array<f32>;   // attn_bwd_dkdv
@group(0) @binding(8) var<storage, read_write> dv: array<f32>;   // attn_bwd_dkdv

// attn_bwd_di bindings (its own entry point interface).
@group(0) @binding(0) var<storage, read> di_o: array<f32>;
@group(0) @binding(1) var<storage, read> di_dO: array<f32>;
@group(0) @binding(2) var<storage, read_write> di_out: array<f32>;
@group(0) @binding(3) var<uniform> di_p: Params;

override D: u32;
override BM: u32 = 32u;
override BN: u32 = 32u;
override NT: u32 = 256u;
override DP: u32 = (D + 3u) / 4u;
override KSTR: u32 = DP | 1u;        // odd vec4 row stride: neighbouring rows on different banks
// dq pass: thread (r = lid / TPR, kk = lid % TPR) owns query row r.
override TPR: u32 = NT / BM;
override CPT: u32 = BN / TPR;
override OPT: u32 = (DP + TPR - 1u) / TPR;
// dkdv pass: thread (n = lid / TPK, kk = lid % TPK) owns key row n.
override TPK: u32 = NT / BN;
override CPQ: u32 = BM / TPK;
override OPK: u32 = (DP + TPK - 1u) / TPK;
override SSTR: u32 = BN + 1u;
override PSTR: u32 = BM + 1u;
override QS_N: u32 = BM * KSTR;
override KS_N: u32 = BN * KSTR;
override SS_N: u32 = BM * SSTR;
override PS_N: u32 = BN * PSTR;

// Register arrays need const sizes; the override bounds (CPT/CPQ, OPT/OPK) are checked against
// these in TS. Loop-local arrays are zeroed explicitly each tile: Dawn/SwiftShader was seen not to
// redo a loop-local var's implicit zero-init on every iteration.
const MAXC = 16u;
const MAXO = 8u;
const LOG2E = 1.4426950408889634;

var<workgroup> Qs: array<vec4<f32>, QS_N>;
var<workgroup> dOs: array<vec4<f32>, QS_N>;
var<workgroup> Ks: array<vec4<f32>, KS_N>;
var<workgroup> Vs: array<vec4<f32>, KS_N>;
var<workgroup> Ss: array<f32, SS_N>;     // dq: dS [BM, BN]
var<workgroup> Ps: array<f32, PS_N>;     // dkdv: P transposed [BN, BM]
var<workgroup> dSs: array<f32, PS_N>;    // dkdv: dS transposed [BN, BM]
var<workgroup> rowL: array<f32, BM>;     // dkdv: lse·log2 e of the query tile
var<workgroup> rowD: array<f32, BM>;     // dkdv: Di of the query tile

// ldQ, ldK, ldV, ldDO (vec4 loads of a head row) come from attention-load.wgsl.

// Sixteen invocations per (b, t, h) head row, rows in memory order ((b·T + t)·nH + h), 16 rows per
// workgroup; grid (x, y) flattened. Lane l sums d = l, l + 16, …, so each load instruction of a warp
// reads two rows' 64 contiguous bytes (one invocation per row read 32 rows 256 B apart per
// instruction, which was memory-latency bound), then a fixed tree adds the 16 lanes:
// Di is deterministic.
var<workgroup> diRed: array<f32, 256>;

@compute @workgroup_size(256)
fn attn_bwd_di(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = (wid.x + wid.y * nwg.x) * 16u + lid / 16u;   // (b·T + t)·nH + h
  let lane = lid % 16u;
  let T = di_p.T;
  let nH = di_p.nH;
  var acc = 0.0;
  if (i < di_p.nRows) {
    let base = i * D;
    for (var d = lane; d < D; d += 16u) { acc += di_dO[base + d] * di_o[base + d]; }
  }
  diRed[lid] = acc;
  workgroupBarrier();
  for (var s = 8u; s > 0u; s = s >> 1u) {
    if (lane < s) { diRed[lid] = diRed[lid] + diRed[lid + s]; }
    workgroupBarrier();
  }
  if (lane == 0u && i < di_p.nRows) {
    let bt = i / nH;
    di_out[((bt / T) * nH + i % nH) * T + bt % T] = diRed[lid];   // Di is [b, h, t]
  }
}

@compute @workgroup_size(NT)
fn attn_bwd_dq(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let nQB = (T + BM - 1u) / BM;
  let q0 = (nQB - 1u - wid.x) * BM;   // heaviest causal block first
  let bh = wid.y;
  let b = bh / p.nH;
  let h = bh % p.nH;
  let g = h / p.G;
  let r = lid / TPR;
  let kk = lid % TPR;
  let tq = q0 + r;

  for (var i = lid; i < BM * DP; i += NT) {
    let rr = i / DP;
    let d4 = i % DP;
    var qv = vec4<f32>(0.0);
    var ov = vec4<f32>(0.0);
    if (q0 + rr < T) {
      let base = ((b * T + q0 + rr) * p.nH + h) * D;
      qv = ldQ(base, 4u * d4);
      ov = ldDO(base, 4u * d4);
    }
    Qs[rr * KSTR + d4] = qv;
    dOs[rr * KSTR + d4] = ov;
  }
  var lse2 = 0.0;
  var di = 0.0;
  if (tq < T) {
    lse2 = lse[bh * T + tq] * LOG2E;
    di = Di[bh * T + tq];
  }

  var acc: array<vec4<f32>, MAXO>;
  let nKB = (min(T, q0 + BM) + BN - 1u) / BN;
  for (var kb = 0u; kb < nKB; kb++) {
    let k0 = kb * BN;
    workgroupBarrier();   // previous tile's K reads are done
    for (var i = lid; i < BN * DP; i += NT) {
      let j = i / DP;
      let d4 = i % DP;
      var kv = vec4<f32>(0.0);
      var vv = vec4<f32>(0.0);
      if (k0 + j < T) {
        let base = ((b * T + k0 + j) * p.nKV + g) * D;
        kv = ldK(base, 4u * d4);
        vv = ldV(base, 4u * d4);
      }
      Ks[j * KSTR + d4] = kv;
      Vs[j * KSTR + d4] = vv;
    }
    workgroupBarrier();

    var s: array<f32, MAXC>;
    var dp: array<f32, MAXC>;
    for (var i = 0u; i < CPT; i++) { s[i] = 0.0; dp[i] = 0.0; }
    for (var d4 = 0u; d4 < DP; d4++) {
      let qv = Qs[r * KSTR + d4];
      let ov = dOs[r * KSTR + d4];
      for (var i = 0u; i < CPT; i++) {
        let c = (kk + TPR * i) * KSTR + d4;
        s[i] += dot(qv, Ks[c]);
        dp[i] += dot(ov, Vs[c]);
      }
    }
    for (var i = 0u; i < CPT; i++) {
      let c = kk + TPR * i;
      let key = k0 + c;
      // select, not multiply: exp2 of a masked score may be inf, and inf·0 would be NaN.
      let pv = select(exp2(s[i] * p.c2 - lse2), 0.0, key > tq || key >= T);
      Ss[r * SSTR + c] = pv * (dp[i] - di);
    }
    workgroupBarrier();

    for (var j = 0u; j < BN; j++) {
      let ds = Ss[r * SSTR + j];
      for (var i = 0u; i < OPT; i++) {
        let d4 = kk + TPR * i;
        if (d4 < DP) { acc[i] += ds * Ks[j * KSTR + d4]; }
      }
    }
  }

  if (tq < T) {
    let base = ((b * T + tq) * p.nH + h) * D;
    for (var i = 0u; i < OPT; i++) {
      let d = 4u * (kk + TPR * i);
      let val = acc[i] * p.scale;
      if (d < D) { dq[base + d] = val.x; dq[base + d + 1u] = val.y; }
      if (d + 2u < D) { dq[base + d + 2u] = val.z; dq[base + d + 3u] = val.w; }
    }
  }
}

@compute @workgroup_size(NT)
fn attn_bwd_dkdv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let T = p.T;
  let k0 = wid.x * BN;   // block 0 sees every query: heaviest first
  // #if DS
  let bg = wid.y + p.pair0;   // (b, KV head) pair: the stored-dS path runs a chunk of them
  // #else
  let bg = wid.y;
  // #endif
  let b = bg / p.nKV;
  let g = bg % p.nKV;
  let n = lid / TPK;
  let kk = lid % TPK;
  let key = k0 + n;

  for (var i = lid; i < BN * DP; i += NT) {
    let j = i / DP;
    let d4 = i % DP;
    var kv = vec4<f32>(0.0);
    var vv = vec4<f32>(0.0);
    if (k0 + j < T) {
      let base = ((b * T + k0 + j) * p.nKV + g) * D;
      kv = ldK(base, 4u * d4);
      vv = ldV(base, 4u * d4);
    }
    Ks[j * KSTR + d4] = kv;
    Vs[j * KSTR + d4] = vv;
  }

  var accK: array<vec4<f32>, MAXO>;
  var accV: array<vec4<f32>, MAXO>;
  let nQT = (T + BM - 1u) / BM;
  for (var hh = 0u; hh < p.G; hh++) {
    let h = g * p.G + hh;
    let bh = b * p.nH + h;
    for (var qt = k0 / BM; qt < nQT; qt++) {
      let q0 = qt * BM;
      workgroupBarrier();   // previous tile's Q/dO/P reads are done
      for (var i = lid; i < BM * DP; i += NT) {
        let rr = i / DP;
        let d4 = i % DP;
        var qv = vec4<f32>(0.0);
        var ov = vec4<f32>(0.0);
        if (q0 + rr < T) {
          let base = ((b * T + q0 + rr) * p.nH + h) * D;
          qv = ldQ(base, 4u * d4);
          ov = ldDO(base, 4u * d4);
        }
        Qs[rr * KSTR + d4] = qv;
        dOs[rr * KSTR + d4] = ov;
      }
      for (var i = lid; i < BM; i += NT) {
        var lv = 0.0;
        var dv0 = 0.0;
        if (q0 + i < T) {
          lv = lse[bh * T + q0 + i] * LOG2E;
          dv0 = Di[bh * T + q0 + i];
        }
        rowL[i] = lv;
        rowD[i] = dv0;
      }
      workgroupBarrier();

      var s: array<f32, MAXC>;
      var dp: array<f32, MAXC>;
      for (var i = 0u; i < CPQ; i++) { s[i] = 0.0; dp[i] = 0.0; }
      for (var d4 = 0u; d4 < DP; d4++) {
        let kv = Ks[n * KSTR + d4];
        let vv = Vs[n * KSTR + d4];
        for (var i = 0u; i < CPQ; i++) {
          let c = (kk + TPK * i) * KSTR + d4;
          s[i] += dot(Qs[c], kv);
          dp[i] += dot(dOs[c], vv);
        }
      }
      for (var i = 0u; i < CPQ; i++) {
        let mq = kk + TPK * i;
        let tq = q0 + mq;
        let pv = select(exp2(s[i] * p.c2 - rowL[mq]), 0.0, key > tq || tq >= T || key >= T);
        Ps[n * PSTR + mq] = pv;
        dSs[n * PSTR + mq] = pv * (dp[i] - rowD[mq]);
        // #if DS
        storeDs1(bg, hh, tq, key, dSs[n * PSTR + mq]);
        // #endif
      }
      workgroupBarrier();

      for (var mq = 0u; mq < BM; mq++) {
        let pm = Ps[n * PSTR + mq];
        let dm = dSs[n * PSTR + mq];
        for (var i = 0u; i < OPK; i++) {
          let d4 = kk + TPK * i;
          if (d4 < DP) {
            accV[i] += pm * dOs[mq * KSTR + d4];
            accK[i] += dm * Qs[mq * KSTR + d4];
          }
        }
      }
    }
  }

  if (key < T) {
    let base = ((b * T + key) * p.nKV + g) * D;
    for (var i = 0u; i < OPK; i++) {
      let d = 4u * (kk + TPK * i);
      let kval = accK[i] * p.scale;
      let vval = accV[i];
      if (d < D) {
        dk[base + d] = kval.x; dk[base + d + 1u] = kval.y;
        dv[base + d] = vval.x; dv[base + d + 1u] = vval.y;
      }
      if (d + 2u < D) {
        dk[base + d + 2u] = kval.z; dk[base + d + 3u] = kval.w;
        dv[base + d + 2u] = vval.z; dv[base + d + 3u] = vval.w;
      }
// #if DV16
      if (d < D) { dv16_store2((base + d) / 2u, vval.x, vval.y); }
      if (d + 2u < D) { dv16_store2((base + d) / 2u + 1u, vval.z, vval.w); }
// #endif
    }
  }
}
