// The INT8 dK/dV kernel's code rows (attention-i8.ts appends this file to attention-bwd-blocked-stream.wgsl
// for its I8 variants): bindings, workgroup arrays and helpers of the `// #if I8` blocks there.

// I8 (attention-i8.ts; the dK/dV pass with stored dS only): S from Q's and K's INT8 codes per
// (token, head) row as the INT8-score forward computes it, so P matches its lse bit for bit; dP, dV
// and dK stay fp32. The chunks stage only V and dO (for dP; no KEEP), K's codes stay resident, Q's
// are staged per tile beside the first chunk, and S comes after the chunk loop, per thread with dot4I8Packed.
// Each code buffer holds its rows' codes and then their scales, from word scaleBase(rows)
// (attention-i8.ts headCodesLayout): one binding each, as the bindings per stage are few (12 on SwiftShader).
@group(0) @binding(1) var<storage, read> kcw: array<u32>;
@group(0) @binding(10) var<storage, read> qcw: array<u32>;
fn scaleBase(rows: u32) -> u32 { return (rows * DW + 63u) / 64u * 64u; }
override DW: u32 = D / 4u;                  // code words of a head row
override CSTR: u32 = DW | 1u;               // staged code row stride in words (odd)
override QPT: u32 = (OTHR * DW + NT - 1u) / NT;   // Q code words per thread and tile (<= 4)
var<workgroup> KcO: array<i32, OWNR * CSTR>;      // the own keys' codes
var<workgroup> QcT: array<i32, OTHR * CSTR>;      // the tile's query codes
// DP8 (I8 too; compute.attention_dp 'int8'): dP = dO·Vᵀ from dO's and V's INT8 codes per (token,
// head) row as well, f32(acc)·s_dO·s_V (codes then scales, as Q's and K's). No chunks are staged at
// all: V's codes stay resident beside K's, dO's are staged per tile beside Q's, fp32 V is not read.
// #if DP8
@group(0) @binding(2) var<storage, read> vcs: array<u32>;
@group(0) @binding(11) var<storage, read> ocs: array<u32>;
var<workgroup> VcO: array<i32, OWNR * CSTR>;      // the own values' codes
var<workgroup> OcT: array<i32, OTHR * CSTR>;      // the tile's dO codes
// #endif

// Code word i of a key-shaped tensor: K's (SRC_K) or, with DP8, V's (SRC_V).
fn ownWord(src: u32, i: u32) -> u32 {
  // #if DP8
  if (src == SRC_V) { return vcs[i]; }
  // #endif
  return kcw[i];
}

// The own rows' codes (keys k0 .. k0+OWNR-1 of KV head g) into KcO (K) or VcO (V); 0 past T.
fn putOwnCodes(src: u32, lid: u32, b: u32, g: u32, k0: u32) {
  for (var i = lid; i < OWNR * DW; i += NT) {
    let key = k0 + i / DW;
    var w = 0u;
    if (key < p.T) { w = ownWord(src, ((b * p.T + key) * p.nKV + g) * DW + i % DW); }
    let at = (i / DW) * CSTR + i % DW;
    // #if DP8
    if (src == SRC_V) { VcO[at] = bitcast<i32>(w); continue; }
    // #endif
    KcO[at] = bitcast<i32>(w);
  }
}

// The scales of this thread's 4 own keys (0 past T).
fn ownScales(src: u32, b: u32, g: u32, keys: vec4<u32>) -> vec4<f32> {
  var s = vec4<f32>(0.0);
  let base = scaleBase(p.nRows / p.G);
  for (var i = 0u; i < 4u; i++) {
    if (keys[i] < p.T) { s[i] = bitcast<f32>(ownWord(src, base + (b * p.T + keys[i]) * p.nKV + g)); }
  }
  return s;
}

// Code word i of a query-shaped tensor: Q's (SRC_Q) or, with DP8, dO's (SRC_DO).
fn tileWord(src: u32, i: u32) -> u32 {
  // #if DP8
  if (src == SRC_DO) { return ocs[i]; }
  // #endif
  return qcw[i];
}

// A thread's code words of src's tile at q0 of head h (word lid + NT·u, u < QPT); 0 past T.
fn fetchTileCodes(src: u32, lid: u32, b: u32, h: u32, q0: u32) -> vec4<u32> {
  var r = vec4<u32>(0u);
  for (var u = 0u; u < QPT; u++) {
    let i = lid + NT * u;
    let t = q0 + i / DW;
    if (i < OTHR * DW && t < p.T) { r[u] = tileWord(src, ((b * p.T + t) * p.nH + h) * DW + i % DW); }
  }
  return r;
}

// Those words into QcT (Q) or OcT (dO).
fn putTileCodes(src: u32, lid: u32, r: vec4<u32>) {
  for (var u = 0u; u < QPT; u++) {
    let i = lid + NT * u;
    if (i >= OTHR * DW) { continue; }
    let at = (i / DW) * CSTR + i % DW;
    // #if DP8
    if (src == SRC_DO) { OcT[at] = bitcast<i32>(r[u]); continue; }
    // #endif
    QcT[at] = bitcast<i32>(r[u]);
  }
}

// #if DP8
// dO row t's scale (0 past T, whose codes are 0 too).
fn oScale(b: u32, h: u32, t: u32) -> f32 {
  if (t >= p.T) { return 0.0; }
  return bitcast<f32>(ocs[scaleBase(p.nRows) + (b * p.T + t) * p.nH + h]);
}

// The integer dP of dO code row `orow` (an OcT index) against the 4 own values' rows at vr (VcO);
// dotKeys' loop on other arrays, kept apart so that each inner loop reads fixed arrays.
fn dotValues(orow: u32, vr: u32) -> vec4<i32> {
  var acc = vec4<i32>(0);
  // unroll
  for (var w = 0u; w < DW; w++) {
    let ow = bitcast<u32>(OcT[orow + w]);
    acc += vec4<i32>(dot4I8Packed(ow, bitcast<u32>(VcO[vr + w])), dot4I8Packed(ow, bitcast<u32>(VcO[vr + CSTR + w])),
      dot4I8Packed(ow, bitcast<u32>(VcO[vr + 2u * CSTR + w])), dot4I8Packed(ow, bitcast<u32>(VcO[vr + 3u * CSTR + w])));
  }
  return acc;
}
// #endif

// Query row t's scale × c2 (0 past T, whose codes are 0 too).
fn qScaleC2(b: u32, h: u32, t: u32) -> f32 {
  if (t >= p.T) { return 0.0; }
  return bitcast<f32>(qcw[scaleBase(p.nRows) + (b * p.T + t) * p.nH + h]) * p.c2;
}

// The integer scores of query code row `qr` (a QcT index) against the 4 own keys' rows at kr (KcO).
fn dotKeys(qr: u32, kr: u32) -> vec4<i32> {
  var acc = vec4<i32>(0);
  // unroll
  for (var w = 0u; w < DW; w++) {
    let qw = bitcast<u32>(QcT[qr + w]);
    acc += vec4<i32>(dot4I8Packed(qw, bitcast<u32>(KcO[kr + w])), dot4I8Packed(qw, bitcast<u32>(KcO[kr + CSTR + w])),
      dot4I8Packed(qw, bitcast<u32>(KcO[kr + 2u * CSTR + w])), dot4I8Packed(qw, bitcast<u32>(KcO[kr + 3u * CSTR + w])));
  }
  return acc;
}
