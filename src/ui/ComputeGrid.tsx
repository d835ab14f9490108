/**
 * The scheme's compute grid, under the storage grid with the same rows: per layer, what its linear
 * layers' forward, dX and dW GEMMs compute in (dW's scale blocks, the rounding of the gradient
 * operands) and the GEMM path each would run on this device.
 */
import type { LayerPaths } from '../engine/model/int8-gemms';
import { COMPUTE_FORMATS, type ComputeScheme, layerScheme, type Scheme } from '../engine/scheme/scheme';
import { commonCompute, DW_BLOCKS, setCompute } from '../state/scheme-grid';

const ROUNDINGS = ['nearest', 'stochastic'] as const;

/** Each compute column: its field, header, tooltip and choices. */
const COLUMNS = [
  { field: 'forward', head: 'fwd', title: 'fwd: the forward GEMMs Y = X·Wᵀ (INT8: X per token, W per output channel)', choices: COMPUTE_FORMATS },
  { field: 'dx', head: 'dX', title: 'dX: the input-gradient GEMMs dX = dY·W (INT8: dY per token, W per input channel)', choices: COMPUTE_FORMATS },
  { field: 'dw', head: 'dW', title: 'dW: the weight-gradient GEMMs dW = dYᵀ·X, reduced over the tokens (fp32 keeps it as SwitchBack does)', choices: COMPUTE_FORMATS },
  { field: 'dw_block', head: 'dW block', title: 'dW block: tokens per scale block of an INT8 dW\'s operands (Jetfire-style), or one scale per channel over all tokens', choices: DW_BLOCKS },
  { field: 'grad_rounding', head: 'dY rounding', title: 'dY rounding: how the gradient operands of INT8 dX and dW GEMMs round (stochastic: unbiased)', choices: ROUNDINGS },
  { field: 'attention_qk', head: 'QKᵀ', title: 'QKᵀ: the attention scores (INT8: Q and K per token and head after RoPE, as SageAttention; softmax·V stays fp32)', choices: COMPUTE_FORMATS },
  { field: 'attention_dp', head: 'dOVᵀ', title: 'dOVᵀ: the attention backward\'s dP = dO·Vᵀ (INT8: dO and V per token and head; needs QKᵀ INT8; dV and dK keep fp32 dO)', choices: COMPUTE_FORMATS },
] as const satisfies readonly { field: keyof ComputeScheme; head: string; title: string; choices: readonly (string | number)[] }[];

const PATH_TITLE = 'GEMM path: the kernel each GEMM would run on this device (fp32, int8-dot4, int8-tensor-core), as forward / dX / dW when they differ, then the attention scores\' when not fp32';

function ComputeHeads() {
  return (
    <>
      {COLUMNS.map((c) => (
        <th key={c.field} className="compute-col" title={c.title} data-testid={`col-compute-${c.field}`}>
          <abbr title={c.title}>{c.head}</abbr>
        </th>
      ))}
      <th className="compute-col" title={PATH_TITLE} data-testid="col-gemm-path">
        <abbr title={PATH_TITLE}>GEMM path</abbr>
      </th>
    </>
  );
}

function pathText(p: LayerPaths): string {
  const gemms = p.forward === p.dx && p.dx === p.dw ? p.forward : `${p.forward} / ${p.dx} / ${p.dw}`;
  const qk = p.attention === 'fp32' ? '' : `, QKᵀ ${p.attention}`;
  const dp = p.attentionDp === 'fp32' || p.attentionDp === 'none' ? '' : `, dOVᵀ ${p.attentionDp}`;
  return `${gemms}${qk}${dp}`;
}

/**
 * One row's compute cells: layer `layer`, or every layer ('all', where a field the layers set
 * differently reads 'mixed'), and its GEMM paths (null: the plan refuses the scheme).
 */
function ComputeCells({ scheme, layers, layer, paths, onChange }: {
  scheme: Scheme; layers: number; layer: number | 'all'; paths: LayerPaths | 'mixed' | null; onChange(s: Scheme): void;
}) {
  const own = layer === 'all' ? null : layerScheme(scheme, layer).compute;
  const where = layer === 'all' ? 'every layer' : `layer ${layer}`;
  return (
    <>
      {COLUMNS.map((c) => {
        const value = own ? own[c.field] : commonCompute(scheme, layers, c.field);
        const label = `${c.title.split(':')[0]} compute, ${where}`;
        // dW's block size matters only for an INT8 dW; the engine ignores it otherwise.
        const moot = c.field === 'dw_block' && (own ? own.dw === 'fp32' : commonCompute(scheme, layers, 'dw') === 'fp32');
        return (
          <td key={c.field}>
            <select
              className={`cell cell-${value ?? 'mixed'}`}
              data-testid={`compute-${layer}-${c.field}`}
              title={label}
              aria-label={label}
              disabled={moot}
              value={value === null ? '' : String(value)}
              onChange={(e) => {
                const v = e.target.value;
                onChange(setCompute(scheme, layer, { [c.field]: c.field === 'dw_block' && v !== 'all' ? Number(v) : v }));
              }}
            >
              {value === null && <option value="">mixed</option>}
              {c.choices.map((f) => (
                <option key={f} value={String(f)}>{f}</option>
              ))}
            </select>
          </td>
        );
      })}
      <td className="gemm-path" data-testid={`gemm-path-${layer}`}>
        {paths === 'mixed' ? 'mixed' : paths ? pathText(paths) : '—'}
      </td>
    </>
  );
}

/** The 'all' row's paths: the layers' common ones, 'mixed' when they differ. */
function commonPaths(paths: LayerPaths[] | null): LayerPaths | 'mixed' | null {
  if (!paths?.length) return null;
  const [first] = paths;
  return paths.every((p) => pathText(p) === pathText(first)) ? first : 'mixed';
}

/** Layer × compute field, and each layer's GEMM path (`paths` null: the plan refuses the scheme). */
export function ComputeGrid({ scheme, layers, paths, onChange }: { scheme: Scheme; layers: number; paths: LayerPaths[] | null; onChange(s: Scheme): void }) {
  return (
    <div className="grid-wrap">
      <table className="scheme-grid" data-testid="compute-grid">
        <caption>Compute of the linear layers&apos; GEMMs (q/k/v/o, gate/up/down)</caption>
        <thead>
          <tr>
            <th>layer</th>
            <ComputeHeads />
          </tr>
        </thead>
        <tbody>
          <tr className="all-row">
            <th>all</th>
            <ComputeCells scheme={scheme} layers={layers} layer="all" paths={commonPaths(paths)} onChange={onChange} />
          </tr>
          {Array.from({ length: layers }, (_, l) => (
            <tr key={l}>
              <th>{l}</th>
              <ComputeCells scheme={scheme} layers={layers} layer={l} paths={paths?.[l] ?? null} onChange={onChange} />
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

/** What decides the GEMM paths on this device, under the grid. */
export function GemmDeviceNote({ tensorCores, known, refused }: { tensorCores: boolean; known: boolean; refused: boolean }) {
  return (
    <p className="muted small" data-testid="gemm-device" data-tensor-cores={tensorCores ? 'true' : 'false'}>
      Compute: fp32, or INT8 codes multiplied exactly in integers and dequantized in the GEMM&apos;s epilogue (set the layer&apos;s weight
      and GEMM-operand cells to fp32: the INT8 GEMMs quantize their operands themselves).{' '}
      {!known
        ? 'GEMM paths: the WebGPU adapter is not known yet.'
        : tensorCores
          ? 'GEMM paths: this adapter offers INT8 subgroup matrices, so INT8 GEMMs use tensor cores where K is a multiple of 16, if the exactness check at the run\'s start passes (else int8-dot4, the same numbers).'
          : 'GEMM paths: this adapter has no INT8 subgroup matrices (tensor cores), so INT8 GEMMs run dot4I8Packed (int8-dot4).'}
      {refused && ' The scheme\'s compute formats cannot run on this model (below): no paths.'}
    </p>
  );
}
