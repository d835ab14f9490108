/**
 * Fused TACO compress / decompress kernels (shaders/taco.wgsl); spec in src/engine/quant/taco.ts.
 *   n = chunk elements, G = group size, NG = ceil(n/G).
 * Payload: ONE u32 buffer (or a 256-byte-aligned slice) of tacoPayloadBytes(n, G) bytes laid out
 * [NG·G FP8 codes, 4 per word][s: NG fp32][a: NG fp32] — the exact bytes of tacoPayload(), so it
 * goes over the wire as is. Workgroup = WG threads × 4 elements; strides below the subgroup size
 * use subgroupShuffleXor when the device has subgroups (identical results either way).
 */
import codecSrc from '../../../shaders/quant/codec.wgsl?raw';
import tacoSrc from '../../../shaders/taco.wgsl?raw';
import xchgSrc from '../../../shaders/taco_xchg.wgsl?raw';
import type { Binding, Dispatch, Runtime } from '../gpu/runtime';
import { Uniforms } from '../gpu/runtime';
import { rsqrtF32 } from '../quant/hadamard';
import { checkTacoGroup, tacoLayout } from '../quant/taco';

export const TACO_WG = 128;

/** Sections of a `//--- name` separated snippet file. */
export function wgslSection(src: string, name: string): string {
  const parts = src.split(/^\/\/--- (\w+)\s*$/m);
  for (let i = 1; i < parts.length; i += 2) if (parts[i] === name) return parts[i + 1];
  throw new Error(`WGSL section '${name}' not found`);
}

export function tacoShader(subgroups: boolean): string {
  const body = subgroups ? tacoSrc.replaceAll('/*SG*/', ', @builtin(subgroup_size) sg: u32') : tacoSrc;
  return [subgroups ? 'enable subgroups;' : '', codecSrc, wgslSection(xchgSrc, subgroups ? 'sg' : 'wg'), body].join('\n');
}

export interface TacoOptions {
  /** Force the workgroup-memory exchange even where subgroups exist (tests, A/B benches). */
  subgroups?: boolean;
  /** Cap on the grid's x extent (default: the device limit); tests use it to exercise the 2-D grid. */
  maxGridX?: number;
}

/** A 2-D grid of `tiles` workgroups (gridX wide) within maxComputeWorkgroupsPerDimension. */
export function grid2d(rt: Runtime, tiles: number, maxX?: number): { gridX: number; workgroups: [number, number] } {
  const max = Math.min(maxX ?? Infinity, rt.device.limits.maxComputeWorkgroupsPerDimension);
  const gridX = Math.max(1, Math.min(tiles, max));
  return { gridX, workgroups: [tiles === 0 ? 0 : gridX, Math.max(1, Math.ceil(tiles / gridX))] };
}

function build(rt: Runtime, label: string, entryPoint: 'compress' | 'decompress', payload: Binding, data: Binding,
  n: number, G: number, opts: TacoOptions): Dispatch {
  checkTacoGroup(G);
  if (G > 4 * TACO_WG) throw new Error(`TACO: G=${G} exceeds 4·WG=${4 * TACO_WG}`);
  const L = tacoLayout(n, G);
  const tiles = Math.ceil((L.groups * G) / (4 * TACO_WG));
  const { gridX, workgroups } = grid2d(rt, tiles, opts.maxGridX);
  const u = new Uniforms().u32(n).u32(L.groups).u32(L.sOff).u32(L.aOff).u32(tiles).u32(gridX)
    .f32(rsqrtF32(G)).f32(1 / G);
  const sg = (opts.subgroups ?? true) && rt.gpu.features.subgroups;
  return rt.kernel({
    label,
    code: tacoShader(sg),
    entryPoint,
    constants: { G, WG: TACO_WG },
    bindings: [payload, data, rt.uniform(label, u)],
    workgroups,
  });
}

/** x: n fp32 (storage) → payload (storage, ≥ tacoPayloadBytes(n, G) bytes). */
export function tacoCompress(rt: Runtime, a: { label: string; x: Binding; payload: Binding; n: number; G: number } & TacoOptions): Dispatch {
  return build(rt, a.label, 'compress', a.payload, a.x, a.n, a.G, a);
}

/** payload → y: n fp32. */
export function tacoDecompress(rt: Runtime, a: { label: string; payload: Binding; y: Binding; n: number; G: number } & TacoOptions): Dispatch {
  return build(rt, a.label, 'decompress', a.payload, a.y, a.n, a.G, a);
}
