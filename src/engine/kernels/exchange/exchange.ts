/**
 * Kernels of the data-parallel exchange (src/engine/kernels/exchange/exchange.wgsl; reference ./exchange.ref.ts): the
 * mean of C contributions laid out in one `inbox` buffer (contribution j at word stride·j, in the
 * wire's format), an fp32 non-finite check per contribution, and per-block integer sums of squares
 * and pairwise dot products of INT8 codes (screening). Built once per shape; the count is a 4-byte uniform write per call.
 */
import exchangeWgsl from './exchange.wgsl?raw';
import { type Binding, type Dispatch, type Runtime, Uniforms } from '../../gpu/runtime';
import { AGOQ_BLOCK, type GradWire } from '../../scheme/wire';
import { grid2d, requireBytes } from '../launch';
import { CODEC_WGSL } from '../quantize/quantize';

const WG = 256;
const CODE = [CODEC_WGSL, exchangeWgsl].join('\n');
/** Byte offset of `count` in XParams (n, nb, stride, count). */
const COUNT_OFFSET = 12;

export interface InboxShape {
  /** Elements per contribution. */
  n: number;
  wire: GradWire;
  /** Words from one contribution to the next (≥ its wire bytes / 4). */
  strideWords: number;
  /** Most contributions the dispatch may be told to read. */
  slots: number;
}

export interface ExchangeKernel {
  dispatch: Dispatch;
  /** How many contributions (from slot 0) the next run reads; 1..slots. */
  setCount(count: number): void;
  destroy(): void;
}

export function inboxBlocks(s: InboxShape): number {
  return s.wire === 'int8' ? Math.ceil(s.n / AGOQ_BLOCK) : 0;
}

function build(rt: Runtime, label: string, s: InboxShape, entryPoint: string, inbox: GPUBuffer, out: Binding, workgroups: [number, number?]): ExchangeKernel {
  if (AGOQ_BLOCK !== 256) throw new Error('exchange.wgsl assumes blocks of 256 (64 code words)');
  if (!(Number.isInteger(s.n) && s.n >= 0 && s.n < 2 ** 32 - 8)) throw new Error(`${label}: bad length ${s.n}`);
  const nb = inboxBlocks(s);
  const minWords = s.wire === 'int8' ? nb + Math.ceil(s.n / 4) : s.n;
  if (s.strideWords < minWords) throw new Error(`${label}: stride ${s.strideWords} words is below a contribution's ${minWords}`);
  requireBytes(label, 'inbox', inbox, s.strideWords * 4 * s.slots);
  const params = rt.uniform(label, new Uniforms().u32(s.n).u32(nb).u32(s.strideWords).u32(s.slots));
  const dispatch = rt.kernel({ label, code: CODE, entryPoint, bindings: [params, inbox, out], workgroups });
  return {
    dispatch,
    setCount(count: number) {
      if (!(Number.isInteger(count) && count >= 1 && count <= s.slots)) throw new Error(`${label}: count ${count} outside 1..${s.slots}`);
      rt.write(params, Uint32Array.of(count), COUNT_OFFSET);
    },
    destroy() {
      rt.mem.free(params);
    },
  };
}

/** mean[i] = (Σ_j decode(contribution j)[i]) / count, into `out` (n floats). */
export function exchangeMean(rt: Runtime, label: string, s: InboxShape, inbox: GPUBuffer, out: Binding): ExchangeKernel {
  requireBytes(label, 'out', out, s.n * 4);
  const threads = s.wire === 'int8' ? Math.ceil(s.n / 4) : s.n;
  return build(rt, `${label}.mean`, s, s.wire === 'int8' ? 'reduce_int8' : 'reduce_fp32', inbox, out, grid2d(rt, Math.ceil(threads / WG)));
}

/** flags[j] |= 1 where fp32 contribution j holds a NaN or ±Inf (flags: `slots` u32, cleared by the caller). */
export function exchangeCheckFp32(rt: Runtime, label: string, s: InboxShape, inbox: GPUBuffer, flags: Binding): ExchangeKernel {
  if (s.wire !== 'fp32') throw new Error(`${label}: the finite check is for fp32 contributions`);
  requireBytes(label, 'flags', flags, s.slots * 4);
  return build(rt, `${label}.check`, s, 'check_fp32', inbox, flags, grid2d(rt, Math.ceil(s.n / WG)));
}

/** sums[j·S + b] = Σ code² over block b of INT8 contribution j (S = ⌈n/256⌉ blocks). */
export function exchangeSumSquares(rt: Runtime, label: string, s: InboxShape, inbox: GPUBuffer, sums: Binding): ExchangeKernel {
  if (s.wire !== 'int8') throw new Error(`${label}: sums of squares are of INT8 codes`);
  const nb = inboxBlocks(s);
  requireBytes(label, 'sums', sums, Math.max(1, nb * s.slots) * 4);
  const max = rt.device.limits.maxComputeWorkgroupsPerDimension;
  if (Math.ceil(nb / WG) > max || s.slots > max) throw new Error(`${label}: ${nb} blocks × ${s.slots} contributions exceed the grid`);
  return build(rt, `${label}.sumsq`, s, 'sumsq_int8', inbox, sums, [nb === 0 ? 0 : Math.ceil(nb / WG), s.slots]);
}

/** Pairs j ≤ k of `count` contributions (the Gram kernel's y extent). */
export const gramPairs = (count: number): number => (count * (count + 1)) / 2;

/**
 * gram[q·S + b] = Σ c_j·c_k (i32) over block b, for pair q = (j, k), j ≤ k, in row order:
 * (0,0), (0,1), …, (0,C−1), (1,1), … of the first `count` INT8 contributions.
 */
export function exchangeGramInt8(rt: Runtime, label: string, s: InboxShape, inbox: GPUBuffer, gram: Binding): ExchangeKernel {
  if (s.wire !== 'int8') throw new Error(`${label}: the Gram kernel is for INT8 codes`);
  const nb = inboxBlocks(s);
  const pairs = gramPairs(s.slots);
  requireBytes(label, 'gram', gram, Math.max(1, nb * pairs) * 4);
  const max = rt.device.limits.maxComputeWorkgroupsPerDimension;
  if (Math.ceil(nb / WG) > max || pairs > max) throw new Error(`${label}: ${nb} blocks × ${pairs} pairs exceed the grid`);
  return build(rt, `${label}.gram`, s, 'gram_int8', inbox, gram, [nb === 0 ? 0 : Math.ceil(nb / WG), pairs]);
}
