// Operand sections for qgemm-f32.wgsl (see its header); src/engine/kernels/qgemm.ts picks one
// `w_*` and one `out_*` section (split at the `//--- name` lines). Needs the codec snippet.

//--- w_f32
// W [N, K] fp32, read as vec4 (K % 4 == 0).
@group(0) @binding(@W) var<storage, read> W: array<vec4<f32>>;
fn load_w_tile(n0: u32, k0: u32, lid: u32) {
  for (var l = lid; l < BN * BK / 4u; l += WG) {
    let r = l / (BK / 4u);
    let c = (l % (BK / 4u)) * 4u;
    var v = vec4<f32>(0.0);
    if (n0 + r < P.N && k0 + c < P.K) { v = W[((n0 + r) * P.K + k0 + c) / 4u]; }
    for (var e = 0u; e < 4u; e++) { ws_set(c + e, r, v[e]); }
  }
}

//--- w_q
// W [N, K] as codes packed along K (pack.ts layout per row: K/CPW words, K % CPW == 0) and
// fp32 scales WS [N, KG], group g of row n covering k ∈ [g·GW, (g+1)·GW). GW % CPW == 0, so a
// word never straddles two groups. FMT = FORMAT_ID of src/engine/quant/formats.ts (3 INT4 and
// 4 NF4 pack 8 nibbles a word; NF4 decodes through its table, codec.wgsl nf4_decode).
override FMT: u32 = 2u;
override GW: u32 = 128u;
override CPW: u32 = select(4u, 8u, FMT >= 3u);
@group(0) @binding(@W) var<storage, read> WQ: array<u32>;
@group(0) @binding(@WS) var<storage, read> WS: array<f32>;

fn w_decode(w: u32, e: u32) -> f32 {
  switch (FMT) {
    case 0u: { return e4m3_decode(get_byte(w, e)); }
    case 1u: { return e5m2_decode(get_byte(w, e)); }
    case 2u: { return int8_decode(get_byte(w, e)); }
    case 3u: { return int4_decode(get_nibble(w, e)); }
    default: { return nf4_decode(get_nibble(w, e)); }
  }
}

// One word (4 bytes or 8 nibbles) per step, unpacked and scaled in registers, stored k-major.
fn load_w_tile(n0: u32, k0: u32, lid: u32) {
  let kw = P.K / CPW;
  for (var l = lid; l < BN * (BK / CPW); l += WG) {
    let r = l / (BK / CPW);
    let c = (l % (BK / CPW)) * CPW;
    let k = k0 + c;
    if (n0 + r < P.N && k < P.K) {
      let w = WQ[(n0 + r) * kw + k / CPW];
      let s = WS[(n0 + r) * P.KG + k / GW];
      for (var e = 0u; e < CPW; e++) { ws_set(c + e, r, w_decode(w, e) * s); }
    } else {
      for (var e = 0u; e < CPW; e++) { ws_set(c + e, r, 0.0); }
    }
  }
}

//--- out_f32
// ACC 1: C += the product (QLoRA's o/down projections add onto the residual), 0: C = the product.
override ACC: u32 = 0u;
@group(0) @binding(@C) var<storage, read_write> C: array<f32>;
fn store_out(acc: ptr<function, array<vec4<f32>, 16>>, r0: u32, c0: u32, tx: u32, ty: u32) {
  for (var i = 0u; i < TM; i++) {
    let row = r0 + i;
    if (row >= P.M) { continue; }
    for (var h = 0u; h < TN / 4u; h++) {
      for (var e = 0u; e < 4u; e++) {
        let col = c0 + 4u * h + e;
        if (col < P.N) {
          let v = (*acc)[i * (TN / 4u) + h][e];
          C[row * P.N + col] = select(v, C[row * P.N + col] + v, ACC != 0u);
        }
      }
    }
  }
}

//--- out_q
// C quantized along N in groups of GQ per row (activation storage), quantizer.ts semantics:
// s = fp32(max|c| / QMAX) (0 if max < 2^-110), code = int_encode(fp32(c / s)); non-finite c are
// left out of the max and get code 0. Codes CQ [M, N/OCPW words] (N % OCPW == 0), scales
// CS [M, NG]. A group is GQ/TN threads of one tile row (BN % GQ == 0, GQ % TN == 0): each posts
// its partial max to workgroup memory, then every thread of the group reads the GQ/TN partials.
override OBITS: u32 = 8u;
override GQ: u32 = 64u;
override OCPW: u32 = 32u / OBITS;
override QMAX: f32 = select(127.0, 7.0, OBITS == 4u);
override PM_LEN: u32 = BM * (BN / TN);
@group(0) @binding(@C) var<storage, read_write> CQ: array<u32>;
@group(0) @binding(@CS) var<storage, read_write> CS: array<f32>;
var<workgroup> pmax: array<f32, PM_LEN>;

fn store_out(acc: ptr<function, array<vec4<f32>, 16>>, r0: u32, c0: u32, tx: u32, ty: u32) {
  // Copy first, in a loop small enough to unroll: the loops below are not, and indexing acc from
  // them would demote it to local memory for the whole kernel (an order of magnitude slower).
  var cv: array<f32, 64>;   // cv[i*TN + j] = C(row r0+i, col c0+j)
  for (var i = 0u; i < TM; i++) {
    for (var h = 0u; h < TN / 4u; h++) {
      let v = (*acc)[i * (TN / 4u) + h];
      for (var e = 0u; e < 4u; e++) { cv[i * TN + 4u * h + e] = v[e]; }
    }
  }
  let FMAX = 3.4028234663852886e38;
  for (var i = 0u; i < TM; i++) {
    var m = 0.0;
    for (var j = 0u; j < TN; j++) {
      let a = abs(cv[i * TN + j]);
      if (c0 + j < P.N && a > m && a <= FMAX) { m = a; }
    }
    pmax[(ty * TM + i) * (BN / TN) + tx] = m;
  }
  workgroupBarrier();
  let tpg = GQ / TN;
  let t0 = tx - tx % tpg;
  for (var i = 0u; i < TM; i++) {
    let row = r0 + i;
    var m = 0.0;
    for (var j = 0u; j < tpg; j++) { m = max(m, pmax[(ty * TM + i) * (BN / TN) + t0 + j]); }
    var s = 0.0;
    if (m >= 7.703719777548943e-34) { s = div_rn(m, QMAX); }   // 2^-110
    let inv = int_inv(s);
    if (row >= P.M) { continue; }
    for (var wd = 0u; wd < TN / OCPW; wd++) {
      let col0 = c0 + wd * OCPW;
      if (col0 >= P.N) { break; }
      var w = 0u;
      for (var e = 0u; e < OCPW; e++) {
        let v = cv[i * TN + wd * OCPW + e];
        var code = 0u;
        if (s != 0.0 && abs(v) <= FMAX) { code = int_code_nearest(v, s, inv, QMAX); }
        w |= code << (OBITS * e);
      }
      CQ[(row * P.N + col0) / OCPW] = w;
    }
    if (tx == t0 && c0 < P.N) { CS[row * P.NG + c0 / GQ] = s; }
  }
}
