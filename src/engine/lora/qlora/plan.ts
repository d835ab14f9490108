/**
 * QLoRA (issue 39 item 2): LoRA over a frozen base whose block linears (q/k/v/o, gate/up/down) live
 * on the GPU only as INT4, NF4 (QLoRA's NormalFloat table, src/engine/quant/nf4.ts) or INT8 codes
 * with fp32 absmax scales per group of `group` inputs along each weight row (the project's codec,
 * src/engine/quant; QLoRA's block size 64). NF4 reconstructs normal weights ~14 % better than INT4
 * at the same 4.5 bits (docs/benchmarks.md); QLoRA's double quantization of the scales is not done. Embeddings, norms and
 * lm_head stay fp32 in `weights`, whose layout (`dense`) then holds only them. Forward runs the
 * weight-only GEMM (kernels/qgemm qgemmWeightOnly), backward's dX dequantizes one linear at a time
 * into `qlora.w` (./base.ts).
 */
import { z } from 'zod';
import type { ModelConfig } from '../../model/config';
import type { BufferSpec } from '../../model/dims';
import { layoutOf, type ParamLayout, paramLayout } from '../../model/params';
import { BITS } from '../../quant/formats';

export const QLORA_FORMATS = ['int4', 'nf4', 'int8'] as const;
export type QloraFormat = (typeof QLORA_FORMATS)[number];

export const QloraSpecSchema = z
  .object({
    format: z.enum(QLORA_FORMATS),
    /** Inputs per scale along a weight row (a linear whose in-dim it does not divide uses gcd(group, in)). */
    group: z.number().int().min(8).max(4096),
  })
  .strict();
export type QloraSpec = z.infer<typeof QloraSpecSchema>;

export const defaultQloraSpec = (format: QloraFormat, group = 64): QloraSpec => QloraSpecSchema.parse({ format, group });

/** One quantized base linear: W [rows = out, cols = in], codes and scales in their own buffers. */
export interface QloraLinear {
  name: string;
  rows: number;
  cols: number;
  /** The group this linear uses (gcd(spec.group, cols)). */
  G: number;
  codesKey: string;
  scalesKey: string;
  /** u32 words of codes, f32 scales. */
  words: number;
  scales: number;
}

export interface QloraPlan {
  spec: QloraSpec;
  /** What `weights` holds: every parameter but the block linears (same order rules as paramLayout). */
  dense: ParamLayout;
  linears: QloraLinear[];
  byName: ReadonlyMap<string, QloraLinear>;
  /** Floats of the largest linear (the qlora.w scratch). */
  maxFloats: number;
}

const gcd = (a: number, b: number): number => (b ? gcd(b, a % b) : a);

/** A block linear's weight: `model.layers.L.{self_attn,mlp}.X_proj.weight`. */
export const isBlockLinear = (name: string, shape: readonly number[]): boolean => name.startsWith('model.layers.') && shape.length === 2;

export function resolveQloraPlan(cfg: ModelConfig, spec: QloraSpec): QloraPlan {
  const s = QloraSpecSchema.parse(spec);
  const cpw = 32 / BITS[s.format];
  const full = paramLayout(cfg);
  const linears: QloraLinear[] = [];
  for (const v of full.views) {
    if (!isBlockLinear(v.name, v.shape)) continue;
    const [rows, cols] = v.shape;
    const G = gcd(s.group, cols);
    if (G % cpw) throw new Error(`QLoRA ${s.format}: ${v.name}'s input width ${cols} has no group of a multiple of ${cpw} dividing it and ${s.group}`);
    linears.push({ name: v.name, rows, cols, G, codesKey: `qlora.codes.${v.name}`, scalesKey: `qlora.scales.${v.name}`, words: (rows * cols) / cpw, scales: (rows * cols) / G });
  }
  const dense = layoutOf(full.views.filter((v) => !isBlockLinear(v.name, v.shape)).map(({ name, shape, decay }) => ({ name, shape, decay })));
  return { spec: s, dense, linears, byName: new Map(linears.map((l) => [l.name, l])), maxFloats: Math.max(...linears.map((l) => l.rows * l.cols)) };
}

/** The quantized base's buffers (every linear's codes and scales: weights) and the dequantize / upload scratch. */
export function qloraBuffers(p: QloraPlan): BufferSpec[] {
  const out: BufferSpec[] = [];
  for (const l of p.linears) out.push({ key: l.codesKey, category: 'weights', bytes: l.words * 4 }, { key: l.scalesKey, category: 'weights', bytes: l.scales * 4 });
  out.push({ key: 'qlora.w', category: 'workspace', bytes: p.maxFloats * 4 });
  return out;
}
