/**
 * SwiGLU activation of the LLaMA MLP on the GPU: h = silu(gate) ⊙ up (maths in swiglu.ref.ts).
 *
 * Shapes: N rows (tokens), F intermediate size; gate, up, h, dh, dgate, dup: [N, F] fp32.
 * The forward may run in place (h is up) and the backward too (dgate is gate and dup is up), saving
 * [N, F] buffers.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import src from './swiglu.wgsl?raw';
import wgSum from '../../../../shaders/wg-sum.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, requireBytes, rowWorkgroupSize, sameBinding, vec4Elementwise } from '../launch';
import { castF16Operand, F16_HALF_WGSL, f16OperandBytes, f16OutWgsl } from '../matmul-f16/cast';
import { buildQuantize } from '../quantize/quantize';
import type { F16Out } from '../matmul-f16/cast';
import { wgslIf } from '../wgsl';

const srcScalar = wgslIf(src, { VEC4: false, QUANT: false, HALF: false, STORED: false });
/** The same shader on vec4 elements: 16-byte loads and stores, fewer memory instructions per element. */
const srcVec4 = wgslIf(src, { VEC4: true, QUANT: false, HALF: false, STORED: false });
/** vec4, with the row kernel that also writes h's INT8 codes. */
const srcQuant = `${codecSrc}\n${wgSum}\n${wgslIf(src, { VEC4: true, QUANT: true, HALF: false, STORED: false })}`;
/** vec4, with the kernels that also write their outputs' f16 copies (packed, or the twin's f32: elem). */
const srcHalf = (elem: 'f16' | 'f32') => [
  F16_HALF_WGSL, f16OutWgsl('h_h', 4, 4, elem), f16OutWgsl('h_dg', 4, 4, elem), f16OutWgsl('h_du', 5, 4, elem),
  wgslIf(src, { VEC4: true, QUANT: false, HALF: true, STORED: false }),
].join('\n');
/** vec4, with the kernels over gate's and up's f16 storage (always packed: f16Words) and f16 operand outputs (elem). */
const srcStored = (elem: 'f16' | 'f32') => [
  F16_HALF_WGSL, f16OutWgsl('s_gw', 3, 4, 'f16'), f16OutWgsl('s_uw', 4, 4, 'f16'), f16OutWgsl('s_h', 5, 4, elem),
  f16OutWgsl('s_dg', 4, 4, elem), f16OutWgsl('s_du', 5, 4, elem),
  wgslIf(src, { VEC4: true, QUANT: false, HALF: false, STORED: true }),
].join('\n');

/**
 * vec4 elements when the count and every binding's offset allow 16-byte access (always in the
 * model: F is a multiple of 4 and buffers are 256-aligned), else scalars; `vectorize: false` forces
 * scalars (tests compare the two).
 */
function access(n: number, bindings: Binding[], vectorize = true): { code: string; count: number } {
  const ok = vectorize && vec4Elementwise(n, bindings);
  return ok ? { code: srcVec4, count: n / 4 } : { code: srcScalar, count: n };
}

export interface SwigluDims {
  N: number;
  F: number;
}

function count(label: string, d: SwigluDims): number {
  if (!(Number.isInteger(d.N) && Number.isInteger(d.F) && d.N >= 0 && d.F >= 0)) {
    throw new Error(`${label}: invalid swiglu dims N=${d.N} F=${d.F}`);
  }
  return d.N * d.F;
}

export function swigluForward(rt: Runtime, o: { label: string; gate: Binding; up: Binding; h: Binding; dims: SwigluDims; vectorize?: boolean }): Dispatch {
  const n = count(o.label, o.dims);
  for (const [k, b] of [['gate', o.gate], ['up', o.up], ['h', o.h]] as const) requireBytes(o.label, k, b, n * 4);
  const { code, count: m } = access(n, [o.gate, o.up, o.h], o.vectorize);
  const u = rt.uniform(`${o.label}.swigluFwd`, new Uniforms().u32(m));
  const inPlace = sameBinding(o.up, o.h);
  return rt.kernel({
    label: `${o.label}.swigluFwd`, code, entryPoint: inPlace ? 'swiglu_fwd_inplace' : 'swiglu_fwd',
    bindings: inPlace ? [o.gate, o.up, u] : [o.gate, o.up, u, o.h], workgroups: grid2d(rt, Math.ceil(m / 256)),
  });
}

/**
 * The forward, also writing h's INT8 codes per row (codes [N, F/4] u32, scales [N]: quantizeRef 'row'
 * semantics, down_proj's X operand for an INT8 forward) so its quantizer does not read h again. One
 * dispatch where vec4 access applies and h is not up; else the plain forward and the shared quantizer.
 */
export function swigluForwardQuantized(rt: Runtime, o: {
  label: string; gate: Binding; up: Binding; h: Binding; dims: SwigluDims; codes: GPUBuffer; scales: GPUBuffer; fused?: boolean;
}): Dispatch[] {
  const { N, F } = o.dims;
  const n = count(o.label, o.dims);
  if ((o.fused ?? true) && F % 4 === 0 && vec4Elementwise(n, [o.gate, o.up, o.h]) && !sameBinding(o.up, o.h)) {
    for (const [k, b] of [['gate', o.gate], ['up', o.up], ['h', o.h]] as const) requireBytes(o.label, k, b, n * 4);
    requireBytes(o.label, 'codes', o.codes, n);
    requireBytes(o.label, 'scales', o.scales, N * 4);
    const u = rt.uniform(`${o.label}.swigluFwdQ`, new Uniforms().u32(N).u32(F / 4).u32(0).u32(0));
    return [rt.kernel({
      label: `${o.label}.swigluFwdQ`, code: srcQuant, entryPoint: 'swiglu_fwd_q', constants: { WG: rowWorkgroupSize(Math.ceil(F / 16)) },
      bindings: [o.gate, o.up, u, o.h, o.codes, o.scales], workgroups: grid2d(rt, N),
    })];
  }
  const q = buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: F }, n }, o.h, { words: o.codes, scales: o.scales });
  return [swigluForward(rt, o), ...q.dispatches];
}

/**
 * The forward, also writing h's f16 copy into `h16` (down_proj's X for an f16 forward; the cast's
 * rounding, matmul-f16/cast.ts). One dispatch where vec4 access applies and h is not up; else the
 * plain forward and the standalone cast.
 */
export function swigluForwardF16(rt: Runtime, o: { label: string; gate: Binding; up: Binding; h: Binding; dims: SwigluDims; h16: F16Out; fused?: boolean }): Dispatch[] {
  const n = count(o.label, o.dims);
  requireBytes(o.label, 'h16', o.h16.out, f16OperandBytes(n, o.h16.elem === 'f32'));
  if (!((o.fused ?? true) && vec4Elementwise(n, [o.gate, o.up, o.h, o.h16.out]) && !sameBinding(o.up, o.h))) {
    return [swigluForward(rt, o), castF16Operand(rt, { label: o.label, x: o.h, out: o.h16.out, n, elem: o.h16.elem })];
  }
  for (const [k, b] of [['gate', o.gate], ['up', o.up], ['h', o.h]] as const) requireBytes(o.label, k, b, n * 4);
  const u = rt.uniform(`${o.label}.swigluFwdH`, new Uniforms().u32(n / 4).u32(0).u32(0).u32(0));
  return [rt.kernel({
    label: `${o.label}.swigluFwdH`, code: srcHalf(o.h16.elem), entryPoint: 'swiglu_fwd',
    bindings: [o.gate, o.up, u, o.h, o.h16.out], workgroups: grid2d(rt, Math.ceil(n / 4 / 256)),
  })];
}

/**
 * The backward in place (dgate over gate; dup over up, or over dh), also writing the f16 copies of
 * dgate and dup (gate_proj's and up_proj's dY for f16 GEMMs; the cast's rounding). `row0`: these N
 * rows are rows row0.. of the copies (one block of the blocked backward). One dispatch where vec4
 * access applies; else the plain backward and two standalone casts (whole copies only: row0 0).
 */
export function swigluBackwardF16(rt: Runtime, o: {
  label: string; gate: Binding; up: Binding; dh: Binding; dgate: Binding; dup: Binding; dims: SwigluDims;
  dgate16: F16Out; dup16: F16Out; row0?: number; fused?: boolean;
}): Dispatch[] {
  const { N, F } = o.dims;
  const n = count(o.label, o.dims);
  const row0 = o.row0 ?? 0;
  if (!Number.isInteger(row0) || row0 < 0) throw new Error(`${o.label}: row0=${row0} must be a non-negative integer`);
  if (o.dgate16.elem !== o.dup16.elem) throw new Error(`${o.label}: dgate16 and dup16 must have one element type`);
  for (const [k, b] of [['dgate16', o.dgate16], ['dup16', o.dup16]] as const) requireBytes(o.label, k, b.out, f16OperandBytes((row0 + N) * F, b.elem === 'f32'));
  const overDh = sameBinding(o.dh, o.dup);
  if (!sameBinding(o.gate, o.dgate) || !(overDh || sameBinding(o.up, o.dup))) {
    throw new Error(`${o.label}: the swiglu backward with f16 copies runs in place (dgate = gate, and dup = up or dup = dh)`);
  }
  if (!((o.fused ?? true) && F % 4 === 0 && vec4Elementwise(n, [o.gate, o.up, o.dh, o.dgate16.out, o.dup16.out]))) {
    if (row0) throw new Error(`${o.label}: a block of rows (row0 ${row0}) needs the fused kernel: F % 4 == 0 and 16-byte aligned bindings`);
    const cast = (x: Binding, h: F16Out, which: string) => castF16Operand(rt, { label: `${o.label}.${which}`, x, out: h.out, n, elem: h.elem });
    return [swigluBackward(rt, o), cast(o.dgate, o.dgate16, 'dgate'), cast(o.dup, o.dup16, 'dup')];
  }
  for (const [k, b] of [['gate', o.gate], ['up', o.up], ['dh', o.dh]] as const) requireBytes(o.label, k, b, n * 4);
  const u = rt.uniform(`${o.label}.swigluBwdH`, new Uniforms().u32(n / 4).u32(0).u32(row0 * F / 4).u32(0));
  return [rt.kernel({
    label: `${o.label}.swigluBwdH`, code: srcHalf(o.dgate16.elem), entryPoint: overDh ? 'swiglu_bwd_over_dh' : 'swiglu_bwd_inplace',
    bindings: [o.gate, o.up, u, o.dh, o.dgate16.out, o.dup16.out], workgroups: grid2d(rt, Math.ceil(n / 4 / 256)),
  })];
}

/** dgate, dup from dh. In place when dgate is gate and dup is up (both, or neither). */
export function swigluBackward(rt: Runtime, o: {
  label: string; gate: Binding; up: Binding; dh: Binding; dgate: Binding; dup: Binding; dims: SwigluDims; vectorize?: boolean;
}): Dispatch {
  const n = count(o.label, o.dims);
  for (const [k, b] of [['gate', o.gate], ['up', o.up], ['dh', o.dh], ['dgate', o.dgate], ['dup', o.dup]] as const) requireBytes(o.label, k, b, n * 4);
  // In place: dgate over gate, and dup over up or over dh.
  const inPlace = sameBinding(o.gate, o.dgate);
  const overUp = sameBinding(o.up, o.dup);
  const overDh = sameBinding(o.dh, o.dup);
  if (inPlace !== (overUp || overDh)) {
    throw new Error(`${o.label}: swiglu backward in place needs dgate = gate together with dup = up or dup = dh`);
  }
  const { code, count: m } = access(n, [o.gate, o.up, o.dh, o.dgate, o.dup], o.vectorize);
  const u = rt.uniform(`${o.label}.swigluBwd`, new Uniforms().u32(m));
  const [entryPoint, bindings] = !inPlace ? ['swiglu_bwd', [o.gate, o.up, u, o.dh, o.dgate, o.dup]]
    : overUp ? ['swiglu_bwd_inplace', [o.gate, o.up, u, o.dh]] : ['swiglu_bwd_over_dh', [o.gate, o.up, u, o.dh]];
  return rt.kernel({
    label: `${o.label}.swigluBwd`, code, entryPoint, bindings,
    workgroups: grid2d(rt, Math.ceil(m / 256)),
  });
}

/**
 * The backward in place (dgate over gate; dup over up, or over dh), also writing the INT8 codes of
 * [dgate | dup] per row (codes [N, 2F/4] u32, scales [N]; swigluBackwardCodesRef): the dY operand of
 * gate_proj's and up_proj's dX as one GEMM over K = 2F. `row0`: these N rows are rows row0.. of
 * codes and scales (one block of the blocked backward). One dispatch; needs vec4 access (F % 4 == 0,
 * 16-byte aligned bindings), which the model's INT8 layers always have.
 */
export function swigluBackwardQuantized(rt: Runtime, o: {
  label: string; gate: Binding; up: Binding; dh: Binding; dgate: Binding; dup: Binding; dims: SwigluDims;
  codes: GPUBuffer; scales: GPUBuffer; row0?: number;
}): Dispatch {
  const { N, F } = o.dims;
  const n = count(o.label, o.dims);
  const row0 = o.row0 ?? 0;
  for (const [k, b] of [['gate', o.gate], ['up', o.up], ['dh', o.dh], ['dgate', o.dgate], ['dup', o.dup]] as const) requireBytes(o.label, k, b, n * 4);
  const overDh = sameBinding(o.dh, o.dup);
  if (!sameBinding(o.gate, o.dgate) || !(overDh || sameBinding(o.up, o.dup))) {
    throw new Error(`${o.label}: the quantizing swiglu backward runs in place (dgate = gate, and dup = up or dup = dh)`);
  }
  if (F % 4 || !vec4Elementwise(n, [o.gate, o.up, o.dh])) {
    throw new Error(`${o.label}: the quantizing swiglu backward needs F % 4 == 0 and 16-byte aligned bindings (F=${F})`);
  }
  if (!Number.isInteger(row0) || row0 < 0) throw new Error(`${o.label}: row0=${row0} must be a non-negative integer`);
  requireBytes(o.label, 'codes', o.codes, (row0 + N) * 2 * F);
  requireBytes(o.label, 'scales', o.scales, (row0 + N) * 4);
  const u = rt.uniform(`${o.label}.swigluBwdQ`, new Uniforms().u32(N).u32(F / 4).u32(row0).u32(0));
  return rt.kernel({
    label: `${o.label}.swigluBwdQ`, code: srcQuant, entryPoint: 'swiglu_bwd_q',
    constants: { WG: rowWorkgroupSize(Math.ceil(F / 16)), OVER_DH: overDh ? 1 : 0 },
    bindings: [o.gate, o.up, u, o.dh, o.codes, o.scales], workgroups: grid2d(rt, N),
  });
}

/**
 * The forward where gate and up are stored f16 and nothing reads h in fp32 (an f16 layer whose h is
 * its f16 cell: RunPlan.swigluHalf): reads gate and up (fp32), writes their f16 storage (`gateWords`,
 * `upWords`: packF16's words, bit for bit) and h's f16 copy only. One pass in place of the two packs
 * and the forward's fp32 h. Needs vec4 access (n % 4 == 0, 16-byte aligned bindings).
 */
export function swigluForwardStored(rt: Runtime, o: { label: string; gate: Binding; up: Binding; gateWords: Binding; upWords: Binding; dims: SwigluDims; h16: F16Out }): Dispatch {
  const n = count(o.label, o.dims);
  storedAccess(o.label, n, [o.gate, o.up, o.gateWords, o.upWords, o.h16.out]);
  for (const [k, b] of [['gate', o.gate], ['up', o.up]] as const) requireBytes(o.label, k, b, n * 4);
  for (const [k, b] of [['gateWords', o.gateWords], ['upWords', o.upWords]] as const) requireBytes(o.label, k, b, f16OperandBytes(n, false));
  requireBytes(o.label, 'h16', o.h16.out, f16OperandBytes(n, o.h16.elem === 'f32'));
  const u = rt.uniform(`${o.label}.swigluFwdS`, new Uniforms().u32(n / 4).u32(0).u32(0).u32(0));
  return rt.kernel({
    label: `${o.label}.swigluFwdS`, code: srcStored(o.h16.elem), entryPoint: 'swiglu_fwd_stored',
    bindings: [o.gate, o.up, u, o.gateWords, o.upWords, o.h16.out], workgroups: grid2d(rt, Math.ceil(n / 4 / 256)),
  });
}

/**
 * The backward from gate's and up's f16 storage (`gateWords`, `upWords`) and dh (fp32), writing only
 * the f16 copies of dgate and dup (the f16 GEMMs' dY; RunPlan.swigluHalf: nothing reads them in fp32).
 * One pass over the whole tensor in place of gate's unpack and, per block of rows, up's unpack and
 * swigluBackwardF16; the same bits (f16 → f32 is exact, the arithmetic is swiglu_bwd_over_dh's).
 */
export function swigluBackwardStored(rt: Runtime, o: { label: string; gateWords: Binding; upWords: Binding; dh: Binding; dims: SwigluDims; dgate16: F16Out; dup16: F16Out;
  /** Also dgate into this and dup over dh, in fp32, where something reads them (RunPlan.swigluBwdHalf). */
  dgate?: Binding; }): Dispatch {
  const n = count(o.label, o.dims);
  if (o.dgate16.elem !== o.dup16.elem) throw new Error(`${o.label}: dgate16 and dup16 must have one element type`);
  storedAccess(o.label, n, [o.gateWords, o.upWords, o.dh, o.dgate16.out, o.dup16.out, ...(o.dgate ? [o.dgate] : [])]);
  requireBytes(o.label, 'dh', o.dh, n * 4);
  if (o.dgate) requireBytes(o.label, 'dgate', o.dgate, n * 4);
  for (const [k, b] of [['gateWords', o.gateWords], ['upWords', o.upWords]] as const) requireBytes(o.label, k, b, f16OperandBytes(n, false));
  for (const [k, b] of [['dgate16', o.dgate16], ['dup16', o.dup16]] as const) requireBytes(o.label, k, b.out, f16OperandBytes(n, b.elem === 'f32'));
  const label = `${o.label}.swigluBwdS${o.dgate ? 'F' : ''}`;
  const u = rt.uniform(label, new Uniforms().u32(n / 4).u32(0).u32(0).u32(0));
  const bindings = [o.gateWords, o.upWords, u, o.dh, o.dgate16.out, o.dup16.out];
  return rt.kernel({
    label, code: srcStored(o.dgate16.elem), entryPoint: o.dgate ? 'swiglu_bwd_stored_f32' : 'swiglu_bwd_stored',
    bindings: o.dgate ? [...bindings, o.dgate] : bindings, workgroups: grid2d(rt, Math.ceil(n / 4 / 256)),
  });
}

/** The stored kernels' vec4 access: n % 4 == 0 and every binding 16-byte aligned (always so in the model: F % 4 == 0, 256-byte offsets). */
function storedAccess(label: string, n: number, bindings: Binding[]): void {
  if (!vec4Elementwise(n, bindings)) throw new Error(`${label}: the SwiGLU over f16 storage needs n % 4 == 0 and 16-byte aligned bindings (n=${n})`);
}
