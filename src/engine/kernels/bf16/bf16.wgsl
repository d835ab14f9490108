// bfloat16's codec for the 16-bit storage kernels (./half-storage.wgsl). Reference: ./bf16.ref.ts.

// Round to nearest, ties to even; NaN stays NaN (quiet bit set, sign kept), ±Inf stay ±Inf.
fn enc(b: u32) -> u32 {
  if ((b & 0x7fffffffu) > 0x7f800000u) { return (b >> 16u) | 0x40u; }
  return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

fn dec2(w: u32) -> vec2<u32> { return vec2<u32>(w << 16u, w & 0xffff0000u); }
