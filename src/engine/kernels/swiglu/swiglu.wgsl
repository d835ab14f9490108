// SwiGLU (LLaMA MLP): h = silu(gate) ⊙ up, silu(z) = z·σ(z). N = rows, F = intermediate size;
// gate, up, h, dh, dgate, dup: [N, F], treated as flat arrays of n = N·F elements (2-D grid when
// n/256 > 65535). Backward: dup = dh · silu(g); dgate = dh · up · σ(g)·(1 + g·(1 − σ(g))).
// V is f32, or vec4<f32> in the text swiglu.ts keeps for counts and bindings that allow 16-byte
// access (the same arithmetic per component, so the same bits); n counts V elements.
// #if VEC4
alias V = vec4<f32>;
// #else
alias V = f32;
// #endif
// HALF (VEC4 only): swiglu_fwd, swiglu_bwd_inplace and swiglu_bwd_over_dh also write their outputs'
// f16 copies, the operands of the f16 GEMMs that read them next (down_proj's X; gate_proj's and
// up_proj's dY): h_h, h_dg, h_du (and half) come from matmul-f16/cast.ts (f16OutWgsl: packed, or the
// twin's f32), rounded as the cast rounds; bindings 4 (h16; dgate16) and 5 (dup16).
// cols: V elements per row (the row kernels swiglu_fwd_q, swiglu_bwd_q_*; n then counts rows);
// row0: the first row's index in the backward's codes and scales (a block of rows of the whole), and
// where HALF's n vec4s start in the f16 copies.
struct Params { n: u32, cols: u32, row0: u32, _p2: u32 }

@group(0) @binding(2) var<uniform> p: Params;

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 { return gid.x + gid.y * nwg.x * 256u; }

// σ(z) without overflow: exp of a non-positive argument only (exp(-z) for large negative z is inf,
// which WGSL does not promise to propagate cleanly).
fn sigmoid(z: V) -> V {
  let e = exp(-abs(z));
  let s = 1.0 / (1.0 + e);
  return select(e * s, s, z >= V(0.0));
}

// d silu(g) / dg = σ(g)·(1 + g·(1 − σ(g))), given s = σ(g): every backward's dgate factor.
fn silu_grad(g: V, s: V) -> V { return s * (1.0 + g * (1.0 - s)); }

// ---- forward: bindings gate, up, params, h
@group(0) @binding(0) var<storage, read> f_gate: array<V>;
@group(0) @binding(1) var<storage, read> f_up: array<V>;
@group(0) @binding(3) var<storage, read_write> f_h: array<V>;

@compute @workgroup_size(256)
fn swiglu_fwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = f_gate[i];
  let h = (g * sigmoid(g)) * f_up[i];
  f_h[i] = h;
// #if HALF
  h_h_store4(p.row0 + i, h);
// #endif
}

// ---- backward: bindings gate, up, params, dh, dgate, dup
@group(0) @binding(3) var<storage, read> b_dh: array<V>;
@group(0) @binding(4) var<storage, read_write> b_dgate: array<V>;
@group(0) @binding(5) var<storage, read_write> b_dup: array<V>;

@compute @workgroup_size(256)
fn swiglu_bwd(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = f_gate[i];
  let s = sigmoid(g);
  let d = b_dh[i];
  b_dup[i] = d * (g * s);
  b_dgate[i] = d * f_up[i] * silu_grad(g, s);
}

// ---- backward in place (dgate over gate, dup over up; each element is read before it is written
// by the same invocation, so no other invocation can observe a half-updated value):
// bindings gate/dgate, up/dup, params, dh
@group(0) @binding(0) var<storage, read_write> i_gate: array<V>;
@group(0) @binding(1) var<storage, read_write> i_up: array<V>;

@compute @workgroup_size(256)
fn swiglu_bwd_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = i_gate[i];
  let u = i_up[i];
  let s = sigmoid(g);
  let d = b_dh[i];
  let du = d * (g * s);
  let dg = d * u * silu_grad(g, s);
  i_up[i] = du;
  i_gate[i] = dg;
// #if HALF
  h_dg_store4(p.row0 + i, dg);
  h_du_store4(p.row0 + i, du);
// #endif
}

// ---- backward with dgate over gate and dup over dh (each element is read before the same invocation
// writes it): bindings gate/dgate, up (read), params, dh/dup. What the blocked backward of a
// quantized `up` runs, whose up rows are a dequantized scratch block and whose dh rows take dup.
@group(0) @binding(3) var<storage, read_write> o_dh: array<V>;

@compute @workgroup_size(256)
fn swiglu_bwd_over_dh(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = i_gate[i];
  let s = sigmoid(g);
  let d = o_dh[i];
  let du = d * (g * s);
  let dg = d * f_up[i] * silu_grad(g, s);
  o_dh[i] = du;
  i_gate[i] = dg;
// #if HALF
  h_dg_store4(p.row0 + i, dg);
  h_du_store4(p.row0 + i, du);
// #endif
}

// ---- forward in place (h over up; each element is read before the same invocation writes it):
// bindings gate (read), up/h, params
@compute @workgroup_size(256)
fn swiglu_fwd_inplace(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = f_gate[i];
  i_up[i] = (g * sigmoid(g)) * i_up[i];
}

// #if QUANT
// ---- forward that also writes h's INT8 codes per row (down_proj's X operand, quantizeRef 'row'
// semantics): one workgroup per row; bindings gate, up, params, h, codes (one u32 per vec4 of h),
// scales [N]. VEC4 only; prepended: quant/codec.wgsl and wg-sum.wgsl.
@group(0) @binding(4) var<storage, read_write> q_codes: array<u32>;
@group(0) @binding(5) var<storage, read_write> q_scales: array<f32>;

@compute @workgroup_size(WG)
fn swiglu_fwd_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.n) { return; }
  let base = row * p.cols;
  var m = 0.0;
  for (var c = lid; c < p.cols; c += WG) {
    let g = f_gate[base + c];
    let h = (g * sigmoid(g)) * f_up[base + c];
    f_h[base + c] = h;
    m = max(m, finite_absmax4(h));
  }
  let s = int8_scale(wg_max(m, lid));
  let inv = int_inv(s);
  for (var c = lid; c < p.cols; c += WG) { q_codes[base + c] = int8_word(f_h[base + c], s, inv); }
  if (lid == 0u) { q_scales[row] = s; }
}

// ---- backward that also writes the INT8 codes of [dgate | dup] per row, the dY of gate_proj's and
// up_proj's input gradient as one GEMM over K = 2F: codes row r holds dgate's F codes, then dup's,
// with one scale per row over both (quantizeRef 'row' semantics, rowLength 2F). One workgroup per
// row, the arithmetic of swiglu_bwd_inplace per element. In place: dgate over gate, dup over up, or
// over dh with OVER_DH (the blocked backward of a quantized `up`). Bindings gate/dgate, up, params,
// dh, codes [rows, 2F/4] u32, scales; this block's rows start at row0 of codes and scales.
override OVER_DH: bool = false;

@compute @workgroup_size(WG)
fn swiglu_bwd_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.n) { return; }
  let base = row * p.cols;
  var m = 0.0;
  for (var c = lid; c < p.cols; c += WG) {
    let i = base + c;
    let g = i_gate[i];
    let s = sigmoid(g);
    let d = o_dh[i];
    let du = d * (g * s);
    let dg = d * i_up[i] * silu_grad(g, s);
    if (OVER_DH) { o_dh[i] = du; } else { i_up[i] = du; }
    i_gate[i] = dg;
    m = max(m, max(finite_absmax4(dg), finite_absmax4(du)));
  }
  let s = int8_scale(wg_max(m, lid));
  let inv = int_inv(s);
  let out = (p.row0 + row) * 2u * p.cols;
  for (var c = lid; c < p.cols; c += WG) {
    let i = base + c;
    q_codes[out + c] = int8_word(i_gate[i], s, inv);
    q_codes[out + p.cols + c] = int8_word(select(i_up[i], o_dh[i], OVER_DH), s, inv);
  }
  if (lid == 0u) { q_scales[p.row0 + row] = s; }
}
// #endif

// #if STORED
// ---- gate's and up's 16-bit storage read and written in place of their fp32 copies (VEC4 only;
// prepended: F16_HALF_WGSL, and f16OutWgsl's s_gw, s_uw (packed f16, the storage's layout: pack2x16
// pairs, element 2k in the low half) and s_h, s_dg, s_du (the f16 GEMMs' operands: packed, or the
// twin's f32). What an f16 layer runs where gate and up are stored f16 and nothing reads h, dgate or
// dup in fp32 (RunPlan.swigluHalf): one pass each way instead of two packs, the unpacks of gate and of
// up's row blocks, and fp32 writes nobody reads. Same arithmetic per element as swiglu_fwd and
// swiglu_bwd_over_dh, f16 → f32 exact: the same bits.
// forward: bindings gate, up (fp32), params, gate's words, up's words, h16.
// backward: bindings gate's words, up's words, params, dh (fp32), dgate16, dup16.
// swiglu_bwd_stored_f32: also dgate and dup in fp32 where something reads them (LoRA's adapters: RunPlan.swigluBwdHalf):
// dup over dh, dgate at binding 6 (the values swiglu_bwd_over_dh writes).
@group(0) @binding(0) var<storage, read> s_gr: array<vec2<u32>>;
@group(0) @binding(1) var<storage, read> s_ur: array<vec2<u32>>;

fn unpack4(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }

@compute @workgroup_size(256)
fn swiglu_fwd_stored(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = f_gate[i];
  let u = f_up[i];
  s_gw_store4(i, g);
  s_uw_store4(i, u);
  s_h_store4(i, (g * sigmoid(g)) * u);
}

@compute @workgroup_size(256)
fn swiglu_bwd_stored(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = unpack4(s_gr[i]);
  let s = sigmoid(g);
  let d = b_dh[i];
  s_dg_store4(i, d * unpack4(s_ur[i]) * silu_grad(g, s));
  s_du_store4(i, d * (g * s));
}

@group(0) @binding(6) var<storage, read_write> s_dgate: array<vec4<f32>>;

@compute @workgroup_size(256)
fn swiglu_bwd_stored_f32(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  let g = unpack4(s_gr[i]);
  let s = sigmoid(g);
  let d = o_dh[i];
  let du = d * (g * s);
  let dg = d * unpack4(s_ur[i]) * silu_grad(g, s);
  o_dh[i] = du;
  s_dgate[i] = dg;
  s_dg_store4(i, dg);
  s_du_store4(i, du);
}
// #endif
