/**
 * Fused cross-entropy forward + backward on the GPU (torch F.cross_entropy, mean reduction; maths
 * in crossentropy.ref.ts).
 *
 * Shapes: N rows (tokens), V vocab. logits, dlogits: [N, V]; targets: int32 [N] (any value outside
 * [0, V) = ignored row); losses: [N] per-row losses (0 for ignored rows); loss: [1] mean over the
 * counted rows (0 when none is counted; torch would give NaN). Workspace: crossEntropyWorkspaceBytes().
 * dlogits = (softmax − onehot) / count; it may be the logits binding itself (in place), which
 * saves the [N, V] gradient buffer. The rows may also run a chunk at a time (crossEntropyRows with
 * `chunk`, between one count and one mean), so that only one chunk's logits need exist (model/lm-head.ts).
 */
import src from './crossentropy.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { asSlice, grid2d, requireBytes, rowWorkgroupSize, sameBinding } from '../launch';

export interface CrossEntropyDims {
  N: number;
  V: number;
}

type Variant = 'separate' | 'inplace' | 'none';

const HEADERS: Record<Variant, string> = {
  separate: `@group(0) @binding(0) var<storage, read> logits: array<f32>;
@group(0) @binding(5) var<storage, read_write> dlogits: array<f32>;
fn store_grad(i: u32, g: f32) { dlogits[i] = g * grad_scale(); }
`,
  inplace: `@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
fn store_grad(i: u32, g: f32) { logits[i] = g * grad_scale(); }
`,
  none: `@group(0) @binding(0) var<storage, read> logits: array<f32>;
fn store_grad(i: u32, g: f32) {}
`,
};

/**
 * The gradient's factor: 1, or the loss scale (torch.amp's backward of scale·loss) read from the loss
 * scaler's state (word 3; optim/loss-scale-gpu.ts) at `binding`: the gradient rounded, then times the
 * scale, as a pass of its own over dlogits would (exact for a power-of-two scale).
 */
const scaleWgsl = (binding?: number) => (binding === undefined ? 'fn grad_scale() -> f32 { return 1.0; }\n'
  : `@group(0) @binding(${binding}) var<storage, read> ls_state: array<u32>;\nfn grad_scale() -> f32 { return bitcast<f32>(ls_state[3]); }\n`);

function code(v: Variant, scaleBinding?: number): string {
  return HEADERS[v] + scaleWgsl(scaleBinding) + src;
}

/** The u32 count of non-ignored rows (16 bytes: the minimum buffer size). */
export function crossEntropyWorkspaceBytes(_d?: CrossEntropyDims): number {
  return 16;
}

/** Rows [row0, row0 + rows) of the N: the chunk of logits one crossEntropyRows call sees. */
export interface CeChunk {
  row0: number;
  rows: number;
}

interface CeArgs {
  label: string;
  logits: Binding;
  targets: Binding;
  /** Per-row losses [N]. */
  losses: Binding;
  /** Mean loss [1]. */
  loss: Binding;
  workspace: Binding;
  dims: CrossEntropyDims;
}

function checkDims(label: string, { N, V }: CrossEntropyDims): void {
  if (!(Number.isInteger(N) && Number.isInteger(V) && N >= 1 && V >= 1)) throw new Error(`${label}: invalid cross-entropy dims N=${N} V=${V}`);
}

function params(rt: Runtime, label: string, rows: number, V: number, row0: number): GPUBuffer {
  return rt.uniform(`${label}.ce`, new Uniforms().u32(rows).u32(V).u32(row0));
}

/** Counts the rows whose target lies in [0, V) (the gradient's 1/count): once per loss, before any crossEntropyRows. */
export function crossEntropyCount(rt: Runtime, o: Pick<CeArgs, 'label' | 'targets' | 'workspace' | 'dims'>): Dispatch {
  const { N, V } = o.dims;
  checkDims(o.label, o.dims);
  requireBytes(o.label, 'targets', o.targets, N * 4);
  requireBytes(o.label, 'workspace', o.workspace, 4);
  const u = params(rt, o.label, N, V, 0);
  return rt.kernel({ label: `${o.label}.ceCount`, code: code('none'), entryPoint: 'ce_count', constants: { WG: 256 }, bindings: [o.targets, o.workspace, u], workgroups: [1] });
}

/**
 * Per-row losses of `chunk` (default: all N rows), whose logits [rows, V] are `logits`, and with
 * `dlogits` their gradient: `dlogits: logits` (the same binding) overwrites them in place; absent,
 * the logits are only read (evaluation). Reads the count crossEntropyCount wrote.
 */
export function crossEntropyRows(rt: Runtime, o: Omit<CeArgs, 'loss'> & { chunk?: CeChunk; dlogits?: Binding;
  /** dlogits times the loss scale in this loss scaler state (LOSS_SCALE_STATE_BYTES; word 3): needs dlogits. */
  lossScale?: Binding; }): Dispatch {
  const { N, V } = o.dims;
  checkDims(o.label, o.dims);
  const { row0, rows } = o.chunk ?? { row0: 0, rows: N };
  if (!(Number.isInteger(row0) && Number.isInteger(rows) && row0 >= 0 && rows >= 1 && row0 + rows <= N)) {
    throw new Error(`${o.label}: cross-entropy chunk rows ${row0}..${row0 + rows} lie outside the ${N} rows`);
  }
  requireBytes(o.label, 'logits', o.logits, rows * V * 4);
  requireBytes(o.label, 'targets', o.targets, N * 4);
  requireBytes(o.label, 'losses', o.losses, N * 4);
  requireBytes(o.label, 'workspace', o.workspace, 4);
  let variant: Variant = 'none';
  if (o.dlogits && sameBinding(o.dlogits, o.logits)) variant = 'inplace';
  else if (o.dlogits) {
    if (asSlice(o.dlogits).buffer === asSlice(o.logits).buffer) throw new Error(`${o.label}: dlogits overlaps logits' buffer without being the same binding`);
    requireBytes(o.label, 'dlogits', o.dlogits, rows * V * 4);
    variant = 'separate';
  }
  if (o.lossScale && variant === 'none') throw new Error(`${o.label}: a loss scale without dlogits`);
  if (o.lossScale) requireBytes(o.label, 'lossScale', o.lossScale, 16);
  const u = params(rt, o.label, rows, V, row0);
  const bindings: Binding[] = [o.logits, o.targets, u, o.workspace, o.losses];
  if (variant === 'separate') bindings.push(o.dlogits!);
  if (o.lossScale) bindings.push(o.lossScale);
  return rt.kernel({
    label: `${o.label}.${variant === 'none' ? 'ceFwd' : `ceFwdBwd${o.lossScale ? 'S' : ''}`}`, code: code(variant, o.lossScale ? bindings.length - 1 : undefined), entryPoint: 'ce_rows',
    constants: { WG: rowWorkgroupSize(V), WRITE_GRAD: variant === 'none' ? 0 : 1 },
    bindings, workgroups: grid2d(rt, rows),
  });
}

/** The mean of the N per-row losses over the counted rows (0 when none is counted): after every chunk's rows. */
export function crossEntropyMean(rt: Runtime, o: Pick<CeArgs, 'label' | 'losses' | 'loss' | 'workspace' | 'dims'>): Dispatch {
  const { N, V } = o.dims;
  checkDims(o.label, o.dims);
  requireBytes(o.label, 'losses', o.losses, N * 4);
  requireBytes(o.label, 'loss', o.loss, 4);
  requireBytes(o.label, 'workspace', o.workspace, 4);
  const u = params(rt, o.label, N, V, 0);
  return rt.kernel({ label: `${o.label}.ceMean`, code: code('none'), entryPoint: 'ce_mean', constants: { WG: 256 }, bindings: [o.losses, o.workspace, u, o.loss], workgroups: [1] });
}

/**
 * Losses, mean loss and dlogits in one pass over the logits (plus a read for the gradient).
 * Pass `dlogits: logits` (the same binding) to overwrite the logits with their gradient.
 */
export function crossEntropyForwardBackward(rt: Runtime, o: CeArgs & { dlogits: Binding }): Dispatch[] {
  return [crossEntropyCount(rt, o), crossEntropyRows(rt, o), crossEntropyMean(rt, o)];
}

/** Losses and mean loss only (evaluation): the logits are read once and left untouched. */
export function crossEntropyForward(rt: Runtime, o: CeArgs): Dispatch[] {
  return [crossEntropyCount(rt, o), crossEntropyRows(rt, { ...o, dlogits: undefined }), crossEntropyMean(rt, o)];
}
