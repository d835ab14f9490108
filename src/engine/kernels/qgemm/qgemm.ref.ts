/**
 * References for the quantized GEMMs (src/engine/kernels/qgemm/qgemm.ts): dequantize with the TS codecs
 * (src/engine/quant/), then C = X·Wᵀ in float64, so a GPU/reference tolerance covers only the
 * summation order. Shapes: X [M, K], W [N, K] (HF [out, in]), C [M, N].
 */
import { BITS, decodeScalar, type QuantFormat } from '../../quant/formats';
import { type CodeBits, unpackCodes } from '../../quant/pack';
import { dequantizeRef, quantizeRef } from '../../quant/quantizer';

/** C[m, n] = Σ_k x[m, k]·w[n, k] in float64. */
export function gemmNTRef(x: ArrayLike<number>, w: ArrayLike<number>, M: number, N: number, K: number): Float64Array {
  const c = new Float64Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += x[m * K + k] * w[n * K + k];
      c[m * N + n] = s;
    }
  }
  return c;
}

/** Row-wise group quantization: each of `rows` rows of length `cols` quantized in groups of G
 * (last group of a row partial when G ∤ cols). Codes packed per row (cols % codesPerWord == 0), so
 * row r's words start at r·cols/codesPerWord; scales [rows, ceil(cols/G)]. When G | cols this is
 * exactly quantizeRef(x, fmt, {kind: 'group', size: G}). */
export function quantizeRowGroupsRef(x: ArrayLike<number>, rows: number, cols: number, fmt: QuantFormat, G: number): { codes: Uint32Array; scales: Float32Array } {
  const cpw = 32 / BITS[fmt];
  if (cols % cpw) throw new Error(`quantizeRowGroupsRef: row length ${cols} is not a multiple of ${cpw}`);
  const kg = Math.ceil(cols / G);
  const codes = new Uint32Array((rows * cols) / cpw);
  const scales = new Float32Array(rows * kg);
  for (let r = 0; r < rows; r++) {
    const row = Array.prototype.slice.call(x, r * cols, (r + 1) * cols) as number[];
    const q = quantizeRef(row, fmt, { kind: 'group', size: G });
    codes.set(q.words, (r * cols) / cpw);
    scales.set(q.scales, r * kg);
  }
  return { codes, scales };
}

/** Inverse of quantizeRowGroupsRef (fp32 values, as dequantizeRef). */
export function dequantizeRowGroupsRef(codes: ArrayLike<number>, scales: ArrayLike<number>, rows: number, cols: number, fmt: QuantFormat, G: number): Float32Array {
  const bits = BITS[fmt] as CodeBits;
  const kg = Math.ceil(cols / G);
  const c = unpackCodes(codes, rows * cols, bits);
  const out = new Float32Array(rows * cols);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < cols; j++) out[r * cols + j] = decodeScalar(fmt, c[r * cols + j]) * scales[r * kg + Math.floor(j / G)];
  }
  return out;
}

/** (a) INT8 rows of X (scales sx[M]) × INT8 rows of W (scales sw[N]), per-row packed codes. */
export function qgemmI8Ref(xq: ArrayLike<number>, sx: ArrayLike<number>, wq: ArrayLike<number>, sw: ArrayLike<number>,
  M: number, N: number, K: number): Float64Array {
  const xd = dequantizeRef({ format: 'int8', granularity: { kind: 'row', rowLength: K }, n: M * K, words: Uint32Array.from(xq), scales: Float32Array.from(sx) });
  const wd = dequantizeRef({ format: 'int8', granularity: { kind: 'row', rowLength: K }, n: N * K, words: Uint32Array.from(wq), scales: Float32Array.from(sw) });
  return gemmNTRef(xd, wd, M, N, K);
}

/**
 * (a) bit for bit as the kernels compute it (dot4 and tensor cores alike): exact integer sums of
 * int8 codes, then f32(acc) · sx[m] · sw[n] rounded to f32 after each product. Exact while |acc| < 2^24.
 */
export function qgemmI8ExactRef(x: Int8Array, sx: Float32Array, w: Int8Array, sw: Float32Array, M: number, N: number, K: number): Float32Array {
  const c = new Float32Array(M * N);
  for (let m = 0; m < M; m++) {
    for (let n = 0; n < N; n++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += x[m * K + k] * w[n * K + k];
      c[m * N + n] = Math.fround(Math.fround(acc * sx[m]) * sw[n]);
    }
  }
  return c;
}

/** (b) fp32 X × W quantized in row groups of G along K. */
export function qgemmWeightOnlyRef(x: ArrayLike<number>, wq: ArrayLike<number>, ws: ArrayLike<number>, fmt: QuantFormat, G: number,
  M: number, N: number, K: number): Float64Array {
  return gemmNTRef(x, dequantizeRowGroupsRef(wq, ws, N, K, fmt, G), M, N, K);
}

/** (c) fp32 GEMM rounded to fp32, then INT4/INT8 row groups of G along N. */
export function qgemmQuantOutRef(x: ArrayLike<number>, w: ArrayLike<number>, bits: 4 | 8, G: number,
  M: number, N: number, K: number): { c: Float32Array; codes: Uint32Array; scales: Float32Array } {
  const c = Float32Array.from(gemmNTRef(x, w, M, N, K));
  return { c, ...quantizeRowGroupsRef(c, M, N, bits === 4 ? 'int4' : 'int8', G) };
}
