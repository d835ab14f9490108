// GradScaler.update on the GPU: the state of loss-scale.wgsl (its header has the layout),
// changed after AdamW has read this step's inv_scale and found_inf.

struct Config { growth_factor: f32, backoff_factor: f32, growth_interval: u32, _p: u32 }

@group(0) @binding(0) var<storage, read_write> st: array<u32>;
@group(0) @binding(1) var<uniform> cfg: Config;

// inf and NaN by their bits: WGSL lets a compiler assume no inf/NaN in float arithmetic, not in bits.
fn non_finite(x: f32) -> bool {
  return (bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u;
}

// After AdamW: GradScaler.update — back off on found_inf, else grow after growth_interval good steps.
@compute @workgroup_size(1)
fn update() {
  var scale = bitcast<f32>(st[3]);
  if (st[2] != 0u) {
    scale = scale * cfg.backoff_factor;
    st[4] = 0u;
    st[5] = st[5] + 1u;
  } else {
    let good = st[4] + 1u;
    if (good == cfg.growth_interval) {
      let grown = scale * cfg.growth_factor;
      if (!non_finite(grown)) { scale = grown; }
      st[4] = 0u;
    } else {
      st[4] = good;
    }
  }
  st[3] = bitcast<u32>(scale);
  st[1] = bitcast<u32>(1.0 / scale);
}
