// Tiled, register-blocked fp32 GEMM:  C[M,N] (+)= alpha * op(A)[M,K] · op(B)[K,N]
//   M = rows of C (tokens B·T, or features for dW), N = columns of C, K = reduction length.
//   op(A) = A stored [M,K] row-major, or A stored [K,M] when TRANS_A (then op(A) = Aᵀ).
//   op(B) = B stored [K,N] row-major, or B stored [N,K] when TRANS_B (the HF [out,in] weight).
// The I/O helpers loadA4 / loadB4 / storeC4 and the bindings come from matmul-io.wgsl, chosen
// per call in TS: vec4 (16-byte) global access where the contiguous dimension is a multiple of
// 4, scalar with per-element bounds checks otherwise (the vocab-65 GEMMs). FULL_TILES (TS sets it
// when BM, BN and BK divide the shape) drops the bounds checks altogether.
//
// Block tile BM×BN per workgroup, BK deep; each thread owns a TM×TN micro tile (TM ∈ {4, 8},
// TN ∈ {4, 8, 16}) held as TM·TN/4 vec4 accumulators. A thread's rows are ty*4 + g*(BM*4/TM) +
// {0..3}: split into groups of 4 spaced BM*4/TM apart (columns likewise, BN*4/TN apart) so that a
// warp's vec4 reads of a k-row of the A and B tiles are distinct consecutive 16-byte words
// (conflict-free) or broadcasts. TN = 16 is cuBLAS's SIMT shape: 128 accumulators per thread, 128
// FMAs per 6 workgroup-memory reads, half the threads of TN = 8 for the same block tile.
//
// Workgroup memory holds both tiles k-major (As[k][m], Bs[k][n]) so the inner loop reads vec4
// along m and n whatever the transposes; rows are padded by 4 floats (vec4 alignment kept) so
// the transposed 4×4 block stores of neighbouring threads land on different banks. Two buffers
// alternate (tile t in buffer t % 2), so one barrier per BK step suffices. PREFETCH fetches the
// next tile into registers before the FMAs on the current one and stores it in the current tile's
// last k step, just before its barrier (global latency hidden behind the arithmetic, more live
// registers); without it the next tile is fetched and stored before the FMAs (fewer registers: more
// workgroups per SM hide the latency instead).
//
// Workgroup-memory indices are written so that Tint's integer range analysis proves them in
// bounds (loop counters with constant bounds, `t % 2u`, local_invocation_index): Dawn's robustness
// pass then leaves the inner loop's loads unclamped (no min() per load, constant offsets). That is
// why the FMA loop is inline in main() rather than in a function taking the buffer index.
//
// Split-K: workgroup z handles K range [z·kChunk, min(K, (z+1)·kChunk)) and stores its raw sum
// (alpha and accumulate are applied by the reduction, matmul-splitk.wgsl) into rows z·M.. of C,
// which is then the [S·M, N] partials workspace. Without split-K, z = 0 and kChunk ≥ K.
//
// SWIZZLE > 1 launches tiles in groups of SWIZZLE tile rows (column by column inside a group), so
// the workgroups resident at one time share A and B panels in L2.
//
// STREAM_K (text blocks that matmul.ts keeps for `_st<W>` choices only): the last, part-empty wave
// of tiles is shared out evenly (matmul.ts streamKPlan). The GEMM's own main() runs the whole waves'
// tiles, unchanged; the workgroups after them take a branch in front of it (matmul.ts streamKMain)
// whose body is main() with the STREAM_K blocks: each runs one part, the k tiles [kt, kt + nk) of
// tile t, from a table of parts, and stores it to C when it is the whole tile, else raw to a
// workspace slot that matmul-streamk.wgsl sums, in k order, into C.

override TRANS_A: bool = false;
override TRANS_B: bool = false;
override ACCUM: bool = false;
// SPECIALIZE = false takes the transposes, accumulate and the BK loop count from the uniform
// block instead, so one pipeline serves every combination. Tests use it to cover all of them on
// SwiftShader, which spends seconds compiling each GEMM pipeline; the model always runs
// specialized pipelines (everything above folded to constants, the FMA loop unrollable).
override SPECIALIZE: bool = true;
override FULL_TILES: bool = false;
override PREFETCH: bool = true;
override PUT_K: u32 = BK - 1u;                   // k step that stores the prefetched tile
override SWIZZLE: u32 = 0u;
override BM: u32 = 128u;
override BN: u32 = 128u;
override BK: u32 = 8u;
override TM: u32 = 8u;
override TN: u32 = 8u;

override WG: u32 = (BM / TM) * (BN / TN);
override BMP: u32 = BM + 4u;                     // padded row lengths (floats)
override BNP: u32 = BN + 4u;
override A_BUF: u32 = BK * BMP / 4u;             // vec4 count of one buffer
override B_BUF: u32 = BK * BNP / 4u;
override AS_LEN: u32 = 2u * A_BUF;
override BS_LEN: u32 = 2u * B_BUF;
// Operands stored k-major (A [K,M] when transposed, B [K,N] when not) are contiguous along m / n:
// their vec4 groups go to workgroup memory unchanged, up to 4 per thread. Operands stored k-minor
// (A [M,K], B [N,K]) are contiguous along k: a thread loads a 4×4 block (four rows' vec4s),
// transposes it in registers and stores four vec4s, so every workgroup-memory write is a whole
// vec4 (no per-component writes racing on a shared vec4). Units: groups or blocks per tile;
// nra/nrb: staging vec4s per thread (≤ 4, checked in TS).
fn aUnits() -> u32 { return select(BM * BK / 16u, BM * BK / 4u, transA()); }
fn bUnits() -> u32 { return select(BN * BK / 4u, BN * BK / 16u, transB()); }
fn nra() -> u32 { return select(4u, (aUnits() + WG - 1u) / WG, transA()); }
fn nrb() -> u32 { return select((bUnits() + WG - 1u) / WG, 4u, transB()); }

// flags: bit 0 transA, bit 1 transB, bit 2 accumulate; bk = BK (read only when !SPECIALIZE);
// kChunk: K range per split (a multiple of BK).
struct Params { M: u32, N: u32, K: u32, alpha: f32, flags: u32, bk: u32, kChunk: u32, _p0: u32 }
@group(0) @binding(3) var<uniform> P: Params;
// #if STREAM_K
// The tiles after the first dpTiles are run as `parts` parts (SKT: tile, first k tile, k tiles, slot).
struct StreamK { tilesX: u32, dpTiles: u32, parts: u32, _p0: u32 }
@group(0) @binding(4) var<uniform> SP: StreamK;
@group(0) @binding(5) var<storage, read_write> SKW: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read> SKT: array<vec4<u32>>;    // the parts (matmul.ts streamKPlan)
const NO_SLOT: u32 = 0xffffffffu;
var<private> skSlot: u32 = NO_SLOT;      // where storeRowSK puts a part: C (NO_SLOT) or this workspace slot
var<private> skOrigin: vec2<u32>;        // the part's tile origin (m0, n0)

// storeRow for a stream-K part: a whole tile's to C, a part of one raw into its workspace slot
// (the tile's BM×BN floats row-major).
fn storeRowSK(r: u32, q0: u32, v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>, rows: u32, N: u32) {
  if (skSlot == NO_SLOT) { storeRow(r, q0, v0, v1, v2, v3, rows, N); return; }
  let dq = BN / TN;                        // vec4s from one column group of the row to the next
  let o = (skSlot * BM * BN + (r - skOrigin.x) * BN + q0 - skOrigin.y) / 4u;
  SKW[o] = v0;
  if (TN >= 8u) { SKW[o + dq] = v1; }
  if (TN == 16u) { SKW[o + 2u * dq] = v2; SKW[o + 3u * dq] = v3; }
}
// #endif
// #if LOW_RANK
// The low-rank epilogue (LoRA, matmul.ts `lowRank`): C (+)= alpha·op(A)·op(B) + s·Uᵀ·op(V) in one
// pass, U stored [LR_R, M] at binding 4, V stored [LR_R, N] (or [N, LR_R] when LR_TRANS_V) at
// binding 5 (io.wgsl's lr_* sections), s = bitcast<f32>(P._p0). Never with split-K or stream-K.
override LR_R: u32 = 16u;
override LR_TRANS_V: bool = false;
// #endif

fn transA() -> bool { if (SPECIALIZE) { return TRANS_A; } return (P.flags & 1u) != 0u; }
fn transB() -> bool { if (SPECIALIZE) { return TRANS_B; } return (P.flags & 2u) != 0u; }
fn accumulate() -> bool { if (SPECIALIZE) { return ACCUM; } return (P.flags & 4u) != 0u; }

var<workgroup> As: array<vec4<f32>, AS_LEN>;
var<workgroup> Bs: array<vec4<f32>, BS_LEN>;

// Tile (r, c) coordinates of vec4 group g in the stored layout; c counts floats.
fn groupRC(g: u32, colsInTile: u32) -> vec2<u32> {
  return vec2<u32>(g / (colsInTile / 4u), (g % (colsInTile / 4u)) * 4u);
}

// Staging register u of this thread for the A tile at (m0, k0).
fn fetchA(u: u32, lid: u32, m0: u32, k0: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (transA()) {                          // stored [K,M]: group lid + u*WG, vec4 along m
    let g = lid + u * WG;
    if (g >= aUnits()) { return vec4<f32>(0.0); }
    let rc = groupRC(g, BM);
    return loadA4(k0 + rc.x, m0 + rc.y, rows, cols);
  }
  if (lid >= aUnits()) { return vec4<f32>(0.0); }
  let rc = groupRC(lid, BK);              // stored [M,K]: row u of block lid
  return loadA4(m0 + rc.x * 4u + u, k0 + rc.y, rows, cols);
}

fn fetchB(u: u32, lid: u32, n0: u32, k0: u32, rows: u32, cols: u32) -> vec4<f32> {
  if (!transB()) {                         // stored [K,N]: vec4 along n
    let g = lid + u * WG;
    if (g >= bUnits()) { return vec4<f32>(0.0); }
    let rc = groupRC(g, BN);
    return loadB4(k0 + rc.x, n0 + rc.y, rows, cols);
  }
  if (lid >= bUnits()) { return vec4<f32>(0.0); }
  let rc = groupRC(lid, BK);              // stored [N,K]: row u of block lid
  return loadB4(n0 + rc.x * 4u + u, k0 + rc.y, rows, cols);
}

fn putA(buf: u32, lid: u32, r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32>) {
  let off = buf * BK * BMP;
  if (transA()) {
    putDirectA(off, lid, r0);
    if (nra() > 1u) { putDirectA(off, lid + WG, r1); }
    if (nra() > 2u) { putDirectA(off, lid + 2u * WG, r2); }
    if (nra() > 3u) { putDirectA(off, lid + 3u * WG, r3); }
  } else if (lid < aUnits()) {
    let rc = groupRC(lid, BK);
    let o = (off + rc.y * BMP + rc.x * 4u) / 4u;
    let s = BMP / 4u;
    As[o] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
    As[o + s] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
    As[o + 2u * s] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
    As[o + 3u * s] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
  }
}

fn putDirectA(off: u32, g: u32, v: vec4<f32>) {
  if (g < aUnits()) {
    let rc = groupRC(g, BM);
    As[(off + rc.x * BMP + rc.y) / 4u] = v;
  }
}

fn putB(buf: u32, lid: u32, r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32>) {
  let off = buf * BK * BNP;
  if (!transB()) {
    putDirectB(off, lid, r0);
    if (nrb() > 1u) { putDirectB(off, lid + WG, r1); }
    if (nrb() > 2u) { putDirectB(off, lid + 2u * WG, r2); }
    if (nrb() > 3u) { putDirectB(off, lid + 3u * WG, r3); }
  } else if (lid < bUnits()) {
    let rc = groupRC(lid, BK);
    let o = (off + rc.y * BNP + rc.x * 4u) / 4u;
    let s = BNP / 4u;
    Bs[o] = vec4<f32>(r0.x, r1.x, r2.x, r3.x);
    Bs[o + s] = vec4<f32>(r0.y, r1.y, r2.y, r3.y);
    Bs[o + 2u * s] = vec4<f32>(r0.z, r1.z, r2.z, r3.z);
    Bs[o + 3u * s] = vec4<f32>(r0.w, r1.w, r2.w, r3.w);
  }
}

fn putDirectB(off: u32, g: u32, v: vec4<f32>) {
  if (g < bUnits()) {
    let rc = groupRC(g, BN);
    Bs[(off + rc.x * BNP + rc.y) / 4u] = v;
  }
}
// #if LEAN
// LEAN (`_ia` variants): with FULL_TILES (every load in bounds, vec4 I/O) each staging register's
// global vec4 index is worked out once, at k = 0 (aIndex, bIndex), and main() adds a constant per k
// tile, instead of row·cols + col per load and tile; and a thread that loads nothing for a staging
// register (aLoads, bLoads false) leaves it as it is instead of zeroing it (putA / putB never store
// it). Fewer instructions per k tile, but the driver schedules it faster for some tiles and shapes
// and slower for others, so it is a variant of its own that tuning picks.
fn aIndex(u: u32, lid: u32, m0: u32, M: u32, K: u32) -> u32 {
  if (transA()) { let rc = groupRC(lid + u * WG, BM); return rc.x * (M / 4u) + (m0 + rc.y) / 4u; }
  let rc = groupRC(lid, BK);
  return (m0 + rc.x * 4u + u) * (K / 4u) + rc.y / 4u;
}
fn bIndex(u: u32, lid: u32, n0: u32, N: u32, K: u32) -> u32 {
  if (!transB()) { let rc = groupRC(lid + u * WG, BN); return rc.x * (N / 4u) + (n0 + rc.y) / 4u; }
  let rc = groupRC(lid, BK);
  return (n0 + rc.x * 4u + u) * (K / 4u) + rc.y / 4u;
}
fn aLoads(u: u32, lid: u32) -> bool { return select(lid, lid + u * WG, transA()) < aUnits(); }
fn bLoads(u: u32, lid: u32) -> bool { return select(lid + u * WG, lid, transB()) < bUnits(); }
// #endif

// (tile row, tile column) of this workgroup; see SWIZZLE above.
fn tileOf(wid: vec3<u32>, nwg: vec3<u32>) -> vec2<u32> {
  if (SWIZZLE <= 1u) { return vec2<u32>(wid.y, wid.x); }
  let id = wid.y * nwg.x + wid.x;
  let span = SWIZZLE * nwg.x;              // workgroups in one group of SWIZZLE tile rows
  let first = (id / span) * SWIZZLE;
  let rows = min(nwg.y - first, SWIZZLE);  // the last group may be shorter
  let r = id % span;
  return vec2<u32>(first + r % rows, r / rows);
}

// One output row of the micro tile: its TN/4 column groups of 4, the first at q0, spaced BN·4/TN
// apart. `rows` bounds r (split-K rows are offset by z·M, and so is their bound). To accumulate,
// the row's old values are all read before any is written: a read after a write to the same
// buffer cannot be moved ahead of it by the compiler, so read-add-write per group waited out one
// memory round trip per group (32 per thread at 8×16); per row it is one per row.
fn storeRow(r: u32, q0: u32, v0: vec4<f32>, v1: vec4<f32>, v2: vec4<f32>, v3: vec4<f32>, rows: u32, N: u32) {
  let dq = BN * 4u / TN;
  var o0 = P.alpha * v0;
  var o1 = P.alpha * v1;
  var o2 = P.alpha * v2;
  var o3 = P.alpha * v3;
  if (accumulate()) {
    o0 += loadC4(r, q0, rows, N);
    if (TN >= 8u) { o1 += loadC4(r, q0 + dq, rows, N); }
    if (TN == 16u) {
      o2 += loadC4(r, q0 + 2u * dq, rows, N);
      o3 += loadC4(r, q0 + 3u * dq, rows, N);
    }
  }
  storeC4(r, q0, o0, rows, N);
  if (TN >= 8u) { storeC4(r, q0 + dq, o1, rows, N); }
  if (TN == 16u) {
    storeC4(r, q0 + 2u * dq, o2, rows, N);
    storeC4(r, q0 + 3u * dq, o3, rows, N);
  }
}

@compute @workgroup_size(WG)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
  let M = P.M;
  let N = P.N;
  let K = P.K;
// #if STREAM_K
  // Stream-K part j (matmul.ts streamKMain runs this text for the workgroups after the whole waves'):
  // k tiles [kt, kt + nk) of tile t, stored to C when that is the whole tile, else raw to a slot.
  let j = wid.y * nwg.x + wid.x - SP.dpTiles;
  if (j >= SP.parts) { return; }           // the grid's last row may have more
  let part = SKT[j];                       // (t, kt, nk, slot)
  let m0 = (part.x / SP.tilesX) * BM;
  let n0 = (part.x % SP.tilesX) * BN;
  skSlot = part.w;
  skOrigin = vec2<u32>(m0, n0);
// #else
  let tile = tileOf(wid, nwg);
  let m0 = tile.x * BM;
  let n0 = tile.y * BN;
// #endif
  let tx = lid % (BN / TN);
  let ty = lid / (BN / TN);
  let aRows = select(M, K, transA());
  let aCols = select(K, M, transA());
  let bRows = select(K, N, transB());
  let bCols = select(N, K, transB());
// #if STREAM_K
  let kBegin = part.y * BK;
  let nt = part.z;
// #else
  let kBegin = wid.z * P.kChunk;
  let nt = (min(K, kBegin + P.kChunk) - kBegin + BK - 1u) / BK;
// #endif

  // Accumulators and staging registers are named scalars-of-vec4, not arrays: no dynamic
  // indexing, so nothing can spill to local memory whether or not the driver unrolls. The
  // TM/TN branches fold away at pipeline creation. cRQ: micro-tile row R, column group Q.
  var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0); var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
  var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0); var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
  var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0); var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
  var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0); var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);
  var c02 = vec4<f32>(0.0); var c03 = vec4<f32>(0.0); var c12 = vec4<f32>(0.0); var c13 = vec4<f32>(0.0);
  var c22 = vec4<f32>(0.0); var c23 = vec4<f32>(0.0); var c32 = vec4<f32>(0.0); var c33 = vec4<f32>(0.0);
  var c42 = vec4<f32>(0.0); var c43 = vec4<f32>(0.0); var c52 = vec4<f32>(0.0); var c53 = vec4<f32>(0.0);
  var c62 = vec4<f32>(0.0); var c63 = vec4<f32>(0.0); var c72 = vec4<f32>(0.0); var c73 = vec4<f32>(0.0);
  var ra0 = vec4<f32>(0.0); var ra1 = vec4<f32>(0.0); var ra2 = vec4<f32>(0.0); var ra3 = vec4<f32>(0.0);
  var rb0 = vec4<f32>(0.0); var rb1 = vec4<f32>(0.0); var rb2 = vec4<f32>(0.0); var rb3 = vec4<f32>(0.0);

  // Tile 0 into buffer 0.
// #if LEAN
  let aStep = select(BK / 4u, BK * (M / 4u), transA());  // vec4s from one k tile's loads to the next
  let bStep = select(BK * (N / 4u), BK / 4u, transB());
  var kOffA = kBegin / BK * aStep;
  var kOffB = kBegin / BK * bStep;
  let ai0 = aIndex(0u, lid, m0, M, K); let ai1 = aIndex(1u, lid, m0, M, K);
  let ai2 = aIndex(2u, lid, m0, M, K); let ai3 = aIndex(3u, lid, m0, M, K);
  let bi0 = bIndex(0u, lid, n0, N, K); let bi1 = bIndex(1u, lid, n0, N, K);
  let bi2 = bIndex(2u, lid, n0, N, K); let bi3 = bIndex(3u, lid, n0, N, K);
  if (FULL_TILES) {
    if (aLoads(0u, lid)) { ra0 = loadA4i(ai0 + kOffA); }
    if (nra() > 1u && aLoads(1u, lid)) { ra1 = loadA4i(ai1 + kOffA); }
    if (nra() > 2u && aLoads(2u, lid)) { ra2 = loadA4i(ai2 + kOffA); }
    if (nra() > 3u && aLoads(3u, lid)) { ra3 = loadA4i(ai3 + kOffA); }
    if (bLoads(0u, lid)) { rb0 = loadB4i(bi0 + kOffB); }
    if (nrb() > 1u && bLoads(1u, lid)) { rb1 = loadB4i(bi1 + kOffB); }
    if (nrb() > 2u && bLoads(2u, lid)) { rb2 = loadB4i(bi2 + kOffB); }
    if (nrb() > 3u && bLoads(3u, lid)) { rb3 = loadB4i(bi3 + kOffB); }
  } else {
    if (aLoads(0u, lid)) { ra0 = fetchA(0u, lid, m0, kBegin, aRows, aCols); }
    if (nra() > 1u && aLoads(1u, lid)) { ra1 = fetchA(1u, lid, m0, kBegin, aRows, aCols); }
    if (nra() > 2u && aLoads(2u, lid)) { ra2 = fetchA(2u, lid, m0, kBegin, aRows, aCols); }
    if (nra() > 3u && aLoads(3u, lid)) { ra3 = fetchA(3u, lid, m0, kBegin, aRows, aCols); }
    if (bLoads(0u, lid)) { rb0 = fetchB(0u, lid, n0, kBegin, bRows, bCols); }
    if (nrb() > 1u && bLoads(1u, lid)) { rb1 = fetchB(1u, lid, n0, kBegin, bRows, bCols); }
    if (nrb() > 2u && bLoads(2u, lid)) { rb2 = fetchB(2u, lid, n0, kBegin, bRows, bCols); }
    if (nrb() > 3u && bLoads(3u, lid)) { rb3 = fetchB(3u, lid, n0, kBegin, bRows, bCols); }
  }
// #else
  ra0 = fetchA(0u, lid, m0, kBegin, aRows, aCols);
  if (nra() > 1u) { ra1 = fetchA(1u, lid, m0, kBegin, aRows, aCols); }
  if (nra() > 2u) { ra2 = fetchA(2u, lid, m0, kBegin, aRows, aCols); }
  if (nra() > 3u) { ra3 = fetchA(3u, lid, m0, kBegin, aRows, aCols); }
  rb0 = fetchB(0u, lid, n0, kBegin, bRows, bCols);
  if (nrb() > 1u) { rb1 = fetchB(1u, lid, n0, kBegin, bRows, bCols); }
  if (nrb() > 2u) { rb2 = fetchB(2u, lid, n0, kBegin, bRows, bCols); }
  if (nrb() > 3u) { rb3 = fetchB(3u, lid, n0, kBegin, bRows, bCols); }
// #endif
  putA(0u, lid, ra0, ra1, ra2, ra3);
  putB(0u, lid, rb0, rb1, rb2, rb3);
  workgroupBarrier();
  // The fragments of a tile's first k step are read before the tile starts (see the last step).
  var fa0 = As[ty]; var fa1 = fa0;
  var fb0 = Bs[tx]; var fb1 = fb0; var fb2 = fb0; var fb3 = fb0;
  if (TM == 8u) { fa1 = As[ty + BM / TM]; }
  if (TN >= 8u) { fb1 = Bs[tx + BN / TN]; }
  if (TN == 16u) { fb2 = Bs[tx + 2u * BN / TN]; fb3 = Bs[tx + 3u * BN / TN]; }
  let kLast = select(BK, P.bk, !SPECIALIZE) - 1u;

  for (var t = 0u; t < nt; t++) {
    let h = t % 2u;                        // buffer of tile t; tile t + 1 goes to 1 - h
    let more = t + 1u < nt;
    if (more) {
      let k0 = kBegin + (t + 1u) * BK;
// #if LEAN
      if (FULL_TILES) {
        kOffA += aStep;
        kOffB += bStep;
        if (aLoads(0u, lid)) { ra0 = loadA4i(ai0 + kOffA); }
        if (nra() > 1u && aLoads(1u, lid)) { ra1 = loadA4i(ai1 + kOffA); }
        if (nra() > 2u && aLoads(2u, lid)) { ra2 = loadA4i(ai2 + kOffA); }
        if (nra() > 3u && aLoads(3u, lid)) { ra3 = loadA4i(ai3 + kOffA); }
        if (bLoads(0u, lid)) { rb0 = loadB4i(bi0 + kOffB); }
        if (nrb() > 1u && bLoads(1u, lid)) { rb1 = loadB4i(bi1 + kOffB); }
        if (nrb() > 2u && bLoads(2u, lid)) { rb2 = loadB4i(bi2 + kOffB); }
        if (nrb() > 3u && bLoads(3u, lid)) { rb3 = loadB4i(bi3 + kOffB); }
      } else {
        if (aLoads(0u, lid)) { ra0 = fetchA(0u, lid, m0, k0, aRows, aCols); }
        if (nra() > 1u && aLoads(1u, lid)) { ra1 = fetchA(1u, lid, m0, k0, aRows, aCols); }
        if (nra() > 2u && aLoads(2u, lid)) { ra2 = fetchA(2u, lid, m0, k0, aRows, aCols); }
        if (nra() > 3u && aLoads(3u, lid)) { ra3 = fetchA(3u, lid, m0, k0, aRows, aCols); }
        if (bLoads(0u, lid)) { rb0 = fetchB(0u, lid, n0, k0, bRows, bCols); }
        if (nrb() > 1u && bLoads(1u, lid)) { rb1 = fetchB(1u, lid, n0, k0, bRows, bCols); }
        if (nrb() > 2u && bLoads(2u, lid)) { rb2 = fetchB(2u, lid, n0, k0, bRows, bCols); }
        if (nrb() > 3u && bLoads(3u, lid)) { rb3 = fetchB(3u, lid, n0, k0, bRows, bCols); }
      }
// #else
      ra0 = fetchA(0u, lid, m0, k0, aRows, aCols);
      if (nra() > 1u) { ra1 = fetchA(1u, lid, m0, k0, aRows, aCols); }
      if (nra() > 2u) { ra2 = fetchA(2u, lid, m0, k0, aRows, aCols); }
      if (nra() > 3u) { ra3 = fetchA(3u, lid, m0, k0, aRows, aCols); }
      rb0 = fetchB(0u, lid, n0, k0, bRows, bCols);
      if (nrb() > 1u) { rb1 = fetchB(1u, lid, n0, k0, bRows, bCols); }
      if (nrb() > 2u) { rb2 = fetchB(2u, lid, n0, k0, bRows, bCols); }
      if (nrb() > 3u) { rb3 = fetchB(3u, lid, n0, k0, bRows, bCols); }
// #endif
      // Buffer 1 - h was last read before the barrier of tile t - 1 (in its last k step).
      if (!PREFETCH) {
        putA(1u - h, lid, ra0, ra1, ra2, ra3);
        putB(1u - h, lid, rb0, rb1, rb2, rb3);
      }
    }

    let aBase = h * A_BUF + ty;
    let bBase = h * B_BUF + tx;
    // The constant bound is what lets the range analysis drop the clamps; the dynamic pipeline
    // stops at P.bk instead (a uniform the compiler cannot unroll on). Specialized pipelines get
    // this loop written out as BK blocks with a constant k (matmul.ts, unrollKSteps): the NVIDIA
    // Vulkan driver keeps a constant-bound loop a loop, with its counter and branch between the
    // steps and no overlap of one step's reads with the last one's FMAs; same bits either way.
    // The tile's barrier sits in its last k step, after that step's fragments are read and before
    // its FMAs, which then cover the barrier and the reads of the next tile's first fragments
    // (buffer 1 - h, just stored): no k step waits on workgroup memory right after a barrier.
    // With PREFETCH the next tile's staging registers are stored in step PUT_K (default the last,
    // the fastest; bench/gemm-ceiling.ts --put-k times the others).
    // unroll
    for (var k = 0u; k < BK; k++) {
      if (!SPECIALIZE && k >= P.bk) { break; }
      var a0 = fa0; var a1 = fa1;
      var b0 = fb0; var b1 = fb1; var b2 = fb2; var b3 = fb3;
      if (k > 0u) {
        let ai = aBase + k * (BMP / 4u);
        let bi = bBase + k * (BNP / 4u);
        a0 = As[ai];
        b0 = Bs[bi];
        if (TM == 8u) { a1 = As[ai + BM / TM]; }
        if (TN >= 8u) { b1 = Bs[bi + BN / TN]; }
        if (TN == 16u) { b2 = Bs[bi + 2u * BN / TN]; b3 = Bs[bi + 3u * BN / TN]; }
      }
      if (PREFETCH && more && k == min(PUT_K, kLast)) {
        putA(1u - h, lid, ra0, ra1, ra2, ra3);
        putB(1u - h, lid, rb0, rb1, rb2, rb3);
      }
      if (k == kLast) {
        workgroupBarrier();
        let an = (1u - h) * A_BUF + ty;
        let bn = (1u - h) * B_BUF + tx;
        fa0 = As[an];
        fb0 = Bs[bn];
        if (TM == 8u) { fa1 = As[an + BM / TM]; }
        if (TN >= 8u) { fb1 = Bs[bn + BN / TN]; }
        if (TN == 16u) { fb2 = Bs[bn + 2u * BN / TN]; fb3 = Bs[bn + 3u * BN / TN]; }
      }
      // #outer-product a0 a1 b0 b1 b2 b3
    }
  }

// #if LOW_RANK
  // s·Σ_j U[j, m]·V[j, n] onto the accumulators, which storeRow scales by alpha: hence s / alpha.
  // Per j one vec4 of U per 4 rows and one of V per 4 columns: r FMAs per output element. V [N, r]
  // (LR_TRANS_V, LoRA's B) is read in chunks of 2·BK of its columns, the tile's BN rows staged in
  // Bs as the main loop's B tile (coalesced loads; read from global, its vec4s would be strided).
  {
    let lrS = bitcast<f32>(P._p0) / P.alpha;
    let ur0 = m0 + ty * 4u;
    let ur1 = ur0 + BM * 4u / TM;
    let vq0 = n0 + tx * 4u;
    let vdq = BN * 4u / TN;
    let jc = select(LR_R, 2u * BK, LR_TRANS_V);
    for (var j0 = 0u; j0 < LR_R; j0 += jc) {
      if (LR_TRANS_V) {
        workgroupBarrier();                // the tiles' last reads, or the previous chunk's
        for (var w = lid; w < 2u * BK * BN / 4u; w += WG) {
          let jj = w % (2u * BK);
          let c = (w / (2u * BK)) * 4u;
          Bs[(jj * BNP + c) / 4u] = lrV4(j0 + jj, n0 + c, N);
        }
        workgroupBarrier();
      }
      for (var jj = 0u; jj < jc && j0 + jj < LR_R; jj++) {
        let j = j0 + jj;
        let u0 = lrS * lrU4(j, ur0, M);
        var v0: vec4<f32>; var v1: vec4<f32>; var v2: vec4<f32>; var v3: vec4<f32>;
        if (LR_TRANS_V) {
          let bi = jj * (BNP / 4u) + tx;
          v0 = Bs[bi];
          if (TN >= 8u) { v1 = Bs[bi + BN / TN]; }
          if (TN == 16u) { v2 = Bs[bi + 2u * BN / TN]; v3 = Bs[bi + 3u * BN / TN]; }
        } else {
          v0 = lrV4(j, vq0, N);
          if (TN >= 8u) { v1 = lrV4(j, vq0 + vdq, N); }
          if (TN == 16u) { v2 = lrV4(j, vq0 + 2u * vdq, N); v3 = lrV4(j, vq0 + 3u * vdq, N); }
        }
        // #outer-product u0 u1 v0 v1 v2 v3 (u1 = lrS * lrU4(j, ur1, M))
      }
    }
  }
// #endif
  let zRows = wid.z * M;                   // split-K partial z lives in rows z·M .. z·M + M - 1
  let bound = zRows + M;
  let r0 = zRows + m0 + ty * 4u;
  let q0 = n0 + tx * 4u;
  storeRow(r0, q0, c00, c01, c02, c03, bound, N);
  storeRow(r0 + 1u, q0, c10, c11, c12, c13, bound, N);
  storeRow(r0 + 2u, q0, c20, c21, c22, c23, bound, N);
  storeRow(r0 + 3u, q0, c30, c31, c32, c33, bound, N);
  if (TM == 8u) {
    let r1 = r0 + BM * 4u / TM;
    storeRow(r1, q0, c40, c41, c42, c43, bound, N);
    storeRow(r1 + 1u, q0, c50, c51, c52, c53, bound, N);
    storeRow(r1 + 2u, q0, c60, c61, c62, c63, bound, N);
    storeRow(r1 + 3u, q0, c70, c71, c72, c73, bound, N);
  }
}
