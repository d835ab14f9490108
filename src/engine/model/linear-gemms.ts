/**
 * How each linear layer's GEMMs run under the plan: which weight copy they read (fp32 or the
 * study's fake-quantized `wq`), the fake-quantized operand copies (`aq`, `gq`), the fp32 matmuls
 * (a transposed weight for long inputs, split-K for dW) or the INT8 GEMMs (./int8-gemms.ts). The
 * model (llama.ts) calls these while it builds its dispatch lists.
 */
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { axpy, copy } from '../kernels/elementwise/elementwise';
import { castF16Operand, castF16Segments, f16OperandBytes } from '../kernels/matmul-f16/cast';
import { ropeF16, type RopeArgs } from '../kernels/rope/rope';
import { buildMatmulF16, f16LowRankOnTensorCores, f16PathFor } from '../kernels/matmul-f16/matmul-f16';
import { type LowRank, matmul, type MatmulArgs, matmulSteps } from '../kernels/matmul/matmul';
import { qdq } from '../kernels/qdq/qdq';
import { type F16Out, rmsnormForward, rmsnormForwardF16, rmsnormForwardQuantized } from '../kernels/rmsnorm/rmsnorm';
import { transposeMatrix } from '../kernels/slice/slice';
import { asSlice } from '../kernels/launch';
import { rope } from '../kernels/rope/rope';
import { swigluForward, swigluForwardF16, swigluForwardQuantized, swigluForwardStored } from '../kernels/swiglu/swiglu';
import { isFp32, type QuantSpec } from '../scheme/scheme';
import { type GemmInputSaved, type GemmPath, PRODUCER_CODED, producerDyCodes } from './compute-plan';
import { computePaths, type GemmWeight, Int8Gemms, type LayerPaths } from './int8-gemms';
import { type F16Operands, f16Operands, runsF16 } from './f16-operands';
import { type LayerSavedKey, linearsTransposed } from './plan';
import type { ProbePoint } from './probe-point';
import type { RunPlan } from '../plan/run-plan';
import { gateUpKey, WeightCodes } from './weight-codes';
import { QloraBase } from '../lora/qlora/base';

export class LinearGemms {
  /** Quantizers (fake or real) whose stochastic-rounding seed changes every step. */
  readonly srKernels: { label: string; setSeed: (seed: number) => void }[] = [];
  /** The INT8 GEMMs (null when every layer computes in fp32). */
  private readonly i8: Int8Gemms | null;
  /** The INT8 weights' codes made once per step (plan.weightCodes 'per-step'), else null. */
  private readonly wcodes: WeightCodes | null;
  /** The f16 GEMMs' operand copies (null: no GEMM runs f16). */
  private readonly f16: F16Operands | null;
  /**
   * The f16 copies `f16.a` (and, where the forward's X copies go there, `f16.x`) hold at this point of
   * the build (build order is run order), by the fp32 buffer each copies: written by the buffer's
   * producer (RMSNorm, SwiGLU, RoPE) or, where none can, by a counted cast; a write over a slot drops
   * the copies it overlaps.
   */
  private readonly held = new Map<GPUBuffer, { key: 'f16.a' | 'f16.x'; offset: number; size: number }>();
  /** The f16 cells (plan.f16Cells) their producers wrote in this build, `l.key`: no store pass for them (cellWritten). */
  private readonly written = new Set<string>();
  /** The kernel each f16 GEMM runs, by label (computePaths reports them). */
  private readonly f16Paths = new Map<string, GemmPath>();
  /** QLoRA's quantized frozen base (plan.qlora): its linears' forward and dX GEMMs, else null. */
  readonly qbase: QloraBase | null;

  constructor(
    private readonly rt: Runtime,
    private readonly plan: RunPlan,
    private readonly b: (key: string) => GPUBuffer,
    /** The forward's dispatch list and probe points (the fake-quantized inputs are probed where they are made). */
    private readonly forward: Dispatch[],
    private readonly probePoints: Map<string, ProbePoint>,
    private readonly linearNnMinRows?: number,
  ) {
    this.i8 = plan.int8.rows || plan.int8.dw
      ? new Int8Gemms(rt, plan.dims, b, (label, setSeed) => this.srKernels.push({ label, setSeed }))
      : null;
    this.wcodes = plan.wcodes ? new WeightCodes(rt, plan.wcodes, b) : null;
    // QLoRA's block linears have no f16 copy (f16Weight dequantizes each before its GEMM).
    this.f16 = f16Operands(plan.f16?.layers, plan.qlora?.dense ?? plan.layout, plan.dims, plan.f16Twin, plan.training, plan.f16Cells, plan.f16Lean);
    this.qbase = plan.qlora ? new QloraBase(rt, plan.qlora, b, !!plan.f16Twin) : null;
  }

  /** Whether layer l's GEMM of this kind runs f16 (the plan's path for this device is an f16 one). */
  private runsF16(l: number, kind: 'forward' | 'dx' | 'dw'): boolean {
    return runsF16(this.plan.f16?.layers[l]?.[kind]);
  }

  /**
   * The weights' f16 copies from the fp32 master weights (the forward's first dispatch): after every
   * optimizer step, at init and after a load alike, once per step, all in one dispatch (each weight
   * f16WeightCast's bits). None where each GEMM casts its own (perGemm) or none has a copy (QLoRA's base).
   */
  f16WeightCasts(): Dispatch[] {
    if (!this.f16 || this.f16.perGemm || this.f16.weights.size === 0) return [];
    const elemBytes = this.plan.f16Twin ? 4 : 2;
    const segments = [...this.f16.weights].map(([name, slot]) => ({ src: this.plan.layout.byName.get(name)!.offset, dst: slot.offset / elemBytes, n: slot.n }));
    return castF16Segments(this.rt, { label: 'f16.w', x: this.b('weights'), out: this.b('f16.w'), segments, elem: this.elem });
  }

  /** The cast of linear `name`'s fp32 master weight into its f16 copy in f16.w. */
  private f16WeightCast(name: string): Dispatch {
    const v = this.plan.layout.byName.get(name)!;
    return castF16Operand(this.rt, { label: `f16.w.${name}`, x: { buffer: this.b('weights'), offset: v.offset * 4, size: v.size * 4 }, out: this.f16W(name), n: v.size, elem: this.elem });
  }

  /**
   * An f16 GEMM's weight: its f16 copy (cast by `pre` right before the GEMM where perGemm), or QLoRA's
   * linear dequantized to f16 by `pre`.
   */
  private f16Weight(name: string): { pre: Dispatch[]; w: Binding } {
    if (this.qbase) {
      const { dispatches, w } = this.qbase.dequantizeF16(name);
      return { pre: dispatches, w };
    }
    return { pre: this.f16?.perGemm ? [this.f16WeightCast(name)] : [], w: this.f16W(name) };
  }

  private f16W(name: string): Binding {
    const slot = this.f16?.weights.get(name);
    if (!slot) throw new Error(`internal: ${name} has no f16 copy`);
    return { buffer: this.b('f16.w'), offset: slot.offset, size: this.opBytes(slot.n) };
  }

  /** The f16 operands' element storage: f16, or f32 in the twin (plan.f16Twin). */
  private get elem(): 'f16' | 'f32' {
    return this.plan.f16Twin ? 'f32' : 'f16';
  }

  private opBytes(n: number): number {
    return f16OperandBytes(n, !!this.plan.f16Twin);
  }

  /** Layer l's saved `key` as an f16 operand: its f16 cell where the plan has one (plan.f16Cells), else undefined. */
  private cell(l: number, key: LayerSavedKey | undefined): Binding | undefined {
    if (!key || l >= this.plan.dims.L || !this.plan.f16Cells[l].has(key)) return undefined;
    return { buffer: this.b(`L${l}.${key}.codes`), offset: 0, size: this.opBytes(this.plan.saved[l][key]!.n) };
  }

  /** Where a producer writes layer l's saved `key` as its f16 cell (recorded: its store pass is skipped, cellWritten). */
  cellOut(l: number, key: LayerSavedKey): F16Out {
    const out = this.cell(l, key);
    if (!out) throw new Error(`internal: L${l}.${key} has no f16 cell`);
    this.written.add(`${l}.${key}`);
    return { out, elem: this.elem };
  }

  /** Whether a producer wrote layer l's f16 cell `key` (cellOut). */
  cellWritten(l: number, key: LayerSavedKey): boolean {
    return this.written.has(`${l}.${key}`);
  }

  /**
   * x [n] cast into the f16 scratch `key` at 0: a standalone pass, for the operands no producer writes
   * in f16 (the counted ones: f16-producers.gpu.test.ts), and the weights' copies once per step.
   */
  private castTo(key: 'f16.a' | 'f16.x', label: string, x: GPUBuffer, n: number, keep = key === 'f16.a'): { d: Dispatch; out: Binding } {
    // f16.x's dW copies are not looked up again (keep false): the write only drops what it overlaps.
    const out = this.hold(x, 0, n, key, keep);
    return { d: castF16Operand(this.rt, { label: `${label}.${key}`, x, out, n, elem: this.elem }), out };
  }

  /**
   * Records that `key` from byte `offset` will hold src's n values as f16 (dropping the copies that slot
   * overlaps; `keep` false: recording none); the slot's binding.
   */
  private hold(src: GPUBuffer, offset: number, n: number, key: 'f16.a' | 'f16.x' = 'f16.a', keep = true): Binding {
    const size = this.opBytes(n);
    for (const [k, v] of this.held) if (k === src || (v.key === key && v.offset < offset + size && offset < v.offset + v.size)) this.held.delete(k);
    if (keep) this.held.set(src, { key, offset, size });
    return { buffer: this.b(key), offset, size };
  }

  /** The f16 copy of x's first n values that f16.a or f16.x holds now, else undefined. */
  private heldCopy(x: Binding, n: number): Binding | undefined {
    const h = this.held.get(x as GPUBuffer);
    return h && h.size >= this.opBytes(n) ? { buffer: this.b(h.key), offset: h.offset, size: this.opBytes(n) } : undefined;
  }

  /**
   * Where the forward's f16 X copies go (those no f16 cell holds): f16.a, or f16.x where gate's fp32
   * live copy is f16.a (plan.f16Live.gate, f16-operands.ts f16GateInA): it lives there from gate_proj to
   * the SwiGLU, which read and write X copies, and f16.x is free in the forward.
   */
  private get xKey(): 'f16.a' | 'f16.x' {
    return this.plan.f16Live.gate === 'f16.a' ? 'f16.x' : 'f16.a';
  }

  /** dY [n]'s f16 copy: its producer's where it wrote one (dyOut), else cast into f16.a (counted). */
  private dyCopy(label: string, dy: GPUBuffer, n: number): { d: Dispatch[]; out: Binding } {
    const held = this.heldCopy(dy, n);
    if (held) return { d: [], out: held };
    const { d, out } = this.castTo('f16.a', label, dy, n);
    return { d: [d], out };
  }

  /**
   * Where the producer of `dst` ([N, width], a dY of layer l's dX and dW GEMMs) writes dst's f16 copy:
   * `site`'s slot of f16.a (F16Operands.slots), or undefined where neither GEMM runs f16 (dst's old
   * copy, if any, is dropped: the producer is about to change dst).
   */
  dyOut(l: number, site: 'dres' | 'dgate' | 'dup' | 'dq' | 'dk' | 'dv', dst: GPUBuffer, width: number): F16Out | undefined {
    this.held.delete(dst);
    if (!this.f16 || !(this.runsF16(l, 'dx') || this.runsF16(l, 'dw'))) return undefined;
    const at = { dres: 0, dgate: 0, dup: this.f16.slots.dup, dq: 0, dk: this.f16.slots.dk, dv: this.f16.slots.dv }[site];
    return { out: this.hold(dst, at, this.plan.dims.N * width), elem: this.elem };
  }

  /** The f16 copies of layer l's [dgate, dup] that the SwiGLU backward writes (swigluBackwardF16), or undefined where no f16 GEMM reads them. */
  gateUpF16(l: number, dgate: GPUBuffer, dup: GPUBuffer): { dgate16: F16Out; dup16: F16Out } | undefined {
    const g = this.dyOut(l, 'dgate', dgate, this.plan.dims.F);
    const u = this.dyOut(l, 'dup', dup, this.plan.dims.F);
    return g && u ? { dgate16: g, dup16: u } : undefined;
  }

  /** The backward's RoPE (dq or dk un-rotated into `a.y`), writing y's f16 copy too where layer l's q/k GEMMs run f16. */
  ropeBackward(l: number, site: 'dq' | 'dk', a: RopeArgs): Dispatch[] {
    const y16 = this.dyOut(l, site, a.y as GPUBuffer, a.nHeads * a.D);
    return y16 ? ropeF16(this.rt, { ...a, y16, y16Only: this.plan.f16Only[l].has(site) }) : [rope(this.rt, a)];
  }

  /**
   * dv's f16 copy for v_proj's dX and dW GEMMs under INT8 attention scores: a cast (counted), as that
   * backward writes fp32 only (the fp32-score and f16 kernels write it: dyOut 'dv'); nothing where neither GEMM runs f16.
   */
  dvCast(l: number, label: string, dv: GPUBuffer): Dispatch[] {
    const out = this.dyOut(l, 'dv', dv, this.plan.dims.KVC);
    return out ? [castF16Operand(this.rt, { label: `${label}.f16.a`, x: dv, out: out.out, n: this.plan.dims.N * this.plan.dims.KVC, elem: this.elem })] : [];
  }

  /** One f16 GEMM (its path recorded under `label`). */
  private f16Gemm(label: string, a: Parameters<typeof buildMatmulF16>[1]): Dispatch[] {
    // The twin runs the SIMT kernel over f32 storage (no shader-f16 needed).
    const path = this.plan.f16Twin ? 'f16-simt' : f16PathFor(this.rt, !!a.transA, !!a.transB, a);
    if (path === 'fp32') throw new Error(`${label}: the plan runs this GEMM f16 but the device has no f16 path for it`);
    this.f16Paths.set(label, path);
    return buildMatmulF16(this.rt, { ...a, label, path, elem: this.elem }).dispatches;
  }

  /** The dispatches that make this step's weight codes (the forward's first; none per GEMM). */
  weightCodes(): Dispatch[] {
    return this.wcodes?.dispatches(this.b('weights')) ?? [];
  }

  /** Layer l's linear `name` as an INT8 forward GEMM reads it: its per-step codes, else fp32 (quantized by the GEMM). */
  private forwardW(l: number, name: string): GemmWeight {
    return this.wcodes?.rows(`model.layers.${l}.${name}`) ?? this.lin(l, name);
  }

  /**
   * A weight-gradient GEMM (dW = dYᵀ·X: small M×N, K = all tokens), split over K when that fills the
   * GPU better. Its split-K partials go to a backward scratch buffer that is dead at that point, so
   * they cost no memory of their own: `dq` ([N, C], free from norm2.bwd to the attention backward
   * and again after rope_q.bwd) for the LM head's and the MLP's, `dF1` ([N, F], free once the MLP's
   * dX GEMMs have run) for the attention projections', whose small square outputs want the most
   * slices (a small fixed buffer would cap their slice count). Tensor-parallel models run them in one pass: a rank's dW GEMM is a slice of
   * the rows of the single-device simulation's, whose slice count, chosen for its own shape and
   * buffers, would sum in another order, and the ranks must reproduce the simulation bit for bit
   * (tests/parallel/tp.gpu.test.ts).
   */
  dwMatmul(args: Omit<MatmulArgs, 'workspace'>, scratch: 'dq' | 'dF1'): Dispatch[] {
    return matmulSteps(this.rt, { ...args, workspace: this.dwWorkspace(scratch) });
  }

  /** The split-K workspace of a dW GEMM (fp32 or INT8 over all tokens): `scratch`, or none when tensor-parallel (see dwMatmul). */
  private dwWorkspace(scratch: 'dq' | 'dF1'): GPUBuffer | undefined {
    return this.plan.wire.tp ? undefined : this.b(scratch);
  }

  /** The buffer the GEMMs read a weight from: the fake-quantized copy when layer l quantizes weights. */
  private gemmWeights(l: number): GPUBuffer {
    return isFp32(this.plan.layers[l].weights) ? this.b('weights') : this.b('wq');
  }

  /** A linear weight of layer l as the GEMMs see it. */
  lin(l: number, s: string): Binding {
    const v = this.plan.layout.byName.get(`model.layers.${l}.${s}`);
    if (!v) throw new Error(`no parameter model.layers.${l}.${s}`);
    return { buffer: this.gemmWeights(l), offset: v.offset * 4, size: v.size * 4 };
  }

  /** The GEMM weights buffer and byte offset of a parameter (for sub-slices such as a TP rank's rows). */
  weightAt(l: number, name: string): { w: GPUBuffer; wOffset: number } {
    const v = this.plan.layout.byName.get(name);
    if (!v) throw new Error(`no parameter ${name}`);
    return { w: this.gemmWeights(l), wOffset: v.offset * 4 };
  }

  fakeQuant(label: string, x: Binding, n: number, rowLength: number, spec: QuantSpec, skipIf?: Binding): Dispatch[] {
    const k = qdq(this.rt, { label, x, n, rowLength, spec, skipIf });
    if (spec.rounding === 'stochastic') this.srKernels.push({ label, setSeed: (seed) => k.setSeed(seed) });
    return [...k];
  }

  /**
   * The study's fake quantization of a GEMM operand: x itself when `spec` is fp32, else a copy in the
   * scratch buffer `scratch`, quantized and dequantized per row (token) of `width` values.
   */
  private quantizedCopy(spec: QuantSpec, scratch: 'aq' | 'gq', label: string, x: GPUBuffer, width: number, push: (d: Dispatch | Dispatch[]) => void): Binding {
    if (isFp32(spec)) return x;
    const n = this.plan.dims.N * width;
    const q: Binding = { buffer: this.b(scratch), offset: 0, size: n * 4 };
    push(copy(this.rt, { label: `${label}.${scratch}`, src: x, dst: q, n }));
    push(this.fakeQuant(`${label}.${scratch}`, q, n, width, spec));
    return q;
  }

  /**
   * Where layer l's forward INT8 GEMMs read the X codes of saved tensor `key` from: its storage's
   * codes and scales when one set serves both (plan.sharedCodes), else undefined (i8.a).
   */
  private sharedX(l: number, key: GemmInputSaved | undefined): [string, string] | undefined {
    return key && this.plan.sharedCodes[l].has(key) ? [`L${l}.${key}.codes`, `L${l}.${key}.scales`] : undefined;
  }

  /** Whether the storage of layer l's saved `key` was written by its producer (inputNorm, inputSwiglu): no storage quantize pass. */
  producerStored(l: number, key: LayerSavedKey): boolean {
    return (PRODUCER_CODED as readonly string[]).includes(key) && this.plan.sharedCodes[l].has(key as GemmInputSaved);
  }

  /**
   * What the forward GEMMs of layer l read as input x (its gemm_inputs cell). With an INT8 forward
   * x is quantized per token here, once for all the GEMMs that read it (their codes in i8.a), unless
   * `producerCodes`: the kernel that produced x wrote them (inputNorm, inputSwiglu), or x is the
   * saved tensor `key` whose storage codes the GEMMs read (plan.sharedCodes).
   */
  gemmInput(l: number, label: string, x: GPUBuffer, width: number, push: (d: Dispatch | Dispatch[]) => void, producerCodes = false, key?: GemmInputSaved): Binding {
    if (this.runsF16(l, 'forward')) {
      // x's f16 copy for every GEMM that reads it: its f16 cell (written by its producer or its store),
      // its producer's (inputNorm, inputSwiglu, the attention's attnOut), else a cast here (counted: o
      // under INT8 attention scores, whose kernel writes fp32 only).
      if (!this.cell(l, key) && !this.heldCopy(x, this.plan.dims.N * width)) push(this.castTo(this.xKey, label, x, this.plan.dims.N * width, true).d);
      return x;
    }
    if (this.plan.layers[l].compute.forward === 'int8') {
      if (!producerCodes && !this.sharedX(l, key)) push(this.int8().quantizeRows(label, x, this.plan.dims.N, width));
      return x;
    }
    const q = this.quantizedCopy(this.plan.layers[l].gemmInputs, 'aq', label, x, width, push);
    if (q !== x) this.probePoints.set(label, { after: this.forward[this.forward.length - 1], x, xhat: q, n: this.plan.dims.N * width });
    return q;
  }

  /** Where a producer of layer l's forward X writes its INT8 codes: the saved tensor `key`'s storage where shared, else i8.a. */
  private producerCodes(l: number, key: GemmInputSaved): { codes: GPUBuffer; scales: GPUBuffer } {
    const [codes, scales] = this.sharedX(l, key) ?? ['i8.a', 'i8.as'];
    return { codes: this.b(codes), scales: this.b(scales) };
  }

  /**
   * An RMSNorm whose output (saved as `key`) feeds layer l's forward GEMMs: with an INT8 forward it also writes y's codes
   * (gemmInput's producerCodes). `o.resid`: x's copy there too (the layer's residual copy; a copy after the INT8 one).
   */
  inputNorm(l: number, key: 'h1' | 'h2', o: Parameters<typeof rmsnormForward>[1]): Dispatch[] {
    if (this.runsF16(l, 'forward')) return rmsnormForwardF16(this.rt, { ...o, y16: this.xOut(l, key, o.y as GPUBuffer, o.dims.N * o.dims.C), y16Only: this.plan.f16Only[l].has(key) });
    if (this.plan.layers[l].compute.forward !== 'int8') return [rmsnormForward(this.rt, o)];
    const { resid, ...norm } = o;
    const ds = rmsnormForwardQuantized(this.rt, { ...norm, ...this.producerCodes(l, key) });
    return resid ? [...ds, copy(this.rt, { label: `${o.label}.resid`, src: o.x, dst: resid, n: o.dims.N * o.dims.C })] : ds;
  }

  /** Where the attention forward (fp32 or f16) writes o's f16 copy for o_proj's f16 GEMM, or undefined where it runs fp32/INT8. */
  attnOut(l: number, o: GPUBuffer): F16Out | undefined {
    return this.runsF16(l, 'forward') ? this.xOut(l, 'o', o, this.plan.dims.N * this.plan.dims.QC) : undefined;
  }

  /** Where a producer writes its output x (saved as `key`)'s f16 copy for layer l's f16 forward GEMMs: the f16 cell, else f16.a (xKey) from 0. */
  private xOut(l: number, key: GemmInputSaved, x: GPUBuffer, n: number): F16Out {
    if (this.cell(l, key)) return this.cellOut(l, key);
    return { out: this.hold(x, 0, n, this.xKey), elem: this.elem };
  }

  /** The SwiGLU whose output feeds down_proj: with an INT8 forward it also writes h's codes. */
  inputSwiglu(l: number, o: Parameters<typeof swigluForward>[1]): Dispatch[] {
    if (this.plan.swigluHalf[l]) {
      // gate's and up's f16 storage and h's cell, nothing in fp32 (plan.swigluHalf).
      const words = (k: 'gate' | 'up') => this.b(`L${l}.${k}.codes`);
      return [swigluForwardStored(this.rt, { ...o, gateWords: words('gate'), upWords: words('up'), h16: this.cellOut(l, 'act') })];
    }
    if (this.runsF16(l, 'forward')) return swigluForwardF16(this.rt, { ...o, h16: this.xOut(l, 'act', o.h as GPUBuffer, o.dims.N * o.dims.F) });
    if (this.plan.layers[l].compute.forward !== 'int8') return [swigluForward(this.rt, o)];
    return swigluForwardQuantized(this.rt, { ...o, ...this.producerCodes(l, 'act') });
  }

  /**
   * out (+)= x · Wᵀ for layer l's linear `name`, W stored [out, in] (HF's layout): W is transposed
   * into the scratch `wT` first and the GEMM runs NN. A k-major operand goes from global to
   * workgroup memory as loaded, while a k-minor one is transposed in registers by a quarter of the
   * GEMM's threads (matmul.wgsl); docs/benchmarks.md has what that costs at the model's shapes.
   * Short inputs (fewer than LINEAR_NN_MIN_ROWS tokens) read W as stored: the transpose would cost more.
   * `key`: x is that saved tensor (an INT8 forward reads its storage codes where plan.sharedCodes).
   * `lowRank`: a LoRA adapter's term in the GEMM's epilogue (only where lowRankFits).
   */
  linear(label: string, l: number, name: string, x: Binding, out: Binding, M: number, N: number, K: number, accumulate = false, key?: GemmInputSaved, lowRank?: LowRank, via?: GPUBuffer): Dispatch[] {
    if (lowRank && !this.lowRankFits(l, 'forward', name)) throw new Error(`internal: ${label}: a low-rank epilogue on a GEMM without one`);
    if (this.runsF16(l, 'forward')) {
      // NT: W [out, in] as stored, read column-major; X's f16 copy is its f16 cell, its producer's or gemmInput's.
      const a = this.cell(l, key) ?? this.heldCopy(x, M * K);
      if (!a) throw new Error(`internal: ${label}: no f16 copy of X (gemmInput makes one)`);
      const { pre, w } = this.f16Weight(`model.layers.${l}.${name}`);
      return [...pre, ...this.f16Gemm(label, { label, a, b: w, c: out, M, N, K, transB: true, accumulate, lowRank })];
    }
    if (this.qbase) return [this.qbase.forward(label, `model.layers.${l}.${name}`, x, out, M, N, K, accumulate)];
    if (this.plan.layers[l].compute.forward === 'int8') return this.int8().forward(label, this.forwardW(l, name), out, M, N, K, accumulate, this.sharedX(l, key));
    if (!linearsTransposed(M, this.linearNnMinRows)) {
      return this.fp32Accumulate(label, out, M * N, accumulate, via, (c, acc) => [matmul(this.rt, { label, a: x, b: this.lin(l, name), c, M, N, K, transB: true, accumulate: acc, lowRank })]);
    }
    return [
      transposeMatrix(this.rt, { label: `${label}.wT`, src: this.lin(l, name), dst: this.b('wT'), rows: N, cols: K }),
      ...this.fp32Accumulate(label, out, M * N, accumulate, via, (c, acc) => [matmul(this.rt, { label, a: x, b: { buffer: this.b('wT'), offset: 0, size: N * K * 4 }, c, M, N, K, accumulate: acc, lowRank })]),
    ];
  }

  /**
   * An fp32 GEMM C (+)= ·: where it accumulates and the caller names `via` (a scratch dead at that point, at
   * least C's size), it writes via and then C += 1·via: the same bits as accumulating (C + the sum either way),
   * and faster where the accumulating pipeline is the slow one (H100, base's 8192×768×2560: 0.98 ms against 0.75).
   */
  private fp32Accumulate(label: string, out: Binding, n: number, accumulate: boolean, via: GPUBuffer | undefined, gemm: (c: Binding, accumulate: boolean) => Dispatch[]): Dispatch[] {
    if (!accumulate || !via || via.size < n * 4 || asSlice(out).buffer === via) return gemm(out, accumulate);
    const s = { buffer: via, offset: 0, size: n * 4 };
    return [...gemm(s, false), axpy(this.rt, { label: `${label}.acc`, x: s, out, alpha: 1, n })];
  }

  /**
   * Whether layer l's forward or dX GEMM of linear `name` takes a LoRA adapter's term in its epilogue:
   * the fp32 GEMMs do (matmul.ts lowRank: r outer products on the register tile); the f16 ones where
   * that GEMM multiplies the term on this device's tensor cores (its layout passed the low-rank check:
   * f16LowRankOnTensorCores), or as LoraPlan.f16Epilogue pins it (the per-element lowRank() elsewhere
   * sums r products from global memory and drops the direct tile stores: slower than a GEMM of its
   * own); QLoRA's fp32 weight-only GEMM and the INT8 ones do not. Where not, the term is an fp32 GEMM of its own.
   */
  lowRankFits(l: number, kind: 'forward' | 'dx', name: string): boolean {
    if (this.runsF16(l, kind)) {
      const pinned = this.plan.lora?.f16Epilogue;
      if (pinned) return pinned.includes(kind);
      const w = this.plan.layout.byName.get(`model.layers.${l}.${name}`);
      if (!w || w.shape.length !== 2) throw new Error(`internal: model.layers.${l}.${name} is not a linear weight`);
      const [out, inW] = w.shape;
      const N = this.plan.dims.N;
      return kind === 'forward' ? f16LowRankOnTensorCores(this.rt, 'NT', { M: N, N: out, K: inW }) : f16LowRankOnTensorCores(this.rt, 'NN', { M: N, N: inW, K: out });
    }
    return !this.qbase && this.plan.layers[l].compute[kind] !== 'int8';
  }

  private int8(): Int8Gemms {
    if (!this.i8) throw new Error('internal: an INT8 GEMM in a plan without INT8 buffers');
    return this.i8;
  }

  /**
   * Where the kernel producing a dY for layer l's INT8 dX GEMM writes its codes (i8.a), or undefined
   * where that GEMM quantizes dY itself: an fp32 dX, or stochastic rounding (the producers round to nearest).
   */
  dyCodes(l: number): { codes: GPUBuffer; scales: GPUBuffer } | undefined {
    return producerDyCodes(this.plan.layers[l].compute) ? { codes: this.b('i8.a'), scales: this.b('i8.as') } : undefined;
  }

  /** Where layer l's SwiGLU backward writes the codes of [dgate | dup] (i8.a [N, 2F]), or undefined where gate_proj's and up_proj's dX run as two GEMMs. */
  gateUpCodes(l: number): { codes: GPUBuffer; scales: GPUBuffer } | undefined {
    return this.plan.gateUpDx[l] ? this.dyCodes(l) : undefined;
  }

  /**
   * dX = [dgate | dup]·[Wgate ; Wup] of layer l as one INT8 GEMM over K = 2F (plan.gateUpDx): dY's
   * codes are in i8.a (gateUpCodes), W's per input channel over both weights, which lie back to back.
   */
  gateUpDxGemm(l: number, label: string, out: GPUBuffer): Dispatch[] {
    const { N, C, F } = this.plan.dims;
    const at = (s: string) => this.plan.layout.byName.get(`model.layers.${l}.${s}`)!;
    const [gate, up] = [at('mlp.gate_proj.weight'), at('mlp.up_proj.weight')];
    if (!this.plan.gateUpDx[l] || up.offset !== gate.offset + gate.size) throw new Error(`internal: ${label}: gate_proj and up_proj do not run as one dX GEMM`);
    const w = this.wcodes?.cols(gateUpKey(l)) ?? { buffer: this.gemmWeights(l), offset: gate.offset * 4, size: 2 * gate.size * 4 };
    return this.int8().dx(label, null, w, out, N, C, 2 * F, false, 'nearest');
  }

  /**
   * dX (+)= dY·W for layer l's linear `name` (W [K, N] = [out, in]) in the layer's dX compute format;
   * `producerCodes`: dY's INT8 codes are already in i8.a (dyCodes); `lowRank`: a LoRA group's dX
   * term in the GEMM's epilogue (only where lowRankFits).
   */
  dxGemm(l: number, label: string, dy: GPUBuffer, name: string, out: GPUBuffer, M: number, N: number, K: number, accumulate = false, producerCodes = false, lowRank?: LowRank, via?: GPUBuffer): Dispatch[] {
    if (lowRank && !this.lowRankFits(l, 'dx', name)) throw new Error(`internal: ${label}: a low-rank epilogue on a GEMM without one`);
    const c = this.plan.layers[l].compute;
    if (this.runsF16(l, 'dx')) {
      // NN: dY [M, K] in f16 (its producer's copy where it wrote one), W [K, N] = [out, in] as stored.
      const { d, out: dy16 } = this.dyCopy(label, dy, M * K);
      const { pre, w } = this.f16Weight(`model.layers.${l}.${name}`);
      return [...d, ...pre, ...this.f16Gemm(label, { label, a: dy16, b: w, c: out, M, N, K, accumulate, lowRank })];
    }
    if (this.qbase) return this.qbase.dx(label, `model.layers.${l}.${name}`, dy, out, M, N, K, accumulate);
    if (c.dx === 'int8') {
      const w = this.wcodes?.cols(`model.layers.${l}.${name}`) ?? this.lin(l, name);
      return this.int8().dx(label, producerCodes ? null : dy, w, out, M, N, K, accumulate, c.gradRounding);
    }
    return this.fp32Accumulate(label, out, M * N, accumulate, via, (c, acc) => [matmul(this.rt, { label, a: dy, b: this.lin(l, name), c, M, N, K, accumulate: acc, lowRank })]);
  }

  /**
   * dW = dYᵀ·X of layer l (dY [tokens, outW], X [tokens, inW]) in the layer's dW compute format:
   * fp32 (split over tokens into `scratch`, dY through its gemm_output_grads cell), or INT8 in
   * blocks of tokens or per channel over all of them; `xShared`: X's INT8 codes are the previous dW GEMM's (q/k/v, gate/up).
   * `key`: X is that saved tensor (an f16 dW GEMM reads its f16 cell where the plan has one: xFromCell).
   */
  dwGemm(l: number, label: string, dy: GPUBuffer, outW: number, x: GPUBuffer, inW: number, c: Binding, scratch: 'dq' | 'dF1',
    push: (d: Dispatch | Dispatch[]) => void, xShared = false, key?: GemmInputSaved): void {
    const cp = this.plan.layers[l].compute;
    if (this.runsF16(l, 'dw')) {
      // TN: dW [outW, inW] = dYᵀ·X over the step's tokens in f16; split-K partials in `scratch` as the fp32 GEMM's.
      const K = this.plan.dims.N;
      const dy16 = this.dyCopy(label, dy, K * outW);
      // X is its f16 cell, else a saved fp32 activation: cast here (counted), once for the dW GEMMs that share it (xShared: q/k/v, gate/up).
      const cell = this.cell(l, key);
      const x16 = cell ? { d: [], out: cell }
        : xShared ? { d: [], out: { buffer: this.b('f16.x'), offset: 0, size: this.opBytes(K * inW) } } : (({ d, out }) => ({ d: [d], out }))(this.castTo('f16.x', label, x, K * inW));
      const ws = this.dwWorkspace(scratch);
      push([...dy16.d, ...x16.d, ...this.f16Gemm(label, { label, a: dy16.out, b: x16.out, c, M: outW, N: inW, K, transA: true, workspace: ws })]);
      return;
    }
    if (cp.dw === 'fp32') {
      push(this.dwMatmul({ label, a: this.dwGrad(l, label, dy, outW, push), b: x, c, M: outW, N: inW, K: this.plan.dims.N, transA: true }, scratch));
      return;
    }
    if (!xShared) push(this.int8().dwInput(label, x, inW, cp.dwBlock));
    push(this.int8().dw(label, dy, outW, inW, c, cp.dwBlock, cp.gradRounding, this.dwWorkspace(scratch)));
  }

  /**
   * Whether layer l's dW GEMMs read X `key` from its f16 cell (dwGemm), so the backward need not unpack
   * the cell into its fp32 live copy for them (a frozen base's adapters read the cell too: loraX).
   */
  xFromCell(l: number, key: GemmInputSaved): boolean {
    return this.runsF16(l, 'dw') && !!this.cell(l, key);
  }

  /**
   * Layer l's saved `key` as the X of its LoRA adapters' fp32 GEMMs (lora/gemms.ts LoraX): its f16 cell,
   * packed f16 that the GEMMs widen at load (`half`), or the twin's f32 elements read as is; undefined without one.
   */
  loraX(l: number, key: GemmInputSaved): { b: Binding; half: boolean } | undefined {
    const b = this.cell(l, key);
    return b && { b, half: !this.plan.f16Twin };
  }

  /** The output gradient a dW GEMM of layer l reads (its gemm_output_grads cell; dX uses dy as is). */
  private dwGrad(l: number, label: string, dy: GPUBuffer, width: number, push: (d: Dispatch | Dispatch[]) => void): Binding {
    return this.quantizedCopy(this.plan.layers[l].gemmOutputGrads, 'gq', label, dy, width, push);
  }

  /** The kernel each layer's forward, dX and dW GEMMs (and, from `attn`, its attention scores) run on this device. */
  computePaths(attn: ReadonlyMap<string, GemmPath> = new Map()): LayerPaths[] {
    return computePaths(this.plan.layers, new Map([...(this.i8?.paths ?? []), ...this.f16Paths, ...attn]), this.plan.training, this.plan.f16?.layers.map((p) => p.note));
  }

  /** The INT8 dW GEMMs that run split over K, by label: their slice counts. */
  gemmSplits(): ReadonlyMap<string, number> {
    return this.i8?.splits ?? new Map();
  }
}
