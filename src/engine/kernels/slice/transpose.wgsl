// Matrix transpose of a row-major f32 matrix: B[c, r] = A[r, c], A [R, C] → B [C, R].
// Used to give the forward GEMMs their weight as [in, out] (k-major, read with vec4s straight
// into workgroup memory) instead of the stored [out, in], whose k-minor tiles the GEMM must
// transpose on a quarter of its threads (see matmul.wgsl, llama.ts).
// One workgroup per 32×32 tile, 32×8 threads, 4 elements each: rows of the tile are read
// coalesced (consecutive threads, consecutive columns of A) into workgroup memory and written
// coalesced along B's rows; the tile is padded to 33 columns so that the column reads fall on
// 32 different banks. Tiles past the edges are clipped per element.
struct Params { rows: u32, cols: u32, tilesX: u32, _p: u32 }

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

const TS = 32u;
var<workgroup> tile: array<f32, 1056>;    // 32 × 33

@compute @workgroup_size(32, 8)
fn transpose(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
  let t = wid.x + wid.y * nwg.x;          // tile index (grid2d spreads tiles over x, then y)
  let ty = t / p.tilesX;
  let tx = t % p.tilesX;
  let r0 = ty * TS;
  let c0 = tx * TS;
  if (r0 >= p.rows) { return; }            // whole workgroup past the grid: uniform exit
  for (var i = 0u; i < 4u; i++) {
    let r = r0 + lid.y + 8u * i;
    let c = c0 + lid.x;
    if (r < p.rows && c < p.cols) { tile[(lid.y + 8u * i) * 33u + lid.x] = src[r * p.cols + c]; }
  }
  workgroupBarrier();
  for (var i = 0u; i < 4u; i++) {
    let c = c0 + lid.y + 8u * i;           // row of B
    let r = r0 + lid.x;                    // column of B
    if (c < p.cols && r < p.rows) { dst[c * p.rows + r] = tile[lid.x * 33u + lid.y + 8u * i]; }
  }
}
