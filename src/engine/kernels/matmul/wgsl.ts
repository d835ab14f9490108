/**
 * The fp32 GEMM's WGSL: src/engine/kernels/matmul/matmul.wgsl with the vec4 or scalar access sections of
 * src/engine/kernels/matmul/io.wgsl per operand, its `// #outer-product` lines written out, and the text edits
 * some specialized pipelines get (the k loop written out, the next buffer's index, the stream-K branch).
 */
import matmulSrc from './matmul.wgsl?raw';
import ioSrc from './io.wgsl?raw';
import { unrollLoops, wgslIf, wgslSection } from '../wgsl';

const section = (name: string) => wgslSection(ioSrc, name);

const OUTER = /^( *)\/\/ #outer-product (\w+) (\w+) (\w+) (\w+) (\w+) (\w+)(?: \((\w+) = (.+)\))?$/gm;

/**
 * matmul.wgsl with each `// #outer-product A0 A1 B0 B1 B2 B3 [(A1 = EXPR)]` line written out at its
 * indentation: the thread tile's update c[r][q] += A[r]·B[q] on the accumulators c00..c73, rows 0-3
 * from vec4 A0 and 4-7 from A1 (TM 8), columns from B0, B1 (TN >= 8), B2 and B3 (TN 16). One text
 * for the k loop's step and the low-rank epilogue's; `(A1 = EXPR)` makes A1 a `let` inside the TM 8
 * branch (the epilogue loads U's second rows only there).
 */
export function outerProducts(src: string): string {
  const out = src.replace(OUTER, (_m, ind: string, a0: string, a1: string, b0: string, b1: string, b2: string, b3: string, name?: string, expr?: string) => {
    if (name !== undefined && name !== a1) throw new Error(`matmul.wgsl: '#outer-product' defines ${name}, not its second A register ${a1}`);
    const rows = (a: string, first: number, q: number, b: string) => [0, 1, 2, 3].map((i) => `c${first + i}${q} += ${a}.${'xyzw'[i]} * ${b};`).join(' ');
    const half = (a: string, first: number, i: string) => [
      `${i}${rows(a, first, 0, b0)}`,
      `${i}if (TN >= 8u) { ${rows(a, first, 1, b1)} }`,
      `${i}if (TN == 16u) {`,
      `${i}  ${rows(a, first, 2, b2)}`,
      `${i}  ${rows(a, first, 3, b3)}`,
      `${i}}`,
    ];
    return [...half(a0, 0, ind), `${ind}if (TM == 8u) {`, ...(expr === undefined ? [] : [`${ind}  let ${a1} = ${expr};`]), ...half(a1, 4, `${ind}  `), `${ind}}`].join('\n');
  });
  if (out.includes('#outer-product')) throw new Error('matmul.wgsl: a \'#outer-product\' line is not of the form A0 A1 B0 B1 B2 B3 [(A1 = EXPR)]');
  return out;
}

/** matmul.wgsl as written out for every variant (its outer-product lines). */
const matmulText = outerProducts(matmulSrc);

const codeCache = new Map<string, string>();

// The dynamic pipeline's stop at the uniform BK; dead in specialized pipelines, and a `break`
// cannot be written out.
const K_GUARD = '      if (!SPECIALIZE && k >= P.bk) { break; }\n';

/**
 * matmul.wgsl with its k loop (marked `// unroll`) written out as `bk` blocks, each `let k = <j>u;`
 * and the loop's body: for specialized pipelines, whose BK is a constant. The NVIDIA Vulkan driver
 * does not unroll the loop itself (see the shader).
 */
export function unrollKSteps(src: string, bk: number): string {
  if (!src.includes(K_GUARD)) throw new Error('matmul.wgsl: the k loop\'s dynamic stop was not found');
  return unrollLoops(src.replace(K_GUARD, ''), { BK: bk });
}

const H_LINE = '    let h = t % 2u;                        // buffer of tile t; tile t + 1 goes to 1 - h\n';

/**
 * matmul.wgsl with the next tile's buffer, `1u - h` in the shader, written `hn = (t + 1u) % 2u`:
 * for the specialized pipelines of TN 16 tiles that do not accumulate. The two are equal, but the
 * NVIDIA Vulkan driver makes different code of them: faster for those tiles, slower for
 * accumulating ones and for the 8-wide tiles, and the same form as a branch on TN in the shader
 * gains nothing, hence a text edit for the one case (figures: docs/records/README.md).
 */
export function nextBufferByModulo(src: string): string {
  const uses = src.split('1u - h').length - 1;
  if (!src.includes(H_LINE) || uses !== 6) throw new Error(`matmul.wgsl: the tile loop's buffer index is not the expected one (${uses} uses of 1u - h)`);
  return src.replace(H_LINE, `${H_LINE}    let hn = (t + 1u) % 2u;\n`).replaceAll('(1u - h)', 'hn').replaceAll('1u - h', 'hn');
}

const MAIN_HEAD = '        @builtin(num_workgroups) nwg: vec3<u32>) {\n';

/** main()'s body: what follows its header up to its closing brace (main is the last function). */
function mainBody(src: string): { head: string; body: string } {
  const at = src.indexOf(MAIN_HEAD);
  const end = src.trimEnd();
  if (at < 0 || src.split(MAIN_HEAD).length !== 2 || !end.endsWith('\n}')) throw new Error('matmul.wgsl: main() is not the expected text');
  return { head: src.slice(0, at + MAIN_HEAD.length), body: end.slice(at + MAIN_HEAD.length, -1) };
}

/**
 * A stream-K GEMM's WGSL: the STREAM_K text's declarations, and a main() that is the plain GEMM's,
 * unchanged for the workgroups of the whole waves (tile (wid.y, wid.x) as always: the first
 * dpTiles tiles in row order), with the STREAM_K main() body as a branch before it for the
 * workgroups after them, one part each. Running every workgroup through the stream-K text slowed
 * the whole waves' tiles, and one workgroup running both parts of its range was slower than two;
 * this form keeps the whole waves at the plain GEMM's speed (figures: docs/records/README.md).
 */
export function streamKMain(skText: string, plainText: string): string {
  const sk = mainBody(skText);
  const plain = mainBody(plainText);
  const branch = sk.body.replace(/\bstoreRow\(/g, 'storeRowSK(').replace(/^(.)/gm, '  $1');
  return `${sk.head}  if (wid.y * nwg.x + wid.x >= SP.dpTiles) {  // a stream-K workgroup\n${branch}    return;\n  }\n${plain.body}}\n`;
}

/**
 * The WGSL for one choice of vec4/scalar access per operand (A, B, C; B's 'half': packed f16, io.wgsl b_half); `unrollBK` > 0 writes the
 * k loop out for a specialized pipeline of that BK, `tn16` (specialized TN 16 tiles that do not
 * accumulate) writes the next tile's buffer index as nextBufferByModulo does, `streamK` keeps the
 * shader's `// #if STREAM_K` blocks and `lean` its `// #if LEAN` ones, `lowRank` its `// #if
 * LOW_RANK` ones (the low-rank epilogue) with U's and V's access sections (vec4 or scalar); for the
 * other choices the text stays as it was measured.
 */
export function matmulCode(vecA: boolean, vecB: boolean | 'half', vecC: boolean, unrollBK = 0, tn16 = false, streamK = false, lean = false,
  lowRank?: { vecU: boolean; vecV: boolean }): string {
  if (lowRank && streamK) throw new Error('matmul: the low-rank epilogue does not run with stream-K (its parts are raw partial sums)');
  const lr = lowRank ? `${+lowRank.vecU}${+lowRank.vecV}` : '';
  const key = `${+vecA}${vecB === 'half' ? 2 : +vecB}${+vecC}:${unrollBK}:${+tn16}:${+streamK}:${+lean}:${lr}`;
  let code = codeCache.get(key);
  if (!code) {
    const text = (sk: boolean) => {
      const src = wgslIf(matmulText, { STREAM_K: sk, LEAN: lean, LOW_RANK: !!lowRank });
      const body = tn16 ? nextBufferByModulo(src) : src;
      return unrollBK > 0 ? unrollKSteps(body, unrollBK) : body;
    };
    code = [
      section(vecA ? 'a_vec4' : 'a_scalar'),
      section(vecB === 'half' ? 'b_half' : vecB ? 'b_vec4' : 'b_scalar'),
      section(vecC ? 'c_vec4' : 'c_scalar'),
      ...(lowRank ? [section(lowRank.vecU ? 'lr_u_vec4' : 'lr_u_scalar'), section(lowRank.vecV ? 'lr_v_vec4' : 'lr_v_scalar')] : []),
      streamK ? streamKMain(text(true), text(false)) : text(false),
    ].join('\n');
    codeCache.set(key, code);
  }
  return code;
}

