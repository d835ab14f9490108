// Order-free hash of a run of u32 words (reference: src/engine/kernels/hash.ref.ts): Σ over i of
// fmix32(word[i] ^ (base + i)·0x9e3779b1) mod 2^32, added into acc[0]. Integer addition commutes,
// so the workgroups' order does not change the result.
struct HParams { n: u32, base: u32, wgx: u32, _p: u32 }
@group(0) @binding(0) var<uniform> P: HParams;
@group(0) @binding(1) var<storage, read> data: array<u32>;
@group(0) @binding(2) var<storage, read_write> acc: array<atomic<u32>>;

const WG: u32 = 256u;
const PER: u32 = 16u;
var<workgroup> part: array<u32, 256>;

fn fmix32(x: u32) -> u32 {
  var h = x;
  h = h ^ (h >> 16u);
  h = h * 0x85ebca6bu;
  h = h ^ (h >> 13u);
  h = h * 0xc2b2ae35u;
  return h ^ (h >> 16u);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
  let start = (wid.y * P.wgx + wid.x) * WG * PER;
  var s = 0u;
  for (var k = 0u; k < PER; k++) {
    let i = start + k * WG + li;
    if (i < P.n) { s = s + fmix32(data[i] ^ ((P.base + i) * 0x9e3779b1u)); }
  }
  part[li] = s;
  workgroupBarrier();
  for (var w = WG / 2u; w > 0u; w = w >> 1u) {
    if (li < w) { part[li] = part[li] + part[li + w]; }
    workgroupBarrier();
  }
  if (li == 0u) { atomicAdd(&acc[0], part[0]); }
}
