// Rotary position embedding (rope.wgsl's forward) that also writes the INT8 codes of every rotated
// head row, per (token, head) row of D values: the INT8 attention scores' Q or K operand
// (kernels/attention-i8.ts), with the codes and scale quantizeRef 'row' gives y, code for code.
// One invocation per vec4 of y (D % 8 == 0, so a vec4 lies in one half of its row); RPW = 256 / DW
// rows a workgroup, DW = D / 4 invocations a row; the row's absmax through workgroup memory.
// Prepended: quant/codec.wgsl. Bindings x, y, table (vec4s), params, codes (one u32 a vec4), scales.
struct Params { rows: u32, T: u32, H: u32, P: u32, sinOff: u32, _p0: u32, rowStride: u32, _p1: u32 }

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> y: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> table: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> p: Params;
@group(0) @binding(4) var<storage, read_write> codes: array<u32>;
@group(0) @binding(5) var<storage, read_write> scales: array<f32>;

override DW: u32;                 // vec4s of a head row (D / 4)
const WG = 256u;
var<workgroup> red: array<f32, WG>;

@compute @workgroup_size(WG)
fn rope_q8(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let rpw = WG / DW;
  let row = (wid.x + wid.y * p.rowStride) * rpw + lid / DW;   // (b·T + t)·H + h
  let w = lid % DW;
  let live = row < p.rows;
  var v = vec4<f32>(0.0);
  if (live) {
    let half = p.P / 4u;            // vec4s of one half of the row
    let t = (row / p.H) % p.T;
    let first = w < half;
    let j = select(w - half, w, first);
    let c = table[(t * p.P) / 4u + j];
    let s = table[(p.sinOff + t * p.P) / 4u + j];
    let xo = x[row * DW + w];
    let xp = x[row * DW + select(w - half, w + half, first)];   // the partner half
    // rope.wgsl's two expressions: y1 = x1·c − x2·s, y2 = x2·c + x1·s.
    v = select(xo * c + xp * s, xo * c - xp * s, first);
    y[row * DW + w] = v;
  }
  red[lid] = finite_absmax4(v);
  workgroupBarrier();
  var m = 0.0;
  let r0 = (lid / DW) * DW;
  for (var i = 0u; i < DW; i++) { m = max(m, red[r0 + i]); }
  if (!live) { return; }
  let sc = int8_scale(m);
  codes[row * DW + w] = int8_word(v, sc, int_inv(sc));
  if (w == 0u) { scales[row] = sc; }
}
