/**
 * TACO compression (Adaptive Scale-Hadamard + dual-scale FP8 E4M3), the plain-TS specification
 * the GPU kernels (src/engine/kernels/taco/taco.wgsl) reproduce code for code. From the authors' COCCL code
 * (src/device/compress/taco/taco.cu, fused_ash_compress_kernel); see docs brief §2.3.
 *
 * Per contiguous group of G elements (G ∈ {32..512}, a power of two; the last group zero-padded):
 *   a = clamp(448 / sqrt(mean(x²) + 1e-6), 1e-3, 1e3)    mean over all G slots, padding included
 *   y = H_G(a·x)/sqrt(G)                                   normalised Sylvester FWHT
 *   s = clamp(max|y| / 448, 1e-12, 1e6)
 *   q = e4m3(clamp(y/s, ±448))                             RNE, saturating
 * Decompress: ŷ = e4m3⁻¹(q)·s, x̂ = (H_G ŷ/sqrt(G)) · fp32(1/a)  (the CUDA code divides by a; the
 * reciprocal, ≤ 1 ulp away, saves the GPU a correctly rounded division per element).
 *
 * Choices made here (documented deviations / readings of the reference):
 * - mean(x²) divides by G, counting the padding zeros of a partial last group: the CUDA kernel runs
 *   one thread per slot and padding threads load 0. a cancels in y/s anyway unless a clamp binds.
 * - Non-finite inputs are read as 0 (the reference zeroes NaN/Inf at the FP8 cast; zeroing at the
 *   load keeps one NaN from poisoning its whole group's scales).
 * - All ceil(n/G)·G codes are stored, not n: the Hadamard spreads the padding zeros of the last
 *   group over all G coefficients, so truncating to n codes would make the inverse wrong (n = 1,
 *   G = 128 would come back as x/128). The payload is therefore ceil(n/G)·(G + 8) bytes, equal to
 *   the paper's n + 8·ceil(n/G) whenever G divides n (every real TP chunk), and its fp32 scale
 *   arrays are 4-byte aligned, so the GPU buffer is sent over the wire as is.
 * - All arithmetic is fp32 (Math.fround after each op), in the GPU's order: sum of squares as an
 *   adjacent-pair tree, FWHT strides ascending, ×fp32(1/sqrt(G)) for the normalisation.
 */
import { decodeE4M3, encodeE4M3 } from './fp8';
import { butterfliesF32, isPow2, rsqrtF32 } from './hadamard';

const f = Math.fround;
export const TACO_FP8_MAX = 448;
export const TACO_GROUP_SIZES = [32, 64, 128, 256, 512] as const;
const LAMBDA = f(1e-6);
const V_FLOOR = f(1e-12);
const A_MIN = f(1e-3);
const A_MAX = f(1e3);
const S_MIN = f(1e-12);
const S_MAX = f(1e6);

export interface TacoCompressed {
  /** ceil(n/G)·G FP8 E4M3 codes (the last group's padded tail included). */
  codes: Uint8Array;
  /** Quantization scale per group. */
  s: Float32Array;
  /** Adaptive (RMS) scale per group. */
  a: Float32Array;
}

export function checkTacoGroup(G: number): void {
  if (!isPow2(G) || G < 32 || G > 512) throw new Error(`TACO: group size ${G} not in {32, 64, 128, 256, 512}`);
}

export function tacoGroups(n: number, G: number): number {
  return Math.ceil(n / G);
}

/** Payload bytes: codes of every group (padded tail included), then s and a as fp32. */
export function tacoPayloadBytes(n: number, G: number): number {
  return tacoGroups(n, G) * (G + 8);
}

/** Word (u32) offsets of the payload sections, shared with the GPU kernels. */
export function tacoLayout(n: number, G: number): { groups: number; codeWords: number; sOff: number; aOff: number; words: number } {
  const groups = tacoGroups(n, G);
  const codeWords = (groups * G) / 4;
  return { groups, codeWords, sOff: codeWords, aOff: codeWords + groups, words: codeWords + 2 * groups };
}

function clamp(v: number, lo: number, hi: number): number {
  return Math.min(Math.max(v, lo), hi);
}

/** Adjacent-pair tree sum of fp32 values (the order the GPU's xor butterflies produce). */
function treeSumF32(v: Float32Array): number {
  let cur = v;
  while (cur.length > 1) {
    const next = new Float32Array(cur.length >> 1);
    for (let i = 0; i < next.length; i++) next[i] = cur[2 * i] + cur[2 * i + 1];
    cur = next;
  }
  return cur[0];
}

/** Per-group adaptive scale from the (already sanitised, zero-padded) group values. */
export function tacoAdaptiveScale(group: Float32Array): number {
  const sq = new Float32Array(group.length);
  for (let i = 0; i < group.length; i++) sq[i] = group[i] * group[i];
  const mean = f(treeSumF32(sq) * f(1 / group.length));
  const v = Math.max(f(mean + LAMBDA), V_FLOOR);
  return clamp(f(TACO_FP8_MAX / f(Math.sqrt(v))), A_MIN, A_MAX);
}

/** One group of G codes from transformed values y (fp32): returns s, writes codes. */
function quantizeGroup(y: Float32Array, codes: Uint8Array, off: number): number {
  let mx = 0;
  for (let i = 0; i < y.length; i++) mx = Math.max(mx, Math.abs(y[i]));
  const s = clamp(f(mx / TACO_FP8_MAX), S_MIN, S_MAX);
  for (let i = 0; i < y.length; i++) {
    codes[off + i] = encodeE4M3(clamp(f(y[i] / s), -TACO_FP8_MAX, TACO_FP8_MAX));
  }
  return s;
}

function loadGroup(x: Float32Array, g: number, G: number): Float32Array {
  const v = new Float32Array(G);
  const end = Math.min(x.length, (g + 1) * G);
  for (let i = g * G; i < end; i++) {
    const xi = x[i];
    v[i - g * G] = Number.isFinite(xi) ? xi : 0;
  }
  return v;
}

export function tacoCompressRef(x: Float32Array, G: number): TacoCompressed {
  checkTacoGroup(G);
  const groups = tacoGroups(x.length, G);
  const codes = new Uint8Array(groups * G);
  const s = new Float32Array(groups);
  const a = new Float32Array(groups);
  const r = rsqrtF32(G);
  for (let g = 0; g < groups; g++) {
    const v = loadGroup(x, g, G);
    a[g] = tacoAdaptiveScale(v);
    for (let i = 0; i < G; i++) v[i] = v[i] * a[g];
    butterfliesF32(v, 0, G);
    for (let i = 0; i < G; i++) v[i] = v[i] * r;
    s[g] = quantizeGroup(v, codes, g * G);
  }
  return { codes, s, a };
}

export function tacoDecompressRef(c: TacoCompressed, n: number, G: number): Float32Array {
  checkTacoGroup(G);
  const groups = tacoGroups(n, G);
  if (c.codes.length !== groups * G || c.s.length !== groups || c.a.length !== groups) {
    throw new Error(`TACO: compressed sizes (${c.codes.length}, ${c.s.length}, ${c.a.length}) do not fit n=${n}, G=${G}`);
  }
  const out = new Float32Array(n);
  const r = rsqrtF32(G);
  const y = new Float32Array(G);
  for (let g = 0; g < groups; g++) {
    for (let i = 0; i < G; i++) y[i] = decodeE4M3(c.codes[g * G + i]) * c.s[g];
    butterfliesF32(y, 0, G);
    const end = Math.min(n, (g + 1) * G);
    const inv = f(1 / c.a[g]);
    for (let i = g * G; i < end; i++) out[i] = f(f(y[i - g * G] * r) * inv);
  }
  return out;
}

/**
 * The same transform without the adaptive scale: per-group normalised Hadamard + absmax FP8.
 * TACO equals this up to fp32 rounding (a cancels in y/s); the alternative reference in tests.
 */
export function hadamardFp8Ref(x: Float32Array, G: number): { codes: Uint8Array; s: Float32Array; xhat: Float32Array } {
  checkTacoGroup(G);
  const groups = tacoGroups(x.length, G);
  const codes = new Uint8Array(groups * G);
  const s = new Float32Array(groups);
  const xhat = new Float32Array(x.length);
  const r = rsqrtF32(G);
  for (let g = 0; g < groups; g++) {
    const v = loadGroup(x, g, G);
    butterfliesF32(v, 0, G);
    for (let i = 0; i < G; i++) v[i] = v[i] * r;
    s[g] = quantizeGroup(v, codes, g * G);
    for (let i = 0; i < G; i++) v[i] = decodeE4M3(codes[g * G + i]) * s[g];
    butterfliesF32(v, 0, G);
    const end = Math.min(x.length, (g + 1) * G);
    for (let i = g * G; i < end; i++) xhat[i] = v[i - g * G] * r;
  }
  return { codes, s, xhat };
}

/** Serialises to the wire/GPU layout: [codes][s as fp32 LE][a as fp32 LE]. */
export function tacoPayload(c: TacoCompressed): Uint8Array {
  const groups = c.s.length;
  if (c.a.length !== groups || c.codes.length % 4 !== 0 || (groups && c.codes.length % groups !== 0)) {
    throw new Error('TACO: inconsistent compressed arrays');
  }
  const out = new Uint8Array(c.codes.length + 8 * groups);
  out.set(c.codes, 0);
  const dv = new DataView(out.buffer);
  for (let g = 0; g < groups; g++) {
    dv.setFloat32(c.codes.length + 4 * g, c.s[g], true);
    dv.setFloat32(c.codes.length + 4 * (groups + g), c.a[g], true);
  }
  return out;
}

/** Parses a payload of a chunk of n elements; throws on a size that does not match (n, G). */
export function parseTacoPayload(bytes: Uint8Array, n: number, G: number): TacoCompressed {
  checkTacoGroup(G);
  if (!Number.isInteger(n) || n < 0) throw new Error(`TACO: bad element count ${n}`);
  const want = tacoPayloadBytes(n, G);
  if (bytes.byteLength !== want) {
    throw new Error(`TACO: payload of ${bytes.byteLength} bytes, expected ${want} for n=${n}, G=${G}`);
  }
  const groups = tacoGroups(n, G);
  const cb = groups * G;
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const s = new Float32Array(groups);
  const a = new Float32Array(groups);
  for (let g = 0; g < groups; g++) {
    s[g] = dv.getFloat32(cb + 4 * g, true);
    a[g] = dv.getFloat32(cb + 4 * (groups + g), true);
  }
  // Scales come from peers: anything the compressor cannot produce is rejected, not decoded.
  for (let g = 0; g < groups; g++) {
    if (!(s[g] >= S_MIN && s[g] <= S_MAX && a[g] >= A_MIN && a[g] <= A_MAX)) {
      throw new Error(`TACO: group ${g} has scales s=${s[g]}, a=${a[g]} outside the compressor's range`);
    }
  }
  return { codes: bytes.slice(0, cb), s, a };
}
