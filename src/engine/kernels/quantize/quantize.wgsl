// Absmax quantize / dequantize over a flat f32 tensor. Prepended by the TS side: quant/codec.wgsl.
// Two sections (split at the `//--- name` lines by src/engine/kernels/quantize.ts): `common` — the
// Params uniform, the format override and the scalar encode/decode every kernel shares, also used
// by the one-dispatch kernels of quant/group.wgsl — and `passes`, the general kernels below.
// Legend: N = elements (p.n); L = p.seg, the segment length — row length, group size, or N for
// per-tensor — or, with p.columns = 1, the column count (element i belongs to column i mod L);
// S = number of scales (p.nscales). Codes are packed per src/engine/quant/pack.ts.
//
// Quantize (passes) = four dispatches: clear_amax → absmax_seg | absmax_col → finalize_scales → encode.
// The absmax lives in the scales buffer as u32 bits: for non-negative floats the bit order is the
// value order, so u32 atomicMax is an exact float max (no float compare, no subnormal flushing), and
// finalize then overwrites the bits with s = div_rn(amax, QMAX) (0 when amax < 2^-110).
//
// Every kernel binds the uniform at 0; resources that differ per kernel alias the same binding
// numbers, which WGSL allows across entry points.
// Memory access: every global load and store is coalesced (consecutive threads, consecutive
// addresses); where a thread needs consecutive elements (absmax scans, packing codes into words) the
// data goes through workgroup memory.

//--- common
// 0 = fp8-e4m3, 1 = fp8-e5m2, 2 = int8, 3 = int4, 4 = nf4 (FORMAT_ID in src/engine/quant/formats.ts);
// FMT ≥ 3 packs 8 codes a word. NF4 is nearest-only (the TS side refuses stochastic rounding).
override FMT: u32 = 0u;

struct Params {
  n: u32,
  seg: u32,
  columns: u32,
  nscales: u32,
  items: u32, // absmax: elements per thread (segmented) or rows per thread (columns)
  seed: u32,
  stochastic: u32,
  qmax: f32,
  tiles: u32, // group.wgsl: workgroup tiles covering the tensor (the grid strides over them)
}

@group(0) @binding(0) var<uniform> p: Params;

// bits of 2^-110: groups whose absmax is below it get s = 0 (SCALE_TINY in quantizer.ts).
const TINY_BITS: u32 = 0x08800000u;

// The code that decodes to 0 (zero-scale groups, non-finite inputs): NF4's is 7.
fn zero_code() -> u32 {
  return select(0u, 7u, FMT == 4u);
}

// The code of v (= RN(x/s)) with the configured rounding; i = flat index, for the SR draw.
fn encode_one(v: f32, i: u32) -> u32 {
  if (FMT == 4u) { return nf4_encode(v); }
  if (p.stochastic != 0u) {
    let u = sr_uniform(p.seed, i);
    switch FMT {
      case 0u: { return e4m3_encode_sr(v, u); }
      case 1u: { return e5m2_encode_sr(v, u); }
      default: { return int_encode_sr(v, p.qmax, u); }
    }
  }
  switch FMT {
    case 0u: { return e4m3_encode(v); }
    case 1u: { return e5m2_encode(v); }
    default: { return int_encode(v, p.qmax); }
  }
}

fn decode_one(c: u32) -> f32 {
  switch FMT {
    case 0u: { return e4m3_decode(c); }
    case 1u: { return e5m2_decode(c); }
    case 2u: { return int8_decode(c); }
    case 3u: { return int4_decode(c); }
    default: { return nf4_decode(c); }
  }
}

//--- passes

// clear_amax, finalize_scales
@group(0) @binding(1) var<storage, read_write> amax_rw: array<u32>;
// absmax_seg, absmax_col, encode
@group(0) @binding(1) var<storage, read> xin: array<f32>;
@group(0) @binding(2) var<storage, read_write> amax_at: array<atomic<u32>>;
// encode, dequantize
@group(0) @binding(2) var<storage, read> scales_r: array<f32>;
@group(0) @binding(3) var<storage, read_write> words_w: array<u32>;
// dequantize
@group(0) @binding(1) var<storage, read> words_r: array<u32>;
@group(0) @binding(3) var<storage, read_write> out_w: array<f32>;

const WG: u32 = 256u;
// Segments one absmax tile can touch: tile = 256·items with items ≤ L, so ≤ 256 whole + 2 partial.
const TILE_SEGS: u32 = 258u;
// Largest absmax tile (256 threads × 16 elements), staged in workgroup memory with one pad word per
// 16 so that thread l reading its 16 consecutive words (stride 17) hits distinct banks.
const TILE_MAX: u32 = 4096u;

var<workgroup> wmax: array<atomic<u32>, TILE_SEGS>;
var<workgroup> stage: array<u32, 4352>; // TILE_MAX + TILE_MAX / 16
var<workgroup> wcodes: array<u32, WG>;

fn pad(j: u32) -> u32 {
  return j + (j >> 4u);
}

// Scale index of element i: its column (columns != 0) or its segment of `seg` elements.
fn seg_in(i: u32, seg: u32, columns: u32) -> u32 {
  if (columns != 0u) { return i % seg; }
  return i / seg;
}

fn seg_of(i: u32) -> u32 {
  return seg_in(i, p.seg, p.columns);
}

fn flat(gid: vec3<u32>, nwg: vec3<u32>) -> u32 {
  return gid.x + gid.y * nwg.x * WG;
}

@compute @workgroup_size(WG)
fn clear_amax(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = flat(gid, nwg);
  if (k < p.nscales) { amax_rw[k] = 0u; }
}

// |x| bits, with NaN/Inf counted as 0 (they are coded as 0 and must not set the scale).
fn abs_bits(i: u32) -> u32 {
  let a = bitcast<u32>(xin[i]) & 0x7fffffffu;
  return select(0u, a, a < 0x7f800000u);
}

// Contiguous segments (per tensor / row / group). A workgroup takes a tile of 256·items elements:
// loads it coalesced into workgroup memory, then each thread scans `items` consecutive elements
// keeping a running max per segment (boundaries tracked incrementally: no division per element),
// merges it into shared atomics when the segment changes, and the tile's maxima go to global
// atomics once.
@compute @workgroup_size(WG)
fn absmax_seg(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
  let items = p.items;
  let tsize = WG * items;
  let start = (wid.x + wid.y * nwg.x) * tsize;
  if (start >= p.n) { return; } // uniform per workgroup
  let end = min(start + tsize, p.n);
  for (var k = 0u; k < items; k++) {
    let j = k * WG + lid;
    var a = 0u;
    if (start + j < end) { a = abs_bits(start + j); }
    stage[pad(j)] = a;
  }
  for (var j = lid; j < TILE_SEGS; j += WG) { atomicStore(&wmax[j], 0u); }
  workgroupBarrier();
  let seg0 = start / p.seg;
  let b = start + lid * items;
  if (b < end) {
    var s = b / p.seg;
    var next = (s + 1u) * p.seg; // first element of the following segment
    var cur = 0u;
    let stop = min(b + items, end);
    for (var i = b; i < stop; i++) {
      if (i >= next) {
        if (cur != 0u) { atomicMax(&wmax[s - seg0], cur); }
        s = i / p.seg;
        next = (s + 1u) * p.seg;
        cur = 0u;
      }
      cur = max(cur, stage[pad(i - start)]);
    }
    if (cur != 0u) { atomicMax(&wmax[s - seg0], cur); }
  }
  workgroupBarrier();
  let nloc = (end - 1u) / p.seg - seg0 + 1u;
  for (var j = lid; j < nloc; j += WG) {
    let m = atomicLoad(&wmax[j]);
    if (m != 0u) { atomicMax(&amax_at[seg0 + j], m); }
  }
}

// Per column (L columns, N / L rows): thread = column (adjacent threads read adjacent addresses),
// grid y = blocks of `items` rows; one global atomic per thread and block.
@compute @workgroup_size(WG)
fn absmax_col(@builtin(global_invocation_id) gid: vec3<u32>) {
  let col = gid.x;
  if (col >= p.seg) { return; }
  let rows = p.n / p.seg;
  let r0 = gid.y * p.items;
  let r1 = min(r0 + p.items, rows);
  var m = 0u;
  for (var r = r0; r < r1; r++) { m = max(m, abs_bits(r * p.seg + col)); }
  if (m != 0u) { atomicMax(&amax_at[col], m); }
}

@compute @workgroup_size(WG)
fn finalize_scales(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let k = flat(gid, nwg);
  if (k >= p.nscales) { return; }
  let a = amax_rw[k];
  amax_rw[k] = select(bitcast<u32>(div_rn(bitcast<f32>(a), p.qmax)), 0u, a < TINY_BITS);
}

// One thread per element (coalesced loads); the workgroup's 256 codes are packed into 64 (INT4: 32)
// words through workgroup memory and written coalesced. A partial last word is zero-padded;
// zero-scale groups and non-finite inputs get the zero code.
@compute @workgroup_size(WG)
fn encode(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>) {
  let base = (wid.x + wid.y * nwg.x) * WG;
  if (base >= p.n) { return; } // uniform per workgroup
  let i = base + lid;
  var c = 0u; // padding of a partial last word
  if (i < p.n) {
    c = zero_code();
    let x = xin[i];
    let s = scales_r[seg_of(i)];
    if (s != 0.0 && (bitcast<u32>(x) & 0x7fffffffu) < 0x7f800000u) { c = encode_one(div_rn(x, s), i); }
  }
  wcodes[lid] = c;
  workgroupBarrier();
  let per = select(4u, 8u, FMT >= 3u);
  if (lid < WG / per) {
    var word = 0u;
    for (var j = 0u; j < per; j++) {
      let cj = wcodes[lid * per + j];
      if (FMT >= 3u) { word = set_nibble(word, j, cj); } else { word = set_byte(word, j, cj); }
    }
    let w = base / per + lid;
    if (w * per < p.n) { words_w[w] = word; }
  }
}

// The packed word holding element i's code, and the code within it.
fn word_of(i: u32) -> u32 {
  return select(i >> 2u, i >> 3u, FMT >= 3u);
}

fn code_in(word: u32, i: u32) -> u32 {
  if (FMT >= 3u) { return get_nibble(word, i); }
  return get_byte(word, i);
}

// One thread per element: coalesced f32 stores; neighbouring threads read the same word (cached).
@compute @workgroup_size(WG)
fn dequantize(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat(gid, nwg);
  if (i >= p.n) { return; }
  out_w[i] = decode_one(code_in(words_r[word_of(i)], i)) * scales_r[seg_of(i)];
}

// ---- Quantization-error probe (src/engine/train/probe.ts) --------------------------------------
// Partial sums of (x − x̂)² and x² for ‖x − x̂‖ / ‖x‖: workgroup k of a fixed grid writes its sums to
// parts[err_base + k] and parts[ref_base + k] (grid-stride loads, fixed-shape tree: the same bits
// every run); reduce.wgsl's norm_finalize then sums each block. x̂ is either the stored tensor
// decoded inline exactly as `dequantize` decodes it (quant_error: codes + scales, the values the
// backward pass will read) or a given fake-quantized copy (diff_partials).
struct ErrParams {
  n: u32,
  seg: u32,
  columns: u32,
  err_base: u32,
  ref_base: u32,
}

@group(0) @binding(0) var<uniform> pe: ErrParams;
// diff_partials: the fake-quantized copy
@group(0) @binding(2) var<storage, read> xhat_r: array<f32>;
// quant_error, diff_partials
@group(0) @binding(3) var<storage, read_write> err_parts: array<f32>;
// quant_error: the packed codes
@group(0) @binding(4) var<storage, read> err_words: array<u32>;

var<workgroup> err_red: array<vec2<f32>, WG>;

// Tree sum of (e, r) over the workgroup; lane 0 writes the two partials. Uniform control flow.
fn write_err_partials(e: f32, r: f32, lid: u32, k: u32) {
  err_red[lid] = vec2<f32>(e, r);
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s = s >> 1u) {
    if (lid < s) { err_red[lid] = err_red[lid] + err_red[lid + s]; }
    workgroupBarrier();
  }
  if (lid == 0u) {
    err_parts[pe.err_base + k] = err_red[0].x;
    err_parts[pe.ref_base + k] = err_red[0].y;
  }
}

@compute @workgroup_size(WG)
fn quant_error(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
               @builtin(num_workgroups) nwg: vec3<u32>) {
  var e = 0.0;
  var r = 0.0;
  for (var i = wid.x * WG + lid; i < pe.n; i += nwg.x * WG) {
    let x = xin[i];
    let d = x - decode_one(code_in(err_words[word_of(i)], i)) * scales_r[seg_in(i, pe.seg, pe.columns)];
    e = fma(d, d, e);
    r = fma(x, x, r);
  }
  write_err_partials(e, r, lid, wid.x);
}

@compute @workgroup_size(WG)
fn diff_partials(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                 @builtin(num_workgroups) nwg: vec3<u32>) {
  var e = 0.0;
  var r = 0.0;
  for (var i = wid.x * WG + lid; i < pe.n; i += nwg.x * WG) {
    let x = xin[i];
    let d = x - xhat_r[i];
    e = fma(d, d, e);
    r = fma(x, x, r);
  }
  write_err_partials(e, r, lid, wid.x);
}
