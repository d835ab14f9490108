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

//--- half
// The rotation (not in place) that also writes y's f16 copy, the operand of the f16 GEMM that reads
// it next (the backward's dq, dk for q_proj's and k_proj's dX and dW): one invocation per two adjacent
// pairs (P even), so each f16 word it writes holds two of its own elements. h_y (and half) come from
// matmul-f16/cast.ts (f16OutWgsl width 2: packed, or the twin's f32). p.n counts pairs.
// Without Y32 (nothing reads y in fp32: the f16 cells of q, k; the backward's dq, dk for f16 GEMMs
// only) y's f16 copy alone: bindings x, table, params, y16 (table_ip and p_ip's slots).
// #if Y32
fn tab(i: u32) -> f32 { return table[i]; }
fn par() -> Params { return p; }
// #else
fn tab(i: u32) -> f32 { return table_ip[i]; }
fn par() -> Params { return p_ip; }
// #endif
@compute @workgroup_size(256)
fn rope_h(@builtin(global_invocation_id) gid: vec3<u32>) {
  let q = par();
  let i = gid.x + gid.y * q.rowStride;
  if (2u * i >= q.n) { return; }
  let o = pairAt(2u * i, q);
  let c0 = tab(o.y);
  let c1 = tab(o.y + 1u);
  let s0 = q.sign * tab(q.sinOff + o.y);
  let s1 = q.sign * tab(q.sinOff + o.y + 1u);
  let a1 = x[o.x];
  let b1 = x[o.x + 1u];
  let a2 = x[o.x + q.P];
  let b2 = x[o.x + q.P + 1u];
  let ya1 = a1 * c0 - a2 * s0;
  let yb1 = b1 * c1 - b2 * s1;
  let ya2 = a2 * c0 + a1 * s0;
  let yb2 = b2 * c1 + b1 * s1;
// #if Y32
  y[o.x] = ya1;
  y[o.x + 1u] = yb1;
  y[o.x + q.P] = ya2;
  y[o.x + q.P + 1u] = yb2;
// #endif
  h_y_store2(o.x / 2u, ya1, yb1);
  h_y_store2((o.x + q.P) / 2u, ya2, yb2);
}
