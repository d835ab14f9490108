/**
 * Parameters live in ONE flat fp32 buffer (llm.c style); each tensor is a view at an offset
 * aligned to 256 bytes (WebGPU's storage-binding offset alignment). Gradients and the Adam moments use the
 * same layout, so global-norm clipping, AdamW and gradient all-reduce each run over one flat range.
 * Decayed tensors (ndim >= 2) come first, then the rest, so AdamW needs just two ranges.
 */
import { deriveSeed, Rng } from '../util/rng';
import { type ModelConfig, paramSpecs, type ParamSpec } from './config';

export const ALIGN_FLOATS = 64; // 256 bytes

export interface ParamView extends ParamSpec {
  /** Offset in floats into the flat buffer. */
  offset: number;
  /** Number of elements (product of shape). */
  size: number;
}

export interface ParamLayout {
  views: ParamView[];
  byName: Map<string, ParamView>;
  /** Total floats including alignment padding. */
  totalFloats: number;
  /** [start, end) in floats of the decayed and non-decayed regions. */
  decayRange: [number, number];
  noDecayRange: [number, number];
  /** Real parameters (no padding). */
  count: number;
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

export function paramLayout(c: ModelConfig): ParamLayout {
  return layoutOf(paramSpecs(c));
}

/** The flat layout of any list of tensors (the model's parameters, or LoRA adapters: engine/lora). */
export function layoutOf(specs: readonly ParamSpec[]): ParamLayout {
  const ordered = [...specs.filter((s) => s.decay), ...specs.filter((s) => !s.decay)];
  const views: ParamView[] = [];
  let off = 0;
  let decayEnd = 0;
  for (const s of ordered) {
    const size = s.shape.reduce((a, b) => a * b, 1);
    views.push({ ...s, offset: off, size });
    off = alignUp(off + size, ALIGN_FLOATS);
    if (s.decay) decayEnd = off;
  }
  return {
    views,
    byName: new Map(views.map((v) => [v.name, v])),
    totalFloats: off,
    decayRange: [0, decayEnd],
    noDecayRange: [decayEnd, off],
    count: views.reduce((s, v) => s + v.size, 0),
  };
}

/**
 * Hugging Face LlamaPreTrainedModel init: linear and embedding weights ~ N(0, initializer_range),
 * RMSNorm weights = 1. Each tensor draws from its own stream (seed, name), so adding a layer does not
 * change the others' values.
 */
export function initParams(c: ModelConfig, layout: ParamLayout, seed: number): Float32Array {
  const flat = new Float32Array(layout.totalFloats);
  for (const v of layout.views) {
    const dst = flat.subarray(v.offset, v.offset + v.size);
    if (v.shape.length === 1) {
      dst.fill(1);
    } else {
      const rng = new Rng(deriveSeed(seed, v.name));
      for (let i = 0; i < v.size; i++) dst[i] = rng.normal() * c.initializer_range;
    }
  }
  return flat;
}

export function viewOf(flat: Float32Array, v: ParamView): Float32Array {
  return flat.subarray(v.offset, v.offset + v.size);
}

/** name → copy of each tensor (for checkpoints). */
export function unflatten(flat: Float32Array, layout: ParamLayout): Map<string, Float32Array> {
  return new Map(layout.views.map((v) => [v.name, flat.slice(v.offset, v.offset + v.size)]));
}

export function flatten(tensors: Map<string, Float32Array>, layout: ParamLayout): Float32Array {
  const flat = new Float32Array(layout.totalFloats);
  for (const v of layout.views) {
    const t = tensors.get(v.name);
    if (!t) throw new Error(`missing parameter ${v.name}`);
    if (t.length !== v.size) throw new Error(`parameter ${v.name} has ${t.length} values, expected ${v.size}`);
    flat.set(t, v.offset);
  }
  return flat;
}
