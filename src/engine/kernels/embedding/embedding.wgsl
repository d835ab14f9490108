// Token embedding. N = tokens, V = vocab rows, C = channels. ids: i32 [N]; W, dW: [V, C];
// out, dout: [N, C]. Ids outside [0, V) read as a zero row and receive no gradient (no clamping:
// a bad id must not silently train some other token's row).
//
// Backward is deterministic without float atomics: a stable counting sort groups token indices
// by id (ascending token order within each id), then one workgroup per (vocab row, column tile)
// sums its tokens' dout rows in that fixed order. Workspace ws (u32):
//   [0, V]          offsets: tokens of id v are order[offsets[v] .. offsets[v+1])
//   [V+1, 2V+1)     cursors used while scattering
//   [2V+1, 2V+1+N)  order: token indices sorted by (id, token)
struct Params { N: u32, V: u32, C: u32, accumulate: u32, col_tiles: u32, _p0: u32, _p1: u32, _p2: u32 }

override WG: u32 = 256;
// Gather: TC columns × (WG / TC) token lanes per workgroup (TC a power of two ≤ WG).
override TC: u32 = 64;

@group(0) @binding(2) var<uniform> p: Params;

fn valid_id(id: i32) -> bool { return id >= 0 && u32(id) < p.V; }

// ---- forward: bindings ids, W, params, out. One thread per output element.
@group(0) @binding(0) var<storage, read> f_ids: array<i32>;
@group(0) @binding(1) var<storage, read> f_w: array<f32>;
@group(0) @binding(3) var<storage, read_write> f_out: array<f32>;

@compute @workgroup_size(256)
fn embed_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.N * p.C) { return; }
  let n = i / p.C;
  let c = i - n * p.C;
  let id = f_ids[n];
  var v = 0.0;
  if (valid_id(id)) { v = f_w[u32(id) * p.C + c]; }
  f_out[i] = v;
}

// ---- backward stage 1, ONE workgroup: bindings ids, ws, params.
// Counting with integer atomics is order-independent; the scatter walks the tokens in chunks of
// WG, in order, ranking equal ids inside a chunk by lane, so the sort is stable and deterministic.
@group(0) @binding(1) var<storage, read_write> s_ws: array<atomic<u32>>;
var<workgroup> sh_id: array<i32, WG>;
var<workgroup> sh_tot: array<u32, WG>;

@compute @workgroup_size(WG)
fn embed_sort(@builtin(local_invocation_index) lid: u32) {
  let V = p.V;
  let N = p.N;
  let CUR = V + 1u;
  let ORD = 2u * V + 1u;
  for (var v = lid; v <= V; v += WG) { atomicStore(&s_ws[v], 0u); }
  storageBarrier();
  for (var n = lid; n < N; n += WG) {
    let id = f_ids[n];
    if (valid_id(id)) { atomicAdd(&s_ws[u32(id)], 1u); }
  }
  storageBarrier();
  // Exclusive scan of the counts: lane t owns ids [t·K, (t+1)·K).
  let K = (V + WG - 1u) / WG;
  let v0 = min(V, lid * K);
  let v1 = min(V, v0 + K);
  var tot = 0u;
  for (var v = v0; v < v1; v++) { tot += atomicLoad(&s_ws[v]); }
  sh_tot[lid] = tot;
  workgroupBarrier();
  var run = 0u;
  for (var t = 0u; t < lid; t++) { run += sh_tot[t]; }
  for (var v = v0; v < v1; v++) {
    let c = atomicLoad(&s_ws[v]);
    atomicStore(&s_ws[v], run);
    atomicStore(&s_ws[CUR + v], run);
    run += c;
  }
  if (lid == WG - 1u) { atomicStore(&s_ws[V], run); }
  storageBarrier();
  for (var base = 0u; base < N; base += WG) {
    let n = base + lid;
    var id = -1;
    if (n < N && valid_id(f_ids[n])) { id = f_ids[n]; }
    sh_id[lid] = id;
    workgroupBarrier();
    var rank = 0u;
    var later = 0u;
    var cur = 0u;
    if (id >= 0) {
      for (var j = 0u; j < WG; j++) {
        if (sh_id[j] == id) {
          if (j < lid) { rank++; } else if (j > lid) { later++; }
        }
      }
      cur = atomicLoad(&s_ws[CUR + u32(id)]);
      atomicStore(&s_ws[ORD + cur + rank], n);
    }
    // Every lane has read its cursor before the chunk's last lane of each id advances it.
    storageBarrier();
    if (id >= 0 && later == 0u) { atomicStore(&s_ws[CUR + u32(id)], cur + rank + 1u); }
    storageBarrier();
    workgroupBarrier();
  }
}

// ---- backward stage 2: bindings ws, dout, params, dW. Workgroup L handles vocab row
// v = L / col_tiles and columns [tile·TC, tile·TC + TC); lane (cl, rl) sums tokens rl, rl + TR, ...
// of the row's segment, then a fixed tree over rl combines the TR lanes.
@group(0) @binding(0) var<storage, read> g_ws: array<u32>;
@group(0) @binding(1) var<storage, read> g_dout: array<f32>;
@group(0) @binding(3) var<storage, read_write> g_dw: array<f32>;
var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn embed_bwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(num_workgroups) nwg: vec3<u32>) {
  let L = wid.x + wid.y * nwg.x;
  let v = L / p.col_tiles;
  if (v >= p.V) { return; }
  let TR = WG / TC;
  let cl = lid % TC;
  let rl = lid / TC;
  let c = (L - v * p.col_tiles) * TC + cl;
  let ORD = 2u * p.V + 1u;
  let start = g_ws[v];
  let end = g_ws[v + 1u];
  var acc = 0.0;
  if (c < p.C) {
    for (var j = start + rl; j < end; j += TR) { acc += g_dout[g_ws[ORD + j] * p.C + c]; }
  }
  red[lid] = acc;
  workgroupBarrier();
  for (var s = TR / 2u; s > 0u; s = s >> 1u) {
    if (rl < s) { red[lid] = red[lid] + red[lid + s * TC]; }
    workgroupBarrier();
  }
  if (rl == 0u && c < p.C) {
    let i = v * p.C + c;
    if (p.accumulate != 0u) { g_dw[i] = g_dw[i] + red[lid]; } else { g_dw[i] = red[lid]; }
  }
}
