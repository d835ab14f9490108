// Rotary position embedding (HF LLaMA, rotate_half pairs (i, i + P)).
// Legend: B batch, T sequence length, H heads, D head dim (even), P = D/2 pairs.
// x, y: [B, T, H, D]; table: cos [Tt, P] then sin [Tt, P] (Tt >= T, sinOff = Tt·P).
// Large grids spill into y (rowStride = invocations per grid row). One invocation per pair: it reads both elements before writing either, so the in-place entry
// point (one read_write binding; WebGPU forbids aliasing a read and a writable binding) is race free.
struct Params { n: u32, T: u32, H: u32, P: u32, sinOff: u32, sign: f32, rowStride: u32, _p0: u32 }

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> table: array<f32>;
@group(0) @binding(3) var<uniform> p: Params;

// In-place variant: x and y are one buffer.
@group(0) @binding(0) var<storage, read_write> xy: array<f32>;
@group(0) @binding(1) var<storage, read> table_ip: array<f32>;
@group(0) @binding(2) var<uniform> p_ip: Params;

// Flat pair index -> (element offset of x1, table offset).
fn pairAt(i: u32, q: Params) -> vec2<u32> {
  let j = i % q.P;
  let row = i / q.P;                 // (b·T + t)·H + h
  let t = (row / q.H) % q.T;
  return vec2<u32>(row * 2u * q.P + j, t * q.P + j);
}

@compute @workgroup_size(256)
fn rope(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p.rowStride;
  if (i >= p.n) { return; }
  let o = pairAt(i, p);
  let c = table[o.y];
  let s = p.sign * table[p.sinOff + o.y];
  let x1 = x[o.x];
  let x2 = x[o.x + p.P];
  y[o.x] = x1 * c - x2 * s;
  y[o.x + p.P] = x2 * c + x1 * s;
}

@compute @workgroup_size(256)
fn rope_inplace(@builtin(global_invocation_id) gid: vec3<u32>) {
  let i = gid.x + gid.y * p_ip.rowStride;
  if (i >= p_ip.n) { return; }
  let o = pairAt(i, p_ip);
  let c = table_ip[o.y];
  let s = p_ip.sign * table_ip[p_ip.sinOff + o.y];
  let x1 = xy[o.x];
  let x2 = xy[o.x + p_ip.P];
  xy[o.x] = x1 * c - x2 * s;
  xy[o.x + p_ip.P] = x2 * c + x1 * s;
}
