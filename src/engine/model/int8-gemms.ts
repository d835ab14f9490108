/**
 * The linear layers' GEMMs in INT8, as real compute (not fake quantization): each GEMM quantizes
 * its operands into the shared INT8 buffers of the plan (compute-plan.ts int8Buffers) right before
 * it runs — W too, unless the plan makes every weight's codes once per step (./weight-codes.ts) —
 * multiplies the codes exactly in integers and dequantizes in the epilogue (row scale ×
 * column scale, fp32 out, added to C where the model accumulates).
 *   forward  Y (+)= X·Wᵀ  X per token (row), W per output channel (row of W [out, in]);
 *   dX       dX (+)= dY·W  dY per token, W per input channel (rows of Wᵀ, quantized from W directly);
 *   dW       dW = dYᵀ·X    both per channel in blocks of G tokens (Jetfire-style), scales folded per block,
 *                          or per channel over all tokens (G 'all').
 * Forward, dX and the dW over all tokens run qgemmI8 (tensor cores where enableI8TensorCores turned
 * them on, else dot4): row scales × column scales is exactly that GEMM's form, with A = dYᵀ and
 * B = Xᵀ. Blocked dW runs the dot4 blocked kernel. Every GEMM's path is recorded under its label.
 * The dW over all tokens splits K into slices where that fills the GPU better and the caller lends
 * a workspace (qgemmI8Steps: the same bits as one pass); the slice count is recorded too.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { ATTN_SCORE_PATH } from '../kernels/attention/i8';
import { i8GemmPath, qgemmI8, qgemmI8Path, qgemmI8Steps } from '../kernels/qgemm/qgemm';
import { qgemmI8Blocked, quantizeColumnsI8, quantizeTransposedI8 } from '../kernels/qgemm/block';
import { buildQuantize } from '../kernels/quantize/quantize';
import type { GemmPath, LayerCompute } from './compute-plan';
import type { ModelDims } from './dims';
import type { ParamLayout } from './params';
import type { I8Operand } from './weight-codes';

/** A GEMM's weight: fp32 (quantized right before the GEMM) or its codes made earlier in the step (./weight-codes.ts). */
export type GemmWeight = Binding | I8Operand;
const isCoded = (w: GemmWeight): w is I8Operand => 'codes' in w;

export class Int8Gemms {
  /** The kernel each INT8 GEMM runs, by label. */
  readonly paths = new Map<string, GemmPath>();
  /** The K slices of each dW GEMM that ran split (by label; absent: one pass). */
  readonly splits = new Map<string, number>();

  constructor(
    private readonly rt: Runtime,
    private readonly dims: ModelDims,
    private readonly b: (key: string) => GPUBuffer,
    /** Registers a stochastic-rounding quantizer whose seed changes every step. */
    private readonly onSeed: (label: string, setSeed: (seed: number) => void) => void,
  ) {}

  /** Per-row INT8 codes of x [M, K] into i8.a / i8.as (the A operand of the next forward or dX GEMMs). */
  quantizeRows(label: string, x: Binding, M: number, K: number, rounding: LayerCompute['gradRounding'] = 'nearest'): Dispatch[] {
    const k = buildQuantize(this.rt, { format: 'int8', granularity: { kind: 'row', rowLength: K }, n: M * K }, x,
      { words: this.b('i8.a'), scales: this.b('i8.as'), rounding });
    if (rounding === 'stochastic') this.onSeed(`${label}.q`, (s) => k.setSeed(s));
    return k.dispatches;
  }

  /**
   * out [M, N] (+)= X·Wᵀ with X's codes already in i8.a (quantizeRows), or in the buffers keyed
   * `xCodes` (a saved tensor's INT8-per-row storage), and W [N, K]: fp32, quantized here per output
   * channel into i8.w, or its codes.
   */
  forward(label: string, w: GemmWeight, out: Binding, M: number, N: number, K: number, accumulate: boolean,
    [xq, sx]: [string, string] = ['i8.a', 'i8.as']): Dispatch[] {
    const x = { codes: this.b(xq), scales: this.b(sx) };
    if (isCoded(w)) return [this.gemm(label, out, M, N, K, accumulate, x, w)];
    const qw = buildQuantize(this.rt, { format: 'int8', granularity: { kind: 'row', rowLength: K }, n: N * K }, w,
      { words: this.b('i8.w'), scales: this.b('i8.ws') });
    return [...qw.dispatches, this.gemm(label, out, M, N, K, accumulate, x)];
  }

  /**
   * dX [M, N] (+)= dY·W: dY [M, K] per token, W [K, N] (HF [out, in], K = out) per input channel
   * (fp32, quantized here into i8.w, or the codes of Wᵀ). dy null: its codes are already in i8.a
   * (written by the kernel that produced it).
   */
  dx(label: string, dy: Binding | null, w: GemmWeight, out: Binding, M: number, N: number, K: number, accumulate: boolean, rounding: LayerCompute['gradRounding']): Dispatch[] {
    const qw = isCoded(w) ? []
      : quantizeColumnsI8(this.rt, { label: `${label}.wT`, x: w, R: K, CN: N, codes: this.b('i8.w'), scales: this.b('i8.ws'), amax: this.b('i8.amax') }).dispatches;
    return [...(dy ? this.quantizeRows(label, dy, M, K, rounding) : []), ...qw, this.gemm(label, out, M, N, K, accumulate, undefined, isCoded(w) ? w : undefined)];
  }

  /** Xᵀ codes of x [tokens, width] per channel (in blocks of G tokens, or over all) into i8.xt (several dW GEMMs of one input share them). */
  dwInput(label: string, x: Binding, width: number, G: LayerCompute['dwBlock']): Dispatch[] {
    return this.transposed(`${label}.xT`, x, width, G, 'i8.xt', 'i8.xts', 'nearest').dispatches;
  }

  /**
   * dW [outW, inW] = dYᵀ·X over the tokens, X's codes already in i8.xt (dwInput). Over all tokens
   * it may split K, its partials in `workspace` (a buffer dead at this point; none: one pass).
   */
  dw(label: string, dy: Binding, outW: number, inW: number, c: Binding, G: LayerCompute['dwBlock'], rounding: LayerCompute['gradRounding'],
    workspace?: GPUBuffer): Dispatch[] {
    const q = this.transposed(`${label}.dyT`, dy, outW, G, 'i8.gt', 'i8.gts', rounding);
    if (rounding === 'stochastic') this.onSeed(`${label}.dyT`, q.setSeed);
    const K = this.dims.N;
    if (G === 'all') {
      this.paths.set(label, qgemmI8Path(this.rt, K));
      const g = qgemmI8Steps(this.rt, {
        label, xq: this.b('i8.gt'), sx: this.b('i8.gts'), wq: this.b('i8.xt'), sw: this.b('i8.xts'), c, M: outW, N: inW, K, workspace,
      });
      if (g.splitK > 1) this.splits.set(label, g.splitK);
      else this.splits.delete(label);
      return [...q.dispatches, ...g.dispatches];
    }
    this.paths.set(label, 'int8-dot4');
    return [...q.dispatches, qgemmI8Blocked(this.rt, {
      label, aq: this.b('i8.gt'), sa: this.b('i8.gts'), bq: this.b('i8.xt'), sb: this.b('i8.xts'), c, M: outW, N: inW, K, G,
    })];
  }

  /** INT8 codes of xᵀ for x [tokens, width] into codes/scales: per channel in blocks of G tokens, or over all of them. */
  private transposed(label: string, x: Binding, width: number, G: LayerCompute['dwBlock'], codes: string, scales: string,
    rounding: LayerCompute['gradRounding']): { dispatches: Dispatch[]; setSeed(seed: number): void } {
    const a = { label, x, R: this.dims.N, CN: width, codes: this.b(codes), scales: this.b(scales), rounding };
    if (G === 'all') return quantizeColumnsI8(this.rt, { ...a, amax: this.b('i8.amax') });
    const k = quantizeTransposedI8(this.rt, { ...a, G });
    return { dispatches: [k.dispatch], setSeed: k.setSeed };
  }

  /**
   * out (+)= diag(sa)·(A·Bᵀ)·diag(sb) on qgemmI8 (its path, tensor cores or dot4, recorded): A's
   * codes and scales X (or dY) in i8.a by default, B's W in i8.w by default.
   */
  private gemm(label: string, out: Binding, M: number, N: number, K: number, accumulate: boolean,
    x: I8Operand = { codes: this.b('i8.a'), scales: this.b('i8.as') }, w: I8Operand = { codes: this.b('i8.w'), scales: this.b('i8.ws') }): Dispatch {
    this.paths.set(label, qgemmI8Path(this.rt, K));
    return qgemmI8(this.rt, { label, xq: x.codes, sx: x.scales, wq: w.codes, sw: w.scales, c: out, M, N, K, accumulate });
  }
}

const joinPaths = (got: Iterable<GemmPath>) => [...new Set(got)].sort().join('+') || 'none';

export interface LayerPaths {
  layer: number;
  forward: string;
  dx: string;
  dw: string;
  /** The attention scores' kernel (fp32, int8-dot4, int8-tensor-core, f16-tensor-core), recorded under `L<l>.attn`. */
  attention: string;
  /** The attention backward's dP = dO·Vᵀ kernel (fp32, int8-dot4, f16-tensor-core; 'none' without a backward), under `L<l>.attnDp`. */
  attentionDp: string;
  /** Only where the scheme asks this layer for f16: what was asked and what runs (the plan's LayerF16Paths note). */
  f16?: string;
}

const withF16 = (p: LayerPaths, note: string | null | undefined): LayerPaths => (note ? { ...p, f16: note } : p);

/**
 * Per layer, the kernel its forward, dX and dW GEMMs ran ('fp32', 'int8-dot4', 'int8-tensor-core';
 * several joined by '+' where a layer's GEMMs differ, e.g. by K; 'none' without a backward).
 */
export function computePaths(layers: { compute: LayerCompute }[], paths: ReadonlyMap<string, GemmPath>, training: boolean,
  f16Notes: readonly (string | null)[] = []): LayerPaths[] {
  return layers.map(({ compute: c }, l) => {
    const of = (fmt: 'fp32' | 'int8', suffix: string): string => {
      const got: GemmPath[] = [];
      for (const [label, path] of paths) if (label.startsWith(`L${l}.`) && label.endsWith(suffix)) got.push(path);
      // An f16 GEMM executes as 'fp32' in LayerCompute; its recorded path says what ran.
      if (fmt === 'fp32') return got.some((p) => p.startsWith('f16-')) ? joinPaths(got) : 'fp32';
      return joinPaths(got);
    };
    return withF16({
      layer: l,
      forward: of(c.forward, '_proj'),
      dx: training ? of(c.dx, '.dx') : 'none',
      dw: training ? of(c.dw, '.dw') : 'none',
      // An f16 attention executes as 'fp32' in LayerCompute; where its f16 kernels ran, their path is recorded.
      attention: paths.get(`L${l}.attn`) ?? (c.attentionQk === 'fp32' ? 'fp32' : 'none'),
      attentionDp: !training ? 'none' : paths.get(`L${l}.attnDp`) ?? (c.attentionDp === 'fp32' ? 'fp32' : 'none'),
    }, f16Notes[l]);
  });
}

/**
 * The paths computePaths will report, before any GPU work (the page shows them): with the
 * tensor-core path enabled or not, each linear [out, in] of a layer runs its forward with K = in
 * (qgemmI8), its dX with K = out (gate_proj's and up_proj's together with K = 2F where
 * plan.gateUpDx), and its dW with K = the step's tokens (over all of them: qgemmI8; in blocks: the
 * dot4 blocked kernel), as Int8Gemms chooses them.
 */
export function expectedComputePaths(
  plan: {
    layers: { compute: LayerCompute }[]; layout: ParamLayout; dims: ModelDims; training: boolean; gateUpDx: readonly boolean[];
    f16?: { layers: readonly { note: string | null }[] } | null;
  }, tensorCores: boolean,
): LayerPaths[] {
  return plan.layers.map(({ compute: c }, l) => {
    const linears = plan.layout.views.filter((v) => v.name.startsWith(`model.layers.${l}.`) && v.shape.length === 2);
    const gateUp = (name: string) => plan.gateUpDx[l] && /\.mlp\.(gate|up)_proj\.weight$/.test(name);
    const of = (fmt: 'fp32' | 'int8', K: (out: number, inp: number, name: string) => number | 'blocked'): string => {
      if (fmt === 'fp32') return 'fp32';
      return joinPaths(linears.map(({ shape: [out, inp], name }) => {
        const k = K(out, inp, name);
        return k === 'blocked' ? 'int8-dot4' : i8GemmPath(tensorCores, k);
      }));
    };
    return withF16({
      layer: l,
      forward: of(c.forward, (_, inp) => inp),
      dx: plan.training ? of(c.dx, (out, _, name) => (gateUp(name) ? 2 * out : out)) : 'none',
      dw: plan.training ? of(c.dw, () => (c.dwBlock === 'all' ? plan.dims.N : 'blocked')) : 'none',
      attention: c.attentionQk === 'fp32' ? 'fp32' : ATTN_SCORE_PATH,
      attentionDp: !plan.training ? 'none' : c.attentionDp === 'fp32' ? 'fp32' : ATTN_SCORE_PATH,
    }, plan.f16?.layers[l]?.note);
  });
}

/** The split-K GEMMs by their label without the layer ('o.dw 7, down.dw 2'; slice counts that differ between layers joined by '/'), or 'none'. */
export function gemmSplitSummary(splits: ReadonlyMap<string, number>): string {
  const by = new Map<string, Set<number>>();
  for (const [label, S] of splits) {
    const g = label.replace(/^L\d+\./, '');
    by.set(g, (by.get(g) ?? new Set()).add(S));
  }
  return [...by].map(([g, s]) => `${g} ${[...s].sort((x, y) => x - y).join('/')}`).join(', ') || 'none';
}

/** 'fwd X, dx Y, dw Z' for each distinct per-layer combination (one, usually), joined by '; '. */
export function gemmPathSummary(paths: LayerPaths[]): string {
  const attn = (p: LayerPaths) => `${p.attention === 'fp32' ? '' : `, qk ${p.attention}`}${p.attentionDp === 'fp32' || p.attentionDp === 'none' ? '' : `, dp ${p.attentionDp}`}`;
  return [...new Set(paths.map((p) => `fwd ${p.forward}, dx ${p.dx}, dw ${p.dw}${attn(p)}${p.f16 ? ` [${p.f16}]` : ''}`))].join('; ');
}
