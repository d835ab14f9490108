/** References for the layout kernels (./slice.ts), as plain loops. */

/** [rows, width] block of columns c0.. of src [rows, cols]. */
export function gatherColumnsRef(src: ArrayLike<number>, rows: number, cols: number, c0: number, width: number): Float64Array {
  const out = new Float64Array(rows * width);
  for (let r = 0; r < rows; r++) for (let j = 0; j < width; j++) out[r * width + j] = src[r * cols + c0 + j];
  return out;
}

/** dst [rows, cols] with columns c0.. replaced by (or, accumulating, increased by) src [rows, width]. */
export function scatterColumnsRef(
  src: ArrayLike<number>,
  dst: ArrayLike<number>,
  rows: number,
  cols: number,
  c0: number,
  width: number,
  accumulate = false,
): Float64Array {
  const out = Float64Array.from(dst);
  for (let r = 0; r < rows; r++) {
    for (let j = 0; j < width; j++) {
      const o = r * cols + c0 + j;
      out[o] = accumulate ? out[o] + src[r * width + j] : src[r * width + j];
    }
  }
  return out;
}

/** [cols, rows] transpose of src [rows, cols]. */
export function transposeRef(src: ArrayLike<number>, rows: number, cols: number): Float64Array {
  const out = new Float64Array(rows * cols);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = src[r * cols + c];
  return out;
}
