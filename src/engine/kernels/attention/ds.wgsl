// The stored dS of the attention backward's stored-dS path (src/engine/kernels/attention-ds.ts):
// the dK/dV pass writes dS = P∘(dP − Di) (unscaled, as attn_bwd_dq computes it) and
// attn_dq_from_ds reads it for dq = scale·dS·K instead of rebuilding S, P and dP.
// Layout, per head of a chunk (head index (pair − pair0)·G + hh, pair = b·nKV + g): the causal lower
// triangle row by row, row t holding keys 0 .. 4·ceil((t+1)/4) − 1 as whole vec4s, so a head takes
// dsRowStart(T) vec4s, about T²/2 floats. Keys past t in a row's last vec4 hold 0 (blocked writer)
// or are left unwritten (row-per-thread writer): the reader masks them.
// This preamble serves every shader; `vec4` / `scalar` are the dK/dV kernels' writers (blocked: a
// vec4 of 4 keys per query row; row-per-thread: one key), appended with their binding; `vec4_bf16`
// the blocked writer of dS as bf16 (4 keys in a vec2<u32>, same indices: half the bytes), and
// `read_f32` / `read_bf16` the dq pass's reader of either.

// vec4 index of row t's first vec4 in one head: Σ_{r<t} ceil((r+1)/4) = 2a(a+1) + c(a+1), t = 4a + c.
fn dsRowStart(t: u32) -> u32 {
  let a = t / 4u;
  let c = t % 4u;
  return 2u * a * (a + 1u) + c * (a + 1u);
}

// vec4 index of the vec4 holding keys 4·key4 .. 4·key4+3 of query row t of chunk head `head`.
fn dsIndex(head: u32, t: u32, key4: u32) -> u32 {
  return head * dsRowStart(p.T) + dsRowStart(t) + key4;
}

//--- vec4
@group(0) @binding(9) var<storage, read_write> dSw: array<vec4<f32>>;

// dS of keys key0..key0+3 (key0 % 4 == 0) against query t of query head hh of KV pair `pair`.
fn storeDs4(pair: u32, hh: u32, t: u32, key0: u32, x: vec4<f32>) {
  if (t < p.T && key0 <= t) { dSw[dsIndex((pair - p.pair0) * p.G + hh, t, key0 / 4u)] = x; }
}

//--- scalar
@group(0) @binding(9) var<storage, read_write> dSw: array<f32>;

// dS of one key against query t.
fn storeDs1(pair: u32, hh: u32, t: u32, key: u32, x: f32) {
  if (t < p.T && key <= t) { dSw[4u * dsIndex((pair - p.pair0) * p.G + hh, t, 0u) + key] = x; }
}

//--- vec4_bf16
@group(0) @binding(9) var<storage, read_write> dSw: array<vec2<u32>>;

// Round to nearest, ties to even (dS is finite: no NaN case, unlike quant/bf16.wgsl's encoder).
fn dsBf16(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn storeDs4(pair: u32, hh: u32, t: u32, key0: u32, x: vec4<f32>) {
  if (t < p.T && key0 <= t) {
    dSw[dsIndex((pair - p.pair0) * p.G + hh, t, key0 / 4u)] = vec2<u32>(dsBf16(x.x) | (dsBf16(x.y) << 16u), dsBf16(x.z) | (dsBf16(x.w) << 16u));
  }
}

//--- read_f32
@group(0) @binding(0) var<storage, read> dS: array<vec4<f32>>;
fn ldDsAt(i: u32) -> vec4<f32> { return dS[i]; }

//--- read_bf16
@group(0) @binding(0) var<storage, read> dS: array<vec2<u32>>;
fn ldDsAt(i: u32) -> vec4<f32> {
  let w = dS[i];
  return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}
