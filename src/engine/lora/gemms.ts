/**
 * The adapters' GEMMs around the frozen base's (PEFT's forward: y = base(x) + s·B(A(dropout(x))), s = alpha/r).
 * The model calls `down` right before a base linear's GEMM (u = x̃·Aᵀ, x̃ the dropped input) and `up`
 * right after it (y += s·u·Bᵀ). Backward, at the place of the base dW GEMM (which a frozen base
 * skips; its input x is live there): x̃ and u again from the same seed, dB = s·dYᵀ·u, v = dY·B,
 * dA = s·vᵀ·x̃; after the base dX GEMM: dX += s·v·A (through the dropout mask). A training step
 * keeps every layer's uᵀ from the forward (N·r floats per adapter and layer: 55 MB at SmolLM2-135M,
 * B8×T512, r16) rather than recompute it in the backward, a thin GEMM per group and layer (and
 * checkpointing's re-run of the forward skips it too); LoraPlan.saveU false recomputes it.
 *
 * Adapters whose linears share an input (q/k/v, gate/up: a group, LORA_SHARED_INPUT) and no dropout
 * run their A-side GEMMs as one: their A's lie back to back in the layout ([g·r, in]), so u of the
 * group, dA of the group and the group's dX term are one GEMM each instead of g (the step's thin
 * GEMMs were its cost: docs/benchmarks.md). u and v are kept transposed ([r, N] per adapter) so each
 * member's rows of the group's [g·r, N] are a contiguous slice for its own B GEMMs.
 *
 * Where the base GEMM takes one (fp32; f16 only with LoraPlan.f16Epilogue), y's s·u·Bᵀ and dX's
 * s·v·A are added in its epilogue (upLowRank, dxLowRank; matmul.ts lowRank, matmul-f16/epilogue.ts)
 * instead of by GEMMs that read and write y or dX again (`up`, `dx`).
 * uᵀ and vᵀ ([g·r, N], K = the layer's width) split K over lora.ws where the heuristic or a table
 * says: in one pass they were a few dozen workgroups each looping over K alone (LoraPlan.splitThin).
 * Under f16 compute the GEMMs over x read x's f16 saved cell (LoraX; no dropout) instead of fp32 x: the
 * backward's need no unpack of it (a pass per input and layer), the forward's let RMSNorm and the SwiGLU
 * leave h1, h2, act unwritten in fp32 (RunPlan.f16Only, swigluHalf; issue 39).
 * A split thin GEMM's reduce was a dispatch of its own, 660 a step at SmolLM2-135M: in a training step
 * (LoraPlan.batchReduce) a layer's dA and dB GEMMs leave their partials in lora.gws and one reduce after
 * the layer's last adapter sums them all (11 reduces a layer → 1), and a stacked group's vᵀ GEMMs share
 * one reduce before its dA (3 or 2 → 1); the same sums in the same order as each GEMM's own reduce.
 * Reference: ./lora.ref.ts.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { type DropoutKernels, dropoutKernels } from '../kernels/dropout/dropout';
import { buildMatmul, type LowRank, matmul, type MatmulArgs, matmulSteps, type SplitKSegment, splitKReduceSegments } from '../kernels/matmul/matmul';
import type { ModelDims } from '../model/dims';
import { ALIGN_FLOATS } from '../model/params';
import { bindingBytes } from '../kernels/launch';
import { deriveSeed } from '../util/rng';
import {
  LORA_SHARED_INPUT, LORA_SPLIT_SLICES, loraBatchesReduce, loraGradSlices, loraLayerRange, type LoraPlan, loraRankSlots, loraSavesU, loraSplitBytes, loraStacks,
} from './plan';
import type { LoraAdapter } from './spec';

/**
 * A layer input x as its f16 saved cell (RunPlan.f16Cells; LinearGemms.loraX): packed f16 read through
 * the GEMMs' bHalf (widened at load, equal to the fp32 unpack), or (`half` false) the twin's f32 elements read as is.
 */
export interface LoraX {
  b: Binding;
  half: boolean;
}

/** Adapters of one layer whose A-side GEMMs run as one (a single adapter where they cannot). */
export interface LoraGroup {
  /** In layout order: their A's back to back. */
  adapters: LoraAdapter[];
  /** The first member's slot in lora.t (the others' follow). */
  slot: number;
}

/**
 * The plan's groups: adapters of a layer that share an input, stacked where their A's are adjacent
 * (r·in a whole number of 256-byte blocks), each member's [r, N] rows start at a 256-byte boundary
 * and there is no dropout; single adapters otherwise.
 */
export function loraGroups(plan: LoraPlan, dims: ModelDims): LoraGroup[] {
  const { index } = loraRankSlots(plan, dims);
  const at = (name: string) => plan.layout.byName.get(name)!;
  const out: LoraGroup[] = [];
  for (const l of [...new Set(plan.adapters.map((a) => a.layer))]) {
    for (const ts of LORA_SHARED_INPUT) {
      const m = plan.adapters.filter((a) => a.layer === l && ts.includes(a.target));
      if (!m.length) continue;
      const adjacent = m.every((a, i) => i === 0 || (at(a.a).offset === at(m[i - 1].a).offset + at(m[i - 1].a).size && index.get(a.target) === index.get(m[i - 1].target)! + 1));
      if (m.length > 1 && loraStacks(plan) && adjacent && (dims.N * plan.spec.rank) % ALIGN_FLOATS === 0) out.push({ adapters: m, slot: index.get(m[0].target)! });
      else out.push(...m.map((a) => ({ adapters: [a], slot: index.get(a.target)! })));
    }
  }
  return out;
}

export class LoraGemms {
  private readonly drop = new Map<string, DropoutKernels>();
  readonly groups: LoraGroup[];
  private readonly groupOf = new Map<string, LoraGroup>();
  /** Floats per lora.t slot (and lora.u's, when saved). */
  private readonly slot: number;
  /** lora.u holds every layer's uᵀ, saved from the forward (loraSavesU). */
  readonly savesU: boolean;
  /** The adapters' terms may ride in the base GEMMs' low-rank epilogue (where lowRankFits; LoraPlan.epilogue). */
  readonly epilogue: boolean;
  /** dA/dB partials to lora.gws, one reduce a layer; a stacked group's vᵀ one reduce (LoraPlan.batchReduce; training only). */
  private readonly batch: boolean;
  /** Per layer: its adapters whose gradients are not built yet, and the split-K partials its reduce will sum. */
  private readonly pending = new Map<number, { left: number; segments: SplitKSegment[] }>();
  /** A stacked group's vᵀ partials awaiting their reduce (its members' grads run one after another). */
  private readonly vSegments: SplitKSegment[] = [];

  constructor(
    private readonly rt: Runtime,
    readonly plan: LoraPlan,
    private readonly dims: ModelDims,
    private readonly b: (key: string) => GPUBuffer,
    training = true,
  ) {
    if (plan.spec.dropout > 0) {
      for (const a of plan.adapters) this.drop.set(a.base, dropoutKernels(rt, `lora.${a.base}`, dims.N * a.in, plan.spec.dropout));
    }
    this.groups = loraGroups(plan, dims);
    for (const g of this.groups) for (const a of g.adapters) this.groupOf.set(a.base, g);
    this.slot = loraRankSlots(plan, dims).slot;
    this.savesU = loraSavesU(plan, training);
    this.epilogue = plan.epilogue !== false;
    this.batch = training && loraBatchesReduce(plan, dims);
  }

  /** The adapter on base weight `name` (undefined: that linear has none). */
  on(name: string): LoraAdapter | undefined {
    return this.plan.byBase.get(name);
  }

  private group(a: LoraAdapter): { g: LoraGroup; i: number; first: boolean; last: boolean } {
    const g = this.groupOf.get(a.base)!;
    const i = g.adapters.indexOf(a);
    return { g, i, first: i === 0, last: i === g.adapters.length - 1 };
  }

  /** A tensor, or (`rows` of them from `name` on) a group's stacked A's, in lora.weights or lora.grads. */
  private t(key: 'lora.weights' | 'lora.grads', name: string, count = 1): Binding {
    const v = this.plan.layout.byName.get(name)!;
    return { buffer: this.b(key), offset: v.offset * 4, size: v.size * count * 4 };
  }

  /**
   * Member i's (x̃·Aᵀ)ᵀ [r, N] in lora.u, or (count) the group's [count·r, N]: saved, in the layer's
   * slots (a stacked group's are N·r floats each, so its members' rows are one matrix); else at the
   * start, a group at a time.
   */
  private u(g: LoraGroup, i: number, count = 1): Binding {
    const n = this.dims.N * this.plan.spec.rank;
    const at = this.savesU ? (g.adapters[0].layer * this.plan.spec.targets.length + g.slot + i) * this.slot : i * n;
    return { buffer: this.b('lora.u'), offset: at * 4, size: count * n * 4 };
  }

  /** (dY·B)ᵀ [r, N] of the adapter in slot s of lora.t, or (count) the group's [count·r, N]. */
  private v(s: number, count = 1): Binding {
    return { buffer: this.b('lora.t'), offset: s * this.slot * 4, size: count * this.dims.N * this.plan.spec.rank * 4 };
  }

  /** Whether the adapters' GEMMs may read x from an f16 cell (LoraX): not with dropout, whose mask applies to fp32 x. */
  get readsCells(): boolean {
    return this.drop.size === 0;
  }

  /** x̃ as the GEMMs' B: x itself (its f16 cell where given), or its dropped copy in lora.xd (written by the returned dispatches). */
  private input(a: LoraAdapter, label: string, x: GPUBuffer | LoraX, out: Dispatch[]): LoraX {
    const d = this.drop.get(a.base);
    if ('half' in x) {
      if (d) throw new Error(`internal: ${label}: an adapter with dropout reads fp32 x, not its f16 cell`);
      return x;
    }
    const x0 = { buffer: x, offset: 0, size: this.dims.N * a.in * 4 };
    if (!d) return { b: x0, half: false };
    const xd = { buffer: this.b('lora.xd'), offset: 0, size: this.dims.N * a.in * 4 };
    out.push(d.apply(`${label}.drop`, x0, xd));
    return { b: xd, half: false };
  }

  /** Split-K partials of the thin GEMMs over a layer's width (loraSplitBytes; none: one pass). */
  private ws(): Binding | undefined {
    return this.plan.splitThin === false ? undefined : { buffer: this.b('lora.ws'), offset: 0, size: loraSplitBytes(this.plan, this.dims) };
  }

  /** uᵀ = A·x̃ᵀ of a whole group [g·r, N] into lora.u (split over K where the heuristic or a table says). */
  private uGemm(g: LoraGroup, label: string, xd: LoraX): Dispatch[] {
    const a0 = g.adapters[0];
    const rows = g.adapters.length * this.plan.spec.rank;
    return matmulSteps(this.rt, { label: `${label}.lora_A`, a: this.t('lora.weights', a0.a, g.adapters.length), b: xd.b, bHalf: xd.half, c: this.u(g, 0, g.adapters.length), M: rows, N: this.dims.N, K: a0.in, transB: true, workspace: this.ws() });
  }

  /**
   * The group's uᵀ, from its first member's call (before the base GEMM of `a`, whose input x is, or its f16
   * cell where readsCells); nothing from the others, nor in checkpointing's re-run of the forward (`again`) where uᵀ is saved.
   */
  down(a: LoraAdapter, label: string, x: GPUBuffer | LoraX, again = false): Dispatch[] {
    const { g, first } = this.group(a);
    if (!first || (again && this.savesU)) return [];
    const out: Dispatch[] = [];
    const xd = this.input(a, label, x, out);
    out.push(...this.uGemm(g, label, xd));
    return out;
  }

  /**
   * s·u·Bᵀ as the low-rank epilogue of the base GEMM writing y (matmul.ts lowRank: U = this member's
   * uᵀ [r, N], V = B [out, r] as stored): no GEMM and no read-add-write of y of its own. `down` first.
   */
  upLowRank(a: LoraAdapter): LowRank {
    const { g, i } = this.group(a);
    return { u: this.u(g, i), v: this.t('lora.weights', a.b), rank: this.plan.spec.rank, scale: this.plan.scale, transV: true };
  }

  /** y += s·u·Bᵀ (after the base GEMM wrote or accumulated y), where the base GEMM cannot take upLowRank. */
  up(a: LoraAdapter, label: string, y: Binding): Dispatch {
    const { g, i } = this.group(a);
    return matmul(this.rt, { label: `${label}.lora_B`, a: this.u(g, i), b: this.t('lora.weights', a.b), c: y, M: this.dims.N, N: a.out, K: this.plan.spec.rank, transA: true, transB: true, accumulate: true, alpha: this.plan.scale });
  }

  /**
   * dB of adapter `a` and vᵀ = (dY·B)ᵀ kept for `dx`, from dY [N, out] and the base GEMM's input x
   * [N, in] (live here, or its f16 cell where readsCells); the group's uᵀ first unless saved (its first member), its stacked dA last
   * (its last member: every member's vᵀ is there). `workspace`: split-K partials, a buffer dead at this point (the base dW's);
   * where the reduces batch, dA's and dB's go to lora.gws instead and the layer's last adapter's call ends with their reduce
   * (undefined: one pass, no split).
   */
  grads(a: LoraAdapter, label: string, dy: GPUBuffer, x: GPUBuffer | LoraX, workspace?: Binding): Dispatch[] {
    const out: Dispatch[] = [];
    const { N } = this.dims;
    const r = this.plan.spec.rank;
    const s = this.plan.scale;
    const { g, i, first, last } = this.group(a);
    const k = g.adapters.length;
    const dY = { buffer: dy, offset: 0, size: N * a.out * 4 };
    const layer = this.pending.get(a.layer) ?? { left: this.plan.adapters.filter((x) => x.layer === a.layer).length, segments: [] };
    this.pending.set(a.layer, layer);
    // A stacked group has no dropout: x̃ = x for every member, so the last member's x serves.
    const xd = (first && !this.savesU) || last ? this.input(g.adapters[0], label, x, out) : undefined;
    if (first && !this.savesU) out.push(...this.uGemm(g, label, xd!));
    // dA and dB: their partials kept for the layer's reduce where it batches (a workspace given: split-K allowed),
    // in no more room than `workspace` has, so the GEMMs choose their splits as with it (the same sums).
    const grad = (args: Omit<MatmulArgs, 'workspace'>, name: string) => {
      if (!this.batch || !workspace) return matmulSteps(this.rt, { ...args, workspace });
      const at = this.plan.layout.byName.get(name)!.offset - loraLayerRange(this.plan, a.layer).start;
      const S = loraGradSlices(this.dims);
      const ws = { buffer: this.b('lora.gws'), offset: S * at * 4, size: Math.min(S * args.M * args.N * 4, bindingBytes(workspace)) };
      return this.deferred(args, ws, { c: at, ws: S * at }, layer.segments);
    };
    out.push(...grad({ label: `${label}.lora_B.dw`, a: dY, b: this.u(g, i), c: this.t('lora.grads', a.b), M: a.out, N: r, K: N, transA: true, transB: true, alpha: s }, a.b));
    // vᵀ: LORA_SPLIT_SLICES partials at most; a stacked group's members' side by side in lora.ws, summed by one reduce before dA.
    const vArgs = { label: `${label}.lora_B.dx`, a: this.t('lora.weights', a.b), b: dY, c: this.v(g.slot + i), M: r, N, K: a.out, transA: true, transB: true };
    const each = LORA_SPLIT_SLICES * r * N;
    const batchV = this.batch && k > 1;
    const vWs = this.ws() && { buffer: this.b('lora.ws'), offset: (batchV ? i * each : 0) * 4, size: each * 4 };
    if (vWs && batchV) {
      out.push(...this.deferred(vArgs, vWs, { c: i * this.slot, ws: i * each }, this.vSegments));
      if (last && this.vSegments.length) out.push(this.reduce(`${label}.lora_B.dx`, { buffer: this.b('lora.ws'), offset: 0, size: k * each * 4 }, this.v(g.slot, k), this.vSegments.splice(0), 1));
    } else out.push(...matmulSteps(this.rt, { ...vArgs, workspace: vWs }));
    if (last) {
      out.push(...grad({ label: `${label}.lora_A.dw`, a: this.v(g.slot, k), b: xd!.b, bHalf: xd!.half, c: this.t('lora.grads', g.adapters[0].a, k), M: k * r, N: g.adapters[0].in, K: N, alpha: s }, g.adapters[0].a));
    }
    // The layer's last adapter: one reduce of every split dA/dB partial of the layer into its range of lora.grads.
    if (--layer.left === 0) {
      this.pending.delete(a.layer);
      const { start, span } = loraLayerRange(this.plan, a.layer);
      if (layer.segments.length) {
        const gws = { buffer: this.b('lora.gws'), offset: 0, size: loraGradSlices(this.dims) * span * 4 };
        out.push(this.reduce(`L${a.layer}.lora_grads`, gws, { buffer: this.b('lora.grads'), offset: start * 4, size: span * 4 }, layer.segments, s));
      }
    }
    return out;
  }

  /**
   * A GEMM whose split-K partials go to `ws` for a later reduce (its segment, at `at` in that reduce's
   * bindings, joins `segments`); one pass or stream-K writes C itself.
   */
  private deferred(args: Omit<MatmulArgs, 'workspace'>, ws: Binding, at: { c: number; ws: number }, segments: SplitKSegment[]): Dispatch[] {
    const m = buildMatmul(this.rt, { ...args, workspace: ws, deferReduce: true });
    if (m.parts > 1) segments.push({ ...at, size: args.M * args.N, parts: m.parts });
    return m.dispatches;
  }

  /** One reduce of several GEMMs' split-K partials (splitKReduceSegments). */
  private reduce(label: string, workspace: Binding, c: Binding, segments: SplitKSegment[], alpha: number): Dispatch {
    return splitKReduceSegments(this.rt, { label, workspace, c, segments, alpha }).dispatch;
  }

  /**
   * The group's dX term s·v·A as the low-rank epilogue of its first member's base dX GEMM (U = the
   * group's vᵀ [g·r, N], V = its stacked A's [g·r, in]), after `grads` of every member; undefined
   * for the other members and with dropout (the term is masked: `dx`).
   */
  dxLowRank(a: LoraAdapter): LowRank | undefined {
    const { g, first } = this.group(a);
    if (!first || this.drop.has(a.base)) return undefined;
    const k = g.adapters.length;
    return { u: this.v(g.slot, k), v: this.t('lora.weights', a.a, k), rank: k * this.plan.spec.rank, scale: this.plan.scale };
  }

  /** dX += s·v·A over the group (masked like the forward's x̃), from its first member's call, after the base dX GEMMs wrote dX. */
  dx(a: LoraAdapter, label: string, dx: GPUBuffer): Dispatch[] {
    const { g, first } = this.group(a);
    if (!first) return [];
    const { N } = this.dims;
    const k = g.adapters.length;
    const dX = { buffer: dx, offset: 0, size: N * a.in * 4 };
    const d = this.drop.get(a.base);
    const mm = (c: Binding, accumulate: boolean) => matmul(this.rt, {
      label: `${label}.lora_A.dx`, a: this.v(g.slot, k), b: this.t('lora.weights', a.a, k), c, M: N, N: a.in, K: k * this.plan.spec.rank, transA: true, accumulate, alpha: this.plan.scale,
    });
    if (!d) return [mm(dX, true)];
    const gx = { buffer: this.b('lora.xd'), offset: 0, size: N * a.in * 4 };
    return [mm(gx, false), d.accumulateMasked(`${label}.drop.dx`, gx, dX)];
  }

  /** One dropout seed per adapter and step (forward and backward of a step agree). */
  setStepSeed(step: number): void {
    for (const [name, d] of this.drop) d.setSeed(deriveSeed(step, `lora.drop.${name}`));
  }

  /** Evaluation runs the forward without dropout (PEFT's eval mode). */
  setDropoutActive(on: boolean): void {
    for (const d of this.drop.values()) d.setActive(on);
  }

  /** Frees the dropout kernels' parameter blocks (the model's destroy; they outlived it before). */
  destroy(): void {
    for (const d of this.drop.values()) d.destroy();
    this.drop.clear();
  }
}
