/**
 * RMSNorm forward/backward on the GPU (HF LlamaRMSNorm, fp32; the maths is in rmsnorm.ref.ts).
 *
 * Shapes: N rows (tokens), C channels. x, y, dy, dx: [N, C]; w, dw: [C]; rstd: [N] (saved by the
 * forward for the backward). The dw reduction needs a workspace of K·C floats
 * (rmsnormWorkspaceBytes), K = ceil(N / R) row chunks of R rows.
 */
import codecSrc from '../../../../shaders/quant/codec.wgsl?raw';
import body from './rmsnorm.wgsl?raw';
import wgSum from '../../../../shaders/wg-sum.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, requireBytes, rowWorkgroupSize, vec4Elementwise } from '../launch';
import { castF16Operand, F16_HALF_WGSL, type F16Out, f16OperandBytes, f16OutWgsl } from '../matmul-f16/cast';
import { buildQuantize } from '../quantize/quantize';
import { wgslIf, wgslPreamble, wgslSection } from '../wgsl';

const shared = `${wgSum}\n${wgslPreamble(body)}`;
/** The row kernels; `resid`: the forward also copies x into f_xc at @binding(resid) (the binding after its last). */
const rows = (h: boolean, y32 = true, resid?: number) =>
  `${wgslIf(wgslSection(body, 'rows'), { H: h, Y32: y32, RESID: resid !== undefined })}${resid === undefined ? '' : `\n@group(0) @binding(${resid}) var<storage, read_write> f_xc: array<V>;`}`;
const rowsCode = (elem: 'elem_f32' | 'elem_vec4', resid?: number) => `${shared}\n${wgslSection(body, elem)}\n${rows(false, true, resid)}`;
const rowsScalar = rowsCode('elem_f32');
const rowsVec4 = rowsCode('elem_vec4');
const dwSrc = `${shared}\n${wgslSection(body, 'dw')}`;
const rowsQuant = `${codecSrc}\n${shared}\n${wgslSection(body, 'elem_vec4')}\n${wgslSection(body, 'rows_q')}`;
/**
 * vec4 rows whose forward and backward dx also write their output's f16 copy (packed, or the twin's f32: elem);
 * `y32` false: the forward writes y's f16 copy only (binding 4 after rstd at 3).
 */
const rowsF16 = (elem: 'f16' | 'f32', y32 = true, resid = false) =>
  `${shared}\n${wgslSection(body, 'elem_vec4')}\n${rows(true, y32, resid ? (y32 ? 6 : 5) : undefined)}\n${F16_HALF_WGSL}\n${f16OutWgsl('h_y', y32 ? 5 : 4, 4, elem)}\n${f16OutWgsl('h_dx', 6, 4, elem)}`;

export type { F16Out } from '../matmul-f16/cast';

/**
 * The row kernels' shader and workgroup size: vec4 elements when C and every binding's offset allow
 * 16-byte access, ~4 of them per thread (base, C = 768: 64 threads of 3 vec4 instead of 256 of 3
 * floats); else scalars, one per thread up to 256. `vectorize: false` forces scalars (tests).
 */
function rowKernel(C: number, bindings: Binding[], vectorize = true, resid?: number): { code: string; WG: number } {
  const vec4 = vectorize && vec4Elementwise(C, bindings);
  const code = resid === undefined ? (vec4 ? rowsVec4 : rowsScalar) : rowsCode(vec4 ? 'elem_vec4' : 'elem_f32', resid);
  return { code, WG: vec4 ? rowWorkgroupSize(Math.ceil(C / 16)) : rowWorkgroupSize(C) };
}

export interface RmsNormDims {
  N: number;
  C: number;
  eps: number;
}

/**
 * Rows per dw chunk: at least 32 (amortises the partials round trip), and at most 256 chunks in
 * total so the second stage stays short and the workspace small (256·C floats).
 */
export function rmsnormChunking(N: number): { R: number; K: number } {
  const R = Math.max(32, Math.ceil(N / 256));
  return { R, K: Math.max(1, Math.ceil(N / R)) };
}

export function rmsnormWorkspaceBytes(d: { N: number; C: number }): number {
  return rmsnormChunking(d.N).K * d.C * 4;
}

function params(d: RmsNormDims, accumulate: boolean): Uniforms {
  const { R, K } = rmsnormChunking(d.N);
  return new Uniforms().u32(d.N).u32(d.C).f32(d.eps).u32(accumulate ? 1 : 0).u32(R).u32(K).u32(0).u32(0);
}

function check(label: string, d: RmsNormDims): void {
  if (!(d.N >= 1 && d.C >= 1 && Number.isInteger(d.N) && Number.isInteger(d.C))) {
    throw new Error(`${label}: invalid rmsnorm dims N=${d.N} C=${d.C}`);
  }
}

/**
 * y = w ⊙ (x · rstd); also writes rstd [N], and with `resid` x's copy there (the residual stream's
 * next buffer: the copy the layer would make next, from the loads the norm makes anyway).
 */
export function rmsnormForward(rt: Runtime, o: { label: string; x: Binding; w: Binding; y: Binding; rstd: Binding; dims: RmsNormDims; vectorize?: boolean; resid?: Binding }): Dispatch {
  const d = o.dims;
  check(o.label, d);
  requireBytes(o.label, 'x', o.x, d.N * d.C * 4);
  requireBytes(o.label, 'y', o.y, d.N * d.C * 4);
  requireBytes(o.label, 'w', o.w, d.C * 4);
  requireBytes(o.label, 'rstd', o.rstd, d.N * 4);
  if (o.resid) requireBytes(o.label, 'resid', o.resid, d.N * d.C * 4);
  const u = rt.uniform(`${o.label}.rmsnormFwd`, params(d, false));
  const { code, WG } = rowKernel(d.C, [o.x, o.w, o.y, ...(o.resid ? [o.resid] : [])], o.vectorize, o.resid ? 5 : undefined);
  return rt.kernel({
    label: `${o.label}.rmsnormFwd`, code, entryPoint: 'rmsnorm_fwd', constants: { WG },
    bindings: [o.x, o.w, u, o.y, o.rstd, ...(o.resid ? [o.resid] : [])], workgroups: grid2d(rt, d.N),
  });
}

/**
 * The forward, also writing y's INT8 codes per row (codes [N, C/4] u32, scales [N]: quantizeRef
 * 'row' semantics, the INT8 GEMMs' X operand) from the values it has in registers, so the GEMMs'
 * quantizer does not read y again. One dispatch where C and the bindings allow vec4 access; else the
 * plain forward and the shared quantizer.
 */
export function rmsnormForwardQuantized(rt: Runtime, o: {
  label: string; x: Binding; w: Binding; y: Binding; rstd: Binding; dims: RmsNormDims; codes: GPUBuffer; scales: GPUBuffer; fused?: boolean;
}): Dispatch[] {
  const d = o.dims;
  if ((o.fused ?? true) && vec4Elementwise(d.C, [o.x, o.w, o.y])) {
    check(o.label, d);
    requireBytes(o.label, 'x', o.x, d.N * d.C * 4);
    requireBytes(o.label, 'y', o.y, d.N * d.C * 4);
    requireBytes(o.label, 'w', o.w, d.C * 4);
    requireBytes(o.label, 'rstd', o.rstd, d.N * 4);
    requireBytes(o.label, 'codes', o.codes, d.N * d.C);
    requireBytes(o.label, 'scales', o.scales, d.N * 4);
    const u = rt.uniform(`${o.label}.rmsnormFwdQ`, params(d, false));
    return [rt.kernel({
      label: `${o.label}.rmsnormFwdQ`, code: rowsQuant, entryPoint: 'rmsnorm_fwd_q', constants: { WG: rowWorkgroupSize(Math.ceil(d.C / 16)) },
      bindings: [o.x, o.w, u, o.y, o.rstd, o.codes, o.scales], workgroups: grid2d(rt, d.N),
    })];
  }
  const q = buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: d.C }, n: d.N * d.C }, o.y, { words: o.codes, scales: o.scales });
  return [rmsnormForward(rt, o), ...q.dispatches];
}

/**
 * The forward, also writing y's f16 copy into `y16` (the X operand of f16 GEMMs; the cast's rounding,
 * matmul-f16/cast.ts) from the values it has in registers. One dispatch where C and the bindings
 * allow vec4 access; else the plain forward and the standalone cast.
 */
export function rmsnormForwardF16(rt: Runtime, o: { label: string; x: Binding; w: Binding; y: Binding; rstd: Binding; dims: RmsNormDims; y16: F16Out; fused?: boolean;
  /** Nothing reads y in fp32: the fused kernel writes y16 and rstd only (y is written where the fallback runs). */
  y16Only?: boolean;
  /** x's copy (rmsnormForward's resid). */
  resid?: Binding; }): Dispatch[] {
  const d = o.dims;
  const n = d.N * d.C;
  if (!((o.fused ?? true) && vec4Elementwise(d.C, [o.x, o.w, o.y, o.y16.out, ...(o.resid ? [o.resid] : [])]))) {
    return [rmsnormForward(rt, o), castF16Operand(rt, { label: o.label, x: o.y, out: o.y16.out, n, elem: o.y16.elem })];
  }
  check(o.label, d);
  requireBytes(o.label, 'x', o.x, n * 4);
  requireBytes(o.label, 'y', o.y, n * 4);
  requireBytes(o.label, 'w', o.w, d.C * 4);
  requireBytes(o.label, 'rstd', o.rstd, d.N * 4);
  requireBytes(o.label, 'y16', o.y16.out, f16OperandBytes(n, o.y16.elem === 'f32'));
  if (o.resid) requireBytes(o.label, 'resid', o.resid, n * 4);
  const only = !!o.y16Only;
  const label = `${o.label}.rmsnormFwdH${only ? '16' : ''}`;
  const u = rt.uniform(label, params(d, false));
  const bindings = only ? [o.x, o.w, u, o.rstd, o.y16.out] : [o.x, o.w, u, o.y, o.rstd, o.y16.out];
  return [rt.kernel({
    label, code: rowsF16(o.y16.elem, !only, !!o.resid), entryPoint: 'rmsnorm_fwd', constants: { WG: rowWorkgroupSize(Math.ceil(d.C / 16)) },
    bindings: o.resid ? [...bindings, o.resid] : bindings, workgroups: grid2d(rt, d.N),
  })];
}

/**
 * dx (= or += when `accumulate`, for the residual stream) and dw (= or += when `accumulateDw`, for
 * gradient accumulation across micro-batches). Three dispatches: dx rows, dw partials, dw final.
 */
export function rmsnormBackward(rt: Runtime, o: {
  label: string; x: Binding; w: Binding; rstd: Binding; dy: Binding; dx: Binding; dw: Binding; workspace: Binding;
  dims: RmsNormDims; accumulate?: boolean; accumulateDw?: boolean; vectorize?: boolean;
  /** Also write dx's INT8 codes per row (codes [N, C/4] u32, scales [N]; in the dx kernel where vec4 access applies). */
  dxCodes?: { codes: GPUBuffer; scales: GPUBuffer };
  /** Also write dx's f16 copy (the dY operand of f16 GEMMs; in the dx kernel where vec4 access applies, else a cast after it). */
  dx16?: F16Out;
}): Dispatch[] {
  const d = o.dims;
  check(o.label, d);
  if (o.dxCodes && o.dx16) throw new Error(`${o.label}: dx's INT8 codes and its f16 copy are for different GEMMs; ask for one`);
  if (o.dx16) requireBytes(o.label, 'dx16', o.dx16.out, f16OperandBytes(d.N * d.C, o.dx16.elem === 'f32'));
  for (const [k, b] of [['x', o.x], ['dy', o.dy], ['dx', o.dx]] as const) requireBytes(o.label, k, b, d.N * d.C * 4);
  requireBytes(o.label, 'w', o.w, d.C * 4);
  requireBytes(o.label, 'dw', o.dw, d.C * 4);
  requireBytes(o.label, 'rstd', o.rstd, d.N * 4);
  requireBytes(o.label, 'workspace', o.workspace, rmsnormWorkspaceBytes(d));
  const WG = rowWorkgroupSize(d.C);
  const rows = rowKernel(d.C, [o.x, o.w, o.dy, o.dx], o.vectorize);
  const { K } = rmsnormChunking(d.N);
  const colGroups = Math.ceil(d.C / WG);
  const uDx = rt.uniform(`${o.label}.rmsnormBwdDx`, params(d, !!o.accumulate));
  const uDw = rt.uniform(`${o.label}.rmsnormBwdDw`, params(d, !!o.accumulateDw));
  const q = o.dxCodes;
  if (q) {
    requireBytes(o.label, 'codes', q.codes, d.N * d.C);
    requireBytes(o.label, 'scales', q.scales, d.N * 4);
  }
  const fused = q && rows.code === rowsVec4;
  const h = o.dx16;
  const fusedH = h && rows.code === rowsVec4 && vec4Elementwise(d.C, [h.out]);
  const dx: Dispatch[] = fusedH
    ? [rt.kernel({
      label: `${o.label}.rmsnormBwdDxH`, code: rowsF16(h.elem), entryPoint: 'rmsnorm_bwd_dx', constants: { WG: rows.WG },
      bindings: [o.x, o.w, uDx, o.dy, o.rstd, o.dx, h.out], workgroups: grid2d(rt, d.N),
    })]
    : fused
    ? [rt.kernel({
      label: `${o.label}.rmsnormBwdDxQ`, code: rowsQuant, entryPoint: 'rmsnorm_bwd_dx_q', constants: { WG: rows.WG },
      bindings: [o.x, o.w, uDx, o.dy, o.rstd, o.dx, q.codes, q.scales], workgroups: grid2d(rt, d.N),
    })]
    : [rt.kernel({
      label: `${o.label}.rmsnormBwdDx`, code: rows.code, entryPoint: 'rmsnorm_bwd_dx', constants: { WG: rows.WG },
      bindings: [o.x, o.w, uDx, o.dy, o.rstd, o.dx], workgroups: grid2d(rt, d.N),
    })];
  if (q && !fused) {
    dx.push(...buildQuantize(rt, { format: 'int8', granularity: { kind: 'row', rowLength: d.C }, n: d.N * d.C }, o.dx, { words: q.codes, scales: q.scales }).dispatches);
  }
  if (h && !fusedH) dx.push(castF16Operand(rt, { label: o.label, x: o.dx, out: h.out, n: d.N * d.C, elem: h.elem }));
  return [
    ...dx,
    rt.kernel({
      label: `${o.label}.rmsnormBwdDwPartial`, code: dwSrc, entryPoint: 'rmsnorm_bwd_dw_partial', constants: { WG },
      bindings: [o.x, o.dy, uDw, o.rstd, o.workspace], workgroups: [colGroups, K],
    }),
    rt.kernel({
      label: `${o.label}.rmsnormBwdDwFinal`, code: dwSrc, entryPoint: 'rmsnorm_bwd_dw_final', constants: { WG },
      bindings: [o.workspace, o.dw, uDw], workgroups: [colGroups],
    }),
  ];
}
