/**
 * DiLoCo's outer state on the GPU (diloco.ts drives it): θ_global and the Nesterov momentum as flat
 * buffers beside the model's weights, the model cut into fragments (whole layers, in the flat
 * layout's order), and per fragment the pseudo-gradient θ_global − θ_local computed and block
 * quantized on the GPU (INT8/INT4 absmax per 256, engine/kernels/quantize.ts) so that only codes and
 * scales are read back — in the all-reduce's wire layout, so its codec re-derives the same codes —
 * and the outer step applied on the GPU (engine/optim/outer.ts).
 */
import type { LlamaGpu } from '../../engine/model/llama';
import type { ParamLayout } from '../../engine/model/params';
import { readSafetensors, writeSafetensors } from '../../engine/io/safetensors';
import { buildQuantize, type QuantizeKernel } from '../../engine/kernels/quantize/quantize';
import { type OuterDispatches, outerDispatches, type OuterHyper } from '../../engine/optim/outer';
import { AGOQ_BLOCK, type WireFormat } from '../../engine/scheme/wire';
import { hashBuffers } from '../../engine/kernels/hash/hash';
import { floatsHash } from '../../engine/kernels/hash/hash.ref';
import { digestOfParts } from '../../peers/collectives/digest';
import { decodeInt8Chunk } from '../../peers/collectives/chunk-codec';
import { decodeInt4Chunk } from '../../peers/collectives/int4-chunk';
import type { Trainer } from '../../engine/train/trainer';
import { HeldOutEvaluator } from './held-out';

/** A contiguous range [off, off + n) of the flat layout holding whole tensors. */
export interface Fragment {
  off: number;
  n: number;
  /** The tensors it holds (first and last), for reports. */
  first: string;
  last: string;
}

const layerOf = (name: string): number | null => {
  const m = /(?:^|\.)layers\.(\d+)\./.exec(name);
  return m ? Number(m[1]) : null;
};

/**
 * F fragments of about equal layer counts: tensors before the first layer (embeddings) go with the
 * first fragment, those after the last layer (final norm, lm_head) with the last.
 */
export function fragmentsOf(layout: ParamLayout, count: number): Fragment[] {
  const views = [...layout.views].sort((a, b) => a.offset - b.offset);
  const layers = [...new Set(views.map((v) => layerOf(v.name)).filter((l): l is number => l !== null))].sort((a, b) => a - b);
  if (!Number.isInteger(count) || count < 1) throw new Error(`DiLoCo: fragments must be an integer ≥ 1, got ${count}`);
  if (count > Math.max(1, layers.length)) throw new Error(`DiLoCo: ${count} fragments for a model of ${layers.length} layers`);
  // Fragment of each layer: layers split into `count` runs of ⌊L/F⌋ or ⌈L/F⌉.
  const fragOfLayer = new Map(layers.map((l, i) => [l, Math.floor((i * count) / layers.length)]));
  let current = 0;
  const starts: { at: number; name: string }[] = [{ at: 0, name: views[0]?.name ?? '' }];
  const ends: string[] = [];
  let prev = views[0]?.name ?? '';
  for (const v of views) {
    const l = layerOf(v.name);
    const f = l === null ? current : fragOfLayer.get(l)!;
    if (f > current) {
      ends.push(prev);
      starts.push({ at: v.offset, name: v.name });
      current = f;
    }
    prev = v.name;
  }
  ends.push(prev);
  return starts.map((s, i) => ({ off: s.at, n: (i + 1 < starts.length ? starts[i + 1].at : layout.totalFloats) - s.at, first: s.name, last: ends[i] }));
}

interface FragmentKernels {
  outer: OuterDispatches;
  quantize: QuantizeKernel | null;
}

export class OuterState {
  readonly fragments: Fragment[];
  readonly total: number;
  private readonly global: GPUBuffer;
  private readonly momentum: GPUBuffer;
  private readonly d: GPUBuffer;
  private readonly kernels: FragmentKernels[];

  constructor(private readonly model: LlamaGpu, fragments: number, readonly wire: WireFormat, hyper: OuterHyper) {
    const { rt } = model;
    this.fragments = fragmentsOf(model.layout, fragments);
    this.total = model.layout.totalFloats;
    const bytes = this.total * 4;
    this.global = rt.createBuffer('optimizer', 'diloco.global', bytes);
    this.momentum = rt.createBuffer('optimizer', 'diloco.momentum', bytes);
    const maxN = Math.max(...this.fragments.map((f) => f.n));
    this.d = rt.createBuffer('workspace', 'diloco.delta', maxN * 4);
    const w = model.b('weights');
    this.kernels = this.fragments.map((f, i) => ({
      outer: outerDispatches(rt, { label: `diloco.f${i}`, w, global: this.global, momentum: this.momentum, d: this.d, off: f.off, n: f.n, hyper }),
      quantize: wire === 'fp32' ? null : buildQuantize(rt, { format: wire, granularity: { kind: 'group', size: AGOQ_BLOCK }, n: f.n }, this.d),
    }));
    this.resetFromWeights();
  }

  /** The held-out check's evaluator over this state's θ_global (held-out.ts), for `trainer`'s model. */
  evaluator(trainer: Trainer): HeldOutEvaluator {
    if (trainer.model !== this.model) throw new Error('DiLoCo: the held-out evaluator needs the outer state\'s own model');
    return new HeldOutEvaluator(trainer, this.global, this.d);
  }

  /** θ_global := the model's weights, momentum := 0 (a run's start). */
  resetFromWeights(): void {
    const { rt } = this.model;
    const enc = rt.device.createCommandEncoder();
    enc.copyBufferToBuffer(this.model.b('weights'), 0, this.global, 0, this.total * 4);
    enc.clearBuffer(this.momentum);
    rt.device.queue.submit([enc.finish()]);
  }

  /**
   * Fragment f's pseudo-gradient θ_global − θ_local, as the wire carries it: computed (and quantized)
   * on the GPU; read back as codes + scales and decoded exactly (fp32: the values).
   */
  async delta(f: number): Promise<Float32Array> {
    const { rt } = this.model;
    const k = this.kernels[f];
    const n = this.fragments[f].n;
    rt.run([k.outer.delta, ...(k.quantize?.dispatches ?? [])]);
    if (!k.quantize) return rt.readF32(this.d, 0, n);
    const nb = k.quantize.numScales;
    const codeBytes = this.wire === 'int4' ? Math.ceil(n / 2) : n;
    const [scales, words] = await Promise.all([rt.read(k.quantize.scales, 0, nb * 4), rt.read(k.quantize.words, 0, Math.ceil(codeBytes / 4) * 4)]);
    const payload = new Uint8Array(4 * nb + codeBytes);
    payload.set(new Uint8Array(scales), 0);
    payload.set(new Uint8Array(words, 0, codeBytes), 4 * nb);
    return this.wire === 'int4' ? decodeInt4Chunk(payload, n, AGOQ_BLOCK, 'self') : decodeInt8Chunk(payload, n, AGOQ_BLOCK, 'self');
  }

  /** The outer step of fragment f for the group's mean pseudo-gradient; sets (or mixes) the local weights. */
  apply(f: number, mean: Float32Array): void {
    if (mean.length !== this.fragments[f].n) throw new Error(`DiLoCo: mean of ${mean.length} floats for fragment ${f} of ${this.fragments[f].n}`);
    const { rt } = this.model;
    rt.write(this.d, mean);
    rt.run([this.kernels[f].outer.apply]);
  }

  async read(): Promise<{ global: Float32Array; momentum: Float32Array }> {
    const { rt } = this.model;
    const [global, momentum] = await Promise.all([rt.readF32(this.global, 0, this.total), rt.readF32(this.momentum, 0, this.total)]);
    return { global, momentum };
  }

  write(s: { global: Float32Array; momentum: Float32Array }): void {
    for (const [k, a] of [['global', s.global], ['momentum', s.momentum]] as const) {
      if (a.length !== this.total) throw new Error(`DiLoCo: ${k} of ${a.length} floats, the model has ${this.total}`);
      for (let i = 0; i < a.length; i++) if (!Number.isFinite(a[i])) throw new Error(`DiLoCo: ${k} holds a non-finite value at ${i}`);
    }
    this.model.rt.write(this.global, s.global);
    this.model.rt.write(this.momentum, s.momentum);
  }

  /** outerHash of θ_global and the momentum, on the GPU: what every member must hold alike. */
  hash(): Promise<number> {
    const words = this.model.layout.totalFloats;
    return hashBuffers(this.model.rt, 'outer.hash', [{ buffer: this.global, words }, { buffer: this.momentum, words }]);
  }

  destroy(): void {
    const { mem } = this.model.rt;
    for (const k of this.kernels) k.quantize?.destroy();
    for (const b of [this.global, this.momentum, this.d]) mem.free(b);
  }
}

/** The weights hash (engine/kernels/hash.ref.ts) of θ_global then the momentum. */
export function outerHash(global: Float32Array, momentum: Float32Array): number {
  return floatsHash(global, momentum);
}

/** The outer state a checkpoint holds: θ_global, momentum, outer steps taken (per fragment). */
/** What DiLoCo's members vouch for at a sync: SHA-256 of the SHA-256s of outer steps (u32 LE), θ_global and momentum. */
export function outerDigest(s: Pick<OuterCheckpoint, 'global' | 'momentum' | 'outerSteps'>): Promise<Uint8Array> {
  const f = (x: Float32Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
  const steps = new Uint8Array(4);
  new DataView(steps.buffer).setUint32(0, s.outerSteps >>> 0, true);
  return digestOfParts([steps, f(s.global), f(s.momentum)]);
}

export interface OuterCheckpoint {
  global: Float32Array;
  momentum: Float32Array;
  outerSteps: number;
  /** In a hand-over: weightsHash of the sender's local weights (its trainer state follows). */
  weightsHash?: number;
}

export function encodeOuterCheckpoint(s: OuterCheckpoint): Uint8Array {
  const t = (name: string, a: Float32Array) => ({ name, dtype: 'F32' as const, shape: [a.length], data: a });
  const meta: Record<string, string> = { format: 'diloco-outer', outer_steps: String(s.outerSteps) };
  if (s.weightsHash !== undefined) meta.weights_hash = String(s.weightsHash >>> 0);
  return writeSafetensors([t('global', s.global), t('momentum', s.momentum)], meta);
}

/** Reads and checks an outer checkpoint for a model of `total` floats; throws naming what is wrong. */
export function decodeOuterCheckpoint(bytes: Uint8Array, total: number): OuterCheckpoint {
  const f = readSafetensors(bytes);
  if (f.metadata.format !== 'diloco-outer') throw new Error('outer.safetensors: not a DiLoCo outer state (metadata format)');
  const outerSteps = Number(f.metadata.outer_steps);
  if (!Number.isSafeInteger(outerSteps) || outerSteps < 0) throw new Error(`outer.safetensors: bad outer_steps '${f.metadata.outer_steps}'`);
  const get = (name: string) => {
    const t = f.tensors.get(name);
    if (!t || t.dtype !== 'F32' || t.shape.length !== 1 || t.shape[0] !== total) throw new Error(`outer.safetensors: ${name} must be F32 [${total}]`);
    return Float32Array.from(t.data as Float32Array);
  };
  const h = f.metadata.weights_hash;
  const weightsHash = h === undefined ? undefined : Number(h);
  if (weightsHash !== undefined && !(Number.isSafeInteger(weightsHash) && weightsHash >= 0 && weightsHash < 2 ** 32)) throw new Error(`outer.safetensors: bad weights_hash '${h}'`);
  const out: OuterCheckpoint = { global: get('global'), momentum: get('momentum'), outerSteps };
  if (weightsHash !== undefined) out.weightsHash = weightsHash;
  return out;
}
