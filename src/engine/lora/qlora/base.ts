/**
 * The quantized frozen base of a QLoRA model (./plan.ts) on the GPU: its upload (the dense tensors
 * as they are, each block linear staged fp32 in `qlora.w` and quantized there by the project's GPU
 * quantizer, so no fp32 copy of it stays), its forward GEMMs (weight-only: codes dequantized while
 * staged, kernels/qgemm), its dX GEMMs (the linear dequantized into `qlora.w`, then the fp32
 * matmul) and its read-back (the dequantized base, what the model computes with). Under f16 compute
 * the linear is dequantized to f16 into `qlora.w` right before each of its GEMMs (forward and dX), as
 * bitsandbytes does: one linear's scratch shared by all, never an f16 copy of the whole base
 * (LinearGemms runs the f16 GEMM on it).
 */
import type { Binding, Dispatch, Runtime } from '../../gpu/runtime';
import { qgemmWeightOnly } from '../../kernels/qgemm/qgemm';
import { f16OperandBytes } from '../../kernels/matmul-f16/cast';
import { buildDequantize, quantizeInto, type QuantizeSpec } from '../../kernels/quantize/quantize';
import { matmul } from '../../kernels/matmul/matmul';
import type { ParamLayout } from '../../model/params';
import type { QloraLinear, QloraPlan } from './plan';

export class QloraBase {
  /** Per linear: its quantize-from-qlora.w dispatch (upload) and dequantize-into-qlora.w dispatch (dX, read-back), built once. */
  private readonly quant = new Map<string, Dispatch[]>();
  private readonly dequant = new Map<string, Dispatch[]>();
  private readonly dequantF16 = new Map<string, Dispatch[]>();
  private readonly uniforms: GPUBuffer[] = [];
  private readonly owned: { destroy(): void }[] = [];

  constructor(
    private readonly rt: Runtime,
    readonly plan: QloraPlan,
    private readonly b: (key: string) => GPUBuffer,
    /** The f16 GEMMs run their f32 twins (RunPlan.f16Twin): the f16 base is stored as f16-rounded f32. */
    private readonly f16Twin = false,
  ) {}

  private lin(name: string): QloraLinear {
    const q = this.plan.byName.get(name);
    if (!q) throw new Error(`QLoRA: ${name} is not a quantized base linear`);
    return q;
  }

  private spec(q: QloraLinear): QuantizeSpec {
    return { format: this.plan.spec.format, granularity: { kind: 'group', size: q.G }, n: q.rows * q.cols };
  }

  private scratch(q: QloraLinear): Binding {
    return { buffer: this.b('qlora.w'), offset: 0, size: q.rows * q.cols * 4 };
  }

  /** out (+)= x · Wᵀ, W [N, K] = [out, in] read as its codes. */
  forward(label: string, name: string, x: Binding, out: Binding, M: number, N: number, K: number, accumulate: boolean): Dispatch {
    const q = this.lin(name);
    return qgemmWeightOnly(this.rt, {
      label, x, wq: this.b(q.codesKey), ws: this.b(q.scalesKey), c: out, format: this.plan.spec.format, G: q.G, M, N, K, accumulate,
    });
  }

  /** W dequantized into qlora.w (row-major [out, in], fp32). */
  dequantize(name: string): Dispatch[] {
    const q = this.lin(name);
    let d = this.dequant.get(name);
    if (!d) {
      const k = buildDequantize(this.rt, this.spec(q), this.b(q.codesKey), this.b(q.scalesKey), { out: this.b('qlora.w') });
      this.owned.push(k);
      d = k.dispatches;
      this.dequant.set(name, d);
    }
    return d;
  }

  /**
   * W dequantized to f16 into qlora.w (row-major [out, in]; packed halves, or f16-rounded f32 in the
   * twin): the dispatches, to run right before the GEMM that reads `w`.
   */
  dequantizeF16(name: string): { dispatches: Dispatch[]; w: Binding } {
    const q = this.lin(name);
    let d = this.dequantF16.get(name);
    if (!d) {
      const k = buildDequantize(this.rt, this.spec(q), this.b(q.codesKey), this.b(q.scalesKey), { out: this.b('qlora.w'), f16: this.f16Twin ? 'twin' : 'packed' });
      this.owned.push(k);
      d = k.dispatches;
      this.dequantF16.set(name, d);
    }
    return { dispatches: d, w: { buffer: this.b('qlora.w'), offset: 0, size: f16OperandBytes(q.rows * q.cols, this.f16Twin) } };
  }

  /** dX (+)= dY · W (dY [M, K], W [K, N] = [out, in]) through W's dequantized copy. */
  dx(label: string, name: string, dy: Binding, out: Binding, M: number, N: number, K: number, accumulate: boolean): Dispatch[] {
    const q = this.lin(name);
    return [...this.dequantize(name), matmul(this.rt, { label, a: dy, b: this.scratch(q), c: out, M, N, K, accumulate })];
  }

  /** Writes the full model's flat parameters (`full` layout): the dense ones into `weights`, the linears as codes. */
  upload(flat: Float32Array, full: ParamLayout): void {
    const dense = new Float32Array(this.plan.dense.totalFloats);
    for (const v of this.plan.dense.views) {
      const src = full.byName.get(v.name)!;
      dense.set(flat.subarray(src.offset, src.offset + src.size), v.offset);
    }
    this.rt.write(this.b('weights'), dense);
    for (const q of this.plan.linears) {
      const v = full.byName.get(q.name)!;
      // The queue orders each write before the quantize submitted after it.
      this.rt.write(this.b('qlora.w'), flat.subarray(v.offset, v.offset + v.size));
      let d = this.quant.get(q.name);
      if (!d) {
        const k = quantizeInto(this.rt, this.spec(q), this.scratch(q), { buffer: this.b(q.codesKey) }, { buffer: this.b(q.scalesKey) });
        this.uniforms.push(k.params);
        d = k.dispatches;
        this.quant.set(q.name, d);
      }
      this.rt.run(d);
    }
  }

  /** The full model's flat parameters as the GPU holds them: the dense tensors and the dequantized linears. */
  async read(full: ParamLayout): Promise<Float32Array> {
    const flat = new Float32Array(full.totalFloats);
    const dense = await this.rt.readF32(this.b('weights'), 0, this.plan.dense.totalFloats);
    for (const v of this.plan.dense.views) flat.set(dense.subarray(v.offset, v.offset + v.size), full.byName.get(v.name)!.offset);
    for (const q of this.plan.linears) {
      this.rt.run(this.dequantize(q.name));
      flat.set(await this.rt.readF32(this.b('qlora.w'), 0, q.rows * q.cols), full.byName.get(q.name)!.offset);
    }
    return flat;
  }

  /** The codes and scales of linear `name` (tests: the base never changes). */
  async codes(name: string): Promise<{ codes: Uint32Array; scales: Float32Array }> {
    const q = this.lin(name);
    return { codes: await this.rt.readU32(this.b(q.codesKey), 0, q.words), scales: await this.rt.readF32(this.b(q.scalesKey), 0, q.scales) };
  }

  destroy(): void {
    for (const u of this.uniforms) this.rt.mem.free(u);
    for (const k of this.owned) k.destroy();
    this.uniforms.length = 0;
    this.owned.length = 0;
  }
}
