// RMSNorm (Hugging Face LlamaRMSNorm in fp32): y = w ⊙ (x · rstd), rstd = rsqrt(mean(x²) + eps).
// N = rows (tokens), C = channels. x, y, dy, dx: [N, C]; w, dw: [C]; rstd: [N];
// partials: [K, C] with K = row chunks of the dw reduction (R rows each).
// Row kernels run one workgroup per row (the linear workgroup index spans a 2-D grid when N > 65535).
// Backward: x̂ = x·rstd, g = dy ⊙ w, dx = rstd · (g − x̂ · mean(g ⊙ x̂)), dw = Σ_rows dy ⊙ x̂.
// dw is reduced in two fixed stages (chunks of R rows into partials, then over the K chunks in
// order) so it is deterministic without float atomics.
struct Params { N: u32, C: u32, eps: f32, accumulate: u32, R: u32, K: u32, _p0: u32, _p1: u32 }

// WG, red and wg_sum come from wg-sum.wgsl (prepended by the TS declaration). The row kernels
// take one element section: V = f32, or vec4<f32> where C and the bindings allow 16-byte access
// (VW floats per element, hsum its horizontal sum); the dw kernels are scalar.

@group(0) @binding(2) var<uniform> p: Params;

//--- elem_f32
alias V = f32;
const VW: u32 = 1u;
fn hsum(v: V) -> f32 { return v; }

//--- elem_vec4
alias V = vec4<f32>;
const VW: u32 = 4u;
fn hsum(v: V) -> f32 { return (v.x + v.y) + (v.z + v.w); }

//--- rows
// H: the forward and the backward dx also write their output's f16 copy, the operand of the f16 GEMM
// that reads it next: h_y, h_dx (and half) come from matmul-f16/cast.ts (f16OutWgsl: packed pairs, or
// the twin's f32), rounded as the cast rounds. vec4 elements only.
// ---- forward: bindings x, w, params, y, rstd (H: y16); without Y32 (H only: nothing reads y in
// fp32) x, w, params, rstd, y16. RESID: also x's copy into f_xc (the residual stream's next buffer),
// declared by rmsnorm.ts after the last binding, from the loads the sum of squares makes anyway.
@group(0) @binding(0) var<storage, read> f_x: array<V>;
@group(0) @binding(1) var<storage, read> f_w: array<V>;
// #if Y32
@group(0) @binding(3) var<storage, read_write> f_y: array<V>;
@group(0) @binding(4) var<storage, read_write> f_rstd: array<f32>;
// #else
@group(0) @binding(3) var<storage, read_write> f_rstd: array<f32>;
// #endif

@compute @workgroup_size(WG)
fn rmsnorm_fwd(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.N) { return; }
  let cv = p.C / VW;
  let base = row * cv;
  var acc = 0.0;
  for (var c = lid; c < cv; c += WG) {
    let v = f_x[base + c];
    acc += hsum(v * v);
// #if RESID
    f_xc[base + c] = v;
// #endif
  }
  let r = inverseSqrt(wg_sum(acc, lid) / f32(p.C) + p.eps);
  for (var c = lid; c < cv; c += WG) {
    let y = f_w[c] * (f_x[base + c] * r);
// #if Y32
    f_y[base + c] = y;
// #endif
// #if H
    h_y_store4(base + c, y);
// #endif
  }
  if (lid == 0u) { f_rstd[row] = r; }
}

// ---- backward dx: bindings x, w, params, dy, rstd, dx (H: dx16)
@group(0) @binding(3) var<storage, read> b_dy: array<V>;
@group(0) @binding(4) var<storage, read> b_rstd: array<f32>;
@group(0) @binding(5) var<storage, read_write> b_dx: array<V>;

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dx(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                  @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.N) { return; }
  let cv = p.C / VW;
  let base = row * cv;
  let r = b_rstd[row];
  var acc = 0.0;
  for (var c = lid; c < cv; c += WG) { acc += hsum((b_dy[base + c] * f_w[c]) * (f_x[base + c] * r)); }
  let m = wg_sum(acc, lid) / f32(p.C);
  for (var c = lid; c < cv; c += WG) {
    let g = r * (b_dy[base + c] * f_w[c] - (f_x[base + c] * r) * m);
    var v = g;
    if (p.accumulate != 0u) { v = b_dx[base + c] + g; }
    b_dx[base + c] = v;
// #if H
    h_dx_store4(base + c, v);
// #endif
  }
}

//--- dw
// ---- backward dw stage 1: bindings x, dy, params, rstd, partials. Grid [ceil(C/WG), K]; one
// thread per column walks R rows, so each row's loads are coalesced across the workgroup.
@group(0) @binding(0) var<storage, read> p_x: array<f32>;
@group(0) @binding(1) var<storage, read> p_dy: array<f32>;
@group(0) @binding(3) var<storage, read> p_rstd: array<f32>;
@group(0) @binding(4) var<storage, read_write> p_part: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dw_partial(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c = wid.x * WG + lid;
  if (c >= p.C) { return; }
  let r0 = wid.y * p.R;
  let r1 = min(p.N, r0 + p.R);
  var acc = 0.0;
  // Four rows' loads issued before their FMAs, which stay in row order (the same bits as one row
  // at a time): a loop of one row per step waits out a memory round trip per row.
  var r = r0;
  for (; r + 4u <= r1; r += 4u) {
    let i = r * p.C + c;
    let d0 = p_dy[i]; let d1 = p_dy[i + p.C]; let d2 = p_dy[i + 2u * p.C]; let d3 = p_dy[i + 3u * p.C];
    let x0 = p_x[i]; let x1 = p_x[i + p.C]; let x2 = p_x[i + 2u * p.C]; let x3 = p_x[i + 3u * p.C];
    let s0 = p_rstd[r]; let s1 = p_rstd[r + 1u]; let s2 = p_rstd[r + 2u]; let s3 = p_rstd[r + 3u];
    acc = fma(d0, x0 * s0, acc);
    acc = fma(d1, x1 * s1, acc);
    acc = fma(d2, x2 * s2, acc);
    acc = fma(d3, x3 * s3, acc);
  }
  for (; r < r1; r++) {
    let i = r * p.C + c;
    acc = fma(p_dy[i], p_x[i] * p_rstd[r], acc);
  }
  p_part[wid.y * p.C + c] = acc;
}

// ---- backward dw stage 2: bindings partials, dw, params. Sums the K chunks in chunk order.
@group(0) @binding(0) var<storage, read> s_part: array<f32>;
@group(0) @binding(1) var<storage, read_write> s_dw: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dw_final(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c = wid.x * WG + lid;
  if (c >= p.C) { return; }
  var acc = 0.0;
  // Eight chunks' loads in flight, summed in chunk order (the same bits as one at a time, which
  // waited out a memory round trip per chunk).
  var k = 0u;
  for (; k + 8u <= p.K; k += 8u) {
    let i = k * p.C + c;
    let v0 = s_part[i]; let v1 = s_part[i + p.C]; let v2 = s_part[i + 2u * p.C]; let v3 = s_part[i + 3u * p.C];
    let v4 = s_part[i + 4u * p.C]; let v5 = s_part[i + 5u * p.C]; let v6 = s_part[i + 6u * p.C]; let v7 = s_part[i + 7u * p.C];
    acc += v0; acc += v1; acc += v2; acc += v3; acc += v4; acc += v5; acc += v6; acc += v7;
  }
  for (; k < p.K; k++) { acc += s_part[k * p.C + c]; }
  if (p.accumulate != 0u) { s_dw[c] = s_dw[c] + acc; } else { s_dw[c] = acc; }
}

//--- rows_q
// Forward that also writes y's INT8 codes per row (the INT8 GEMMs' X operand; quantizeRef 'row'
// semantics, code for code): bindings x, w, params, y, rstd, codes (one u32 per vec4 of y: four
// consecutive codes), scales [N]. vec4 elements only; prepended: quant/codec.wgsl.
@group(0) @binding(0) var<storage, read> q_x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> q_w: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> q_y: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> q_rstd: array<f32>;
@group(0) @binding(5) var<storage, read_write> q_codes: array<u32>;
@group(0) @binding(6) var<storage, read_write> q_scales: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_fwd_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.N) { return; }
  let cv = p.C / 4u;
  let base = row * cv;
  var acc = 0.0;
  for (var c = lid; c < cv; c += WG) { let v = q_x[base + c]; acc += hsum(v * v); }
  let r = inverseSqrt(wg_sum(acc, lid) / f32(p.C) + p.eps);
  var m = 0.0;
  for (var c = lid; c < cv; c += WG) {
    let y = q_w[c] * (q_x[base + c] * r);
    q_y[base + c] = y;
    m = max(m, finite_absmax4(y));
  }
  let s = int8_scale(wg_max(m, lid));
  let inv = int_inv(s);
  for (var c = lid; c < cv; c += WG) {
    q_codes[base + c] = int8_word(q_y[base + c], s, inv); // this invocation's own stores: no barrier needed
  }
  if (lid == 0u) {
    q_rstd[row] = r;
    q_scales[row] = s;
  }
}

// ---- backward dx that also writes dx's INT8 codes per row (the dY operand of the INT8 dX GEMM that
// reads this gradient next): bindings x, w, params, dy, rstd, dx, codes, scales. vec4 only.
@group(0) @binding(3) var<storage, read> qb_dy: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> qb_rstd: array<f32>;
@group(0) @binding(5) var<storage, read_write> qb_dx: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> qb_codes: array<u32>;
@group(0) @binding(7) var<storage, read_write> qb_scales: array<f32>;

@compute @workgroup_size(WG)
fn rmsnorm_bwd_dx_q(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                    @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.x + wid.y * nwg.x;
  if (row >= p.N) { return; }
  let cv = p.C / 4u;
  let base = row * cv;
  let r = qb_rstd[row];
  var acc = 0.0;
  for (var c = lid; c < cv; c += WG) { acc += hsum((qb_dy[base + c] * q_w[c]) * (q_x[base + c] * r)); }
  let m = wg_sum(acc, lid) / f32(p.C);
  var a = 0.0;
  for (var c = lid; c < cv; c += WG) {
    let g = r * (qb_dy[base + c] * q_w[c] - (q_x[base + c] * r) * m);
    let v = select(g, qb_dx[base + c] + g, p.accumulate != 0u);
    qb_dx[base + c] = v;
    a = max(a, finite_absmax4(v));
  }
  let s = int8_scale(wg_max(a, lid));
  let inv = int_inv(s);
  for (var c = lid; c < cv; c += WG) { qb_codes[base + c] = int8_word(qb_dx[base + c], s, inv); }
  if (lid == 0u) { qb_scales[row] = s; }
}
