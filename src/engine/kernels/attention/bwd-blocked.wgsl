// Shared part of the register-blocked backward: legend, bindings, tile overrides, workgroup tiles
// and the P/dS helpers. attention.ts appends attention-bwd-blocked-resident.wgsl (attn_bwd_*_blocked)
// and attention-bwd-blocked-stream.wgsl (attn_bwd_*_stream) to it: one shader, one text for all four.
//
// Causal grouped-query attention, backward dQ and dK/dV passes, register-blocked (flash-attention-2
// style). Same bindings, layouts and results as attn_bwd_dq / attn_bwd_dkdv in attention-bwd.wgsl,
// whose attn_bwd_di pass still provides Di = rowsum(dO∘O); see that file for the legend.
//
// Each pass keeps the rows of one operand pair for the workgroup's whole life and writes their
// gradient ("own": dkdv the OWNR = BN keys of K and V, dq the OWNR = BM queries of Q and dO), and
// streams the other pair tile by tile ("other": dkdv OTHR = BM rows of Q and dO for each of the G
// query heads of the KV head in a fixed order, so sums are bit-identical run to run; dq OTHR = BN
// rows of K and V up to the diagonal).
//
// Thread (to = lid / TS, ts = lid % TS) owns own rows 4·to .. 4·to+3 and other rows ts + TS·j
// (j < RS) of every score-shaped tile, with the 4 own rows packed in one vec4:
//   dkdv  s_j = q_j·Km  (Km = the 4 key rows as matrix columns), dp_j = dO_j·Vm
//   dq    s_j = k_j·Qm, dp_j = v_j·dOm
// so a d4 step loads 8 own vec4s (broadcasts: few distinct `to` per warp) and 2·RS other vec4s
// (neighbouring lanes read neighbouring rows; odd KSTR puts them on different banks) for 32·RS FMAs.
// P = exp2(s·c2 − lse·log2 e) and dS = P∘(dp − Di) go through PT (other-row-major, one vec4 of 4
// own rows per entry), and the thread accumulates its own rows × vec4 columns ts + TS·c (c < CS)
// of each gradient: one PT vec4 and CS other vec4s per other row for 16·CS FMAs. dkdv holds P
// (for dV) and then dS (for dK) in the same PT, two barriers more per tile but one tile less of
// workgroup memory, which is what bounds the tile sizes (fp32 rows of D 64: BM + BN <= 80 in 48 KiB).
//
// Register blocks are named vec4 / mat4x4 variables indexed only by constants, and every RS / CS
// branch tests an override, so nothing can spill to local memory whether or not the driver
// unrolls. RS ∈ {1, 2, 4} and CS ≤ 4 are checked in TS (attentionTileProblem).
struct Params { T: u32, nH: u32, nKV: u32, G: u32, scale: f32, c2: f32, nRows: u32, pair0: u32 }

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read> dO: array<f32>;
@group(0) @binding(4) var<storage, read> lse: array<f32>;
@group(0) @binding(5) var<storage, read> Di: array<f32>;
@group(0) @binding(6) var<uniform> p: Params;
@group(0) @binding(7) var<storage, read_write> dq: array<f32>;   // attn_bwd_dq_blocked
@group(0) @binding(7) var<storage, read_write> dk: array<f32>;   // attn_bwd_dkdv_blocked
@group(0) @binding(8) var<storage, read_write> dv: array<f32>;   // attn_bwd_dkdv_blocked

override D: u32;
override OWNR: u32 = 32u;
override OTHR: u32 = 32u;
override NT: u32 = 64u;
override DP: u32 = (D + 3u) / 4u;
override KSTR: u32 = DP | 1u;         // odd vec4 row stride
override TO: u32 = OWNR / 4u;         // threads along own rows
override TS: u32 = NT / TO;           // threads along other rows
override RS: u32 = OTHR / TS;         // other rows per thread
override CS: u32 = (DP + TS - 1u) / TS; // gradient vec4 columns per thread
override PSTR: u32 = TO | 1u;         // odd: score-phase stores of neighbouring ts on different banks
override OWN_N: u32 = OWNR * KSTR;
override OTH_N: u32 = OTHR * KSTR;
override PT_N: u32 = OTHR * PSTR;

const LOG2E = 1.4426950408889634;

var<workgroup> ownA: array<vec4<f32>, OWN_N>;   // dkdv K, dq Q
var<workgroup> ownB: array<vec4<f32>, OWN_N>;   // dkdv V, dq dO
var<workgroup> othA: array<vec4<f32>, OTH_N>;   // dkdv Q, dq K
var<workgroup> othB: array<vec4<f32>, OTH_N>;   // dkdv dO, dq V
var<workgroup> PT: array<vec4<f32>, PT_N>;      // P or dS: [other row][to] → 4 own rows

// ldQ, ldK, ldV and ldDO come from attention-load.wgsl.

// (lse·log2 e, Di) of query row t of head row bh; zero past T (such rows are masked anyway).
fn rowStats(bh: u32, t: u32) -> vec2<f32> {
  if (t >= p.T) { return vec2<f32>(0.0); }
  return vec2<f32>(lse[bh * p.T + t] * LOG2E, Di[bh * p.T + t]);
}

// P of 4 scores against their lse (log2 domain); select, not multiply: exp2 of a masked score may be
// inf, and inf·0 would be NaN. Masked: the key is after the query, or either is past T.
fn probs(s: vec4<f32>, lse2: vec4<f32>, keys: vec4<u32>, queries: vec4<u32>) -> vec4<f32> {
  let T = vec4<u32>(p.T);
  // #if I8
  let x = s - lse2;   // INT8 scores carry c2 in their scale
  // #else
  let x = s * p.c2 - lse2;
  // #endif
  return select(exp2(x), vec4<f32>(0.0), (keys > queries) | (keys >= T) | (queries >= T));
}

// Column i of the result is w[i]·x: the contribution of other row x to own row i.
fn outer(x: vec4<f32>, w: vec4<f32>) -> mat4x4<f32> {
  return mat4x4<f32>(x * w.x, x * w.y, x * w.z, x * w.w);
}
