// Dynamic loss scaling on the GPU (torch.amp.GradScaler semantics; the TS state machine it mirrors
// is updateLossScale in loss-scale.ts). The scale lives in a storage buffer so that a step submitted
// before the previous one is read back still uses the right scale: every decision is made here, in
// queue order, and the CPU only reads the state when it wants to (logging, checkpoints).
//
// State (8 words): 0 norm: the unscaled global gradient norm of the last step (non-finite: skipped)
//                  1 inv_scale = 1 / scale     2 found_inf (u32: 1 = the last step was skipped)
//                  3 scale                     4 growth_tracker (u32)     5 skipped steps (u32)
// This file: the check before AdamW (loss-scale-update.wgsl: the update after it).
// AdamW binds this buffer as its gradient norm (word 0) and reads words 1, 2 (loss-scale-gpu.ts).

@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<storage, read> gnorm: array<f32>;

// inf and NaN by their bits: WGSL lets a compiler assume no inf/NaN in float arithmetic, not in bits.
fn non_finite(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
}

// After the global norm of the scaled gradients, before AdamW: found_inf, and the unscaled norm
// (scaled norm · inv_scale, exact for a power-of-two scale) that clipping uses.
@compute @workgroup_size(1)
fn check() {
  let n = gnorm[0];
  let found = non_finite(n);
  st[2] = select(0u, 1u, found);
  st[0] = select(bitcast<u32>(n * bitcast<f32>(st[1])), bitcast<u32>(n), found);
}

