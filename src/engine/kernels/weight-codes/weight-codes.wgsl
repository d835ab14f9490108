// INT8 codes of many weight matrices in one dispatch each, read from the one flat weights buffer
// (vec4 loads: every tensor starts at a multiple of 4 floats, every row length is a multiple of 4),
// driven by a table of entries. Prepended: quant/codec.wgsl. Round to nearest only (weights).
//   wc_rows        codes [rows, L/4] and scales [rows] per row of W [rows, L] (the forward's W per
//                  output channel): the codes of quantizeRef 'row' (buildQuantize's), one team of
//                  32 lanes per row, rows of any length (the row is read twice, the second time from cache).
//   wc_col_absmax  per column of W [R, CN] and tile of 128 rows, the absmax bits into A;
//   wc_col_encode  each column's max over its tiles, scale, codes of Wᵀ [CN, R/4] and scales [CN]
//                  (dX's W per input channel): the codes of quantizeColumnsI8.
// Absmax over the bit patterns of |x| (exact, order-free), NaN/Inf skipped and coded 0; s =
// int8_scale(amax); codes int8_word (division-free, boundary lanes redone exactly).

struct Params { count: u32, entries: u32, _a: u32, _b: u32 }

// wc_rows' entry: rows row0 .. of the next entry, V vec4 per row, x the first row's vec4 in X4,
// q its first code word, s its first scale.
struct RowEntry { row0: u32, V: u32, x: u32, q: u32, s: u32, _a: u32, _b: u32, _c: u32 }
// The column kernels' entry: workgroups wg0 .. of the next entry; W [R, CN] at vec4 x; codes at word
// q, scales at s, tile maxima [⌈R/128⌉, CN] at word a.
struct ColEntry { wg0: u32, R: u32, CN: u32, x: u32, q: u32, s: u32, a: u32, _a: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> X4: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> ER: array<RowEntry>;
@group(0) @binding(2) var<storage, read> EC: array<ColEntry>;
@group(0) @binding(3) var<storage, read_write> S: array<f32>;
@group(0) @binding(3) var<storage, read_write> A_w: array<u32>;
@group(0) @binding(4) var<storage, read_write> Q: array<u32>;
@group(0) @binding(5) var<storage, read> A_r: array<u32>;

fn abs_bits4(v: vec4<f32>) -> vec4<u32> {
  let b = bitcast<vec4<u32>>(v) & vec4<u32>(0x7fffffffu);
  return select(vec4<u32>(0u), b, b < vec4<u32>(0x7f800000u));
}

fn max4(a: vec4<u32>) -> u32 {
  return max(max(a.x, a.y), max(a.z, a.w));
}

// The last entry whose first row (workgroup) is ≤ g: entries are sorted, the first starts at 0.
fn row_entry(g: u32) -> u32 {
  var lo = 0u;
  var hi = p.entries;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (ER[mid].row0 <= g) { lo = mid; } else { hi = mid; }
  }
  return lo;
}

fn col_entry(w: u32) -> u32 {
  var lo = 0u;
  var hi = p.entries;
  while (hi - lo > 1u) {
    let mid = (lo + hi) / 2u;
    if (EC[mid].wg0 <= w) { lo = mid; } else { hi = mid; }
  }
  return lo;
}

const TEAM: u32 = 32u;
const TEAMS: u32 = 8u;
var<workgroup> red: array<u32, 1024>;

// p.count = rows over all entries; a workgroup tile is TEAMS rows, workgroups stride over the tiles.
@compute @workgroup_size(256)
fn wc_rows(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
  let t = li % TEAM;
  let team = li / TEAM;
  let tiles = (p.count + TEAMS - 1u) / TEAMS;
  for (var tile = wid.x; tile < tiles; tile += nwg.x) {
    let g = tile * TEAMS + team;
    let inside = g < p.count;
    var e = RowEntry(0u, 0u, 0u, 0u, 0u, 0u, 0u, 0u);
    if (inside) { e = ER[row_entry(g)]; }
    let r = g - e.row0;
    let x0 = e.x + r * e.V;
    var a = 0u;
    for (var k = t; k < e.V; k += TEAM) { a = max(a, max4(abs_bits4(X4[x0 + k]))); }
    red[li] = a;
    workgroupBarrier();
    for (var j = 0u; j < TEAM; j++) { a = max(a, red[team * TEAM + j]); }
    let s = int8_scale(bitcast<f32>(a));
    let inv = int_inv(s);
    if (inside && t == 0u) { S[e.s + r] = s; }
    let q0 = e.q + r * e.V;
    for (var k = t; k < e.V; k += TEAM) { Q[q0 + k] = int8_word(X4[x0 + k], s, inv); }
    workgroupBarrier(); // red is rewritten by the next tile
  }
}

// Column kernels: a workgroup is a tile of 32 columns × 128 rows of one entry; invocation li holds
// columns 4·(li % 8) .. +3 of rows 4·(li / 8) .. +3 (four vec4 loads, eight lanes read a row's
// 128 bytes). p.count = workgroups over all entries, which the dispatch's workgroups stride over.
struct ColTile { e: ColEntry, c: u32, r: u32, tile: u32, c0: u32, inside: bool }

fn col_tile(w: u32, li: u32) -> ColTile {
  var k: ColTile;
  k.e = EC[col_entry(w)];
  let cb = (k.e.CN + 31u) / 32u;
  let lw = w - k.e.wg0;
  k.tile = lw / cb;
  k.c0 = (lw % cb) * 32u;
  k.c = k.c0 + 4u * (li % 8u);
  k.r = k.tile * 128u + 4u * (li / 8u);
  k.inside = k.c < k.e.CN && k.r < k.e.R;
  return k;
}

struct Block { v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32> }

fn col_load(k: ColTile) -> Block {
  let n4 = k.e.CN / 4u;
  let i = k.e.x + (k.r * k.e.CN + k.c) / 4u;
  return Block(X4[i], X4[i + n4], X4[i + 2u * n4], X4[i + 3u * n4]);
}

var<workgroup> cmax: array<u32, 256>;
var<workgroup> cscale: array<f32, 32>;

@compute @workgroup_size(256)
fn wc_col_absmax(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var w = wid.x; w < p.count; w += nwg.x) {
    let k = col_tile(w, li);
    var m = vec4<u32>(0u);
    if (k.inside) {
      let b = col_load(k);
      m = max(max(abs_bits4(b.v0), abs_bits4(b.v1)), max(abs_bits4(b.v2), abs_bits4(b.v3)));
    }
    let o = (li / 8u) * 32u + 4u * (li % 8u); // row quad 0 .. 31, column within the tile
    red[o] = m.x; red[o + 1u] = m.y; red[o + 2u] = m.z; red[o + 3u] = m.w;
    workgroupBarrier();
    // Column li % 32 over row quads 4·(li / 32) .. +3, then over the 8 partials.
    var a = 0u;
    for (var q = (li / 32u) * 4u; q < (li / 32u) * 4u + 4u; q++) { a = max(a, red[q * 32u + li % 32u]); }
    cmax[li] = a;
    workgroupBarrier();
    if (li < 32u && k.c0 + li < k.e.CN) {
      var t = 0u;
      for (var y = 0u; y < 8u; y++) { t = max(t, cmax[y * 32u + li]); }
      A_w[k.e.a + k.tile * k.e.CN + k.c0 + li] = t;
    }
    workgroupBarrier();
  }
}

@compute @workgroup_size(256)
fn wc_col_encode(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wid: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  for (var w = wid.x; w < p.count; w += nwg.x) {
    let k = col_tile(w, li);
    // Column k.c0 + li % 32's max over every 8th tile, then over the 8 partials.
    let col = k.c0 + li % 32u;
    let tiles = (k.e.R + 127u) / 128u;
    var a = 0u;
    if (col < k.e.CN) {
      for (var t = li / 32u; t < tiles; t += 8u) { a = max(a, A_r[k.e.a + t * k.e.CN + col]); }
    }
    cmax[li] = a;
    workgroupBarrier();
    if (li < 32u) {
      var m = 0u;
      for (var y = 0u; y < 8u; y++) { m = max(m, cmax[y * 32u + li]); }
      cscale[li] = int8_scale(bitcast<f32>(m));
      if (k.tile == 0u && col < k.e.CN) { S[k.e.s + col] = cscale[li]; }
    }
    workgroupBarrier();
    if (k.inside) {
      let b = col_load(k);
      let j = 4u * (li % 8u);
      // Word of column c + i: rows r .. r + 3 of that column.
      let q = k.e.q + (k.c * k.e.R + k.r) / 4u;
      let R4 = k.e.R / 4u;
      let s0 = cscale[j];
      let s1 = cscale[j + 1u];
      let s2 = cscale[j + 2u];
      let s3 = cscale[j + 3u];
      Q[q] = int8_word(vec4<f32>(b.v0.x, b.v1.x, b.v2.x, b.v3.x), s0, int_inv(s0));
      Q[q + R4] = int8_word(vec4<f32>(b.v0.y, b.v1.y, b.v2.y, b.v3.y), s1, int_inv(s1));
      Q[q + 2u * R4] = int8_word(vec4<f32>(b.v0.z, b.v1.z, b.v2.z, b.v3.z), s2, int_inv(s2));
      Q[q + 3u * R4] = int8_word(vec4<f32>(b.v0.w, b.v1.w, b.v2.w, b.v3.w), s3, int_inv(s3));
    }
    workgroupBarrier(); // cmax and cscale are rewritten by the next tile
  }
}
