// IEEE half's codec for the 16-bit storage kernels (kernels/bf16/half-storage.wgsl): core WGSL's
// pack2x16float (through half(): kernels/matmul-f16/cast.ts F16_HALF_WGSL) and unpack2x16float, so no
// shader-f16 is needed. Reference: ./f16.ref.ts.
// Overflow as IEEE round to nearest: |x| >= 65520 stores ±Inf (the loss scaler sees it), not a clamp.

fn enc(b: u32) -> u32 { return half(bitcast<f32>(b)); }

// f16 → f32 is exact.
fn dec2(w: u32) -> vec2<u32> { return bitcast<vec2<u32>>(unpack2x16float(w)); }
