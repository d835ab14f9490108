/**
 * Fused cross-entropy forward + backward on the GPU (torch F.cross_entropy, mean reduction; maths
 * in crossentropy.ref.ts).
 *
 * Shapes: N rows (tokens), V vocab. logits, dlogits: [N, V]; targets: int32 [N] (any value outside
 * [0, V) = ignored row); losses: [N] per-row losses (0 for ignored rows); loss: [1] mean over the
 * counted rows (0 when none is counted; torch would give NaN). Workspace: crossEntropyWorkspaceBytes().
 * dlogits = (softmax − onehot) / count; it may be the logits binding itself (in place), which
 * saves the [N, V] gradient buffer.
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
fn store_grad(i: u32, g: f32) { dlogits[i] = g; }
`,
  inplace: `@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
fn store_grad(i: u32, g: f32) { logits[i] = g; }
`,
  none: `@group(0) @binding(0) var<storage, read> logits: array<f32>;
fn store_grad(i: u32, g: f32) {}
`,
};

function code(v: Variant): string {
  return HEADERS[v] + src;
}

/** The u32 count of non-ignored rows (16 bytes: the minimum buffer size). */
export function crossEntropyWorkspaceBytes(_d?: CrossEntropyDims): number {
  return 16;
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

function build(rt: Runtime, o: CeArgs, variant: Variant, dlogits?: Binding): Dispatch[] {
  const { N, V } = o.dims;
  if (!(Number.isInteger(N) && Number.isInteger(V) && N >= 1 && V >= 1)) throw new Error(`${o.label}: invalid cross-entropy dims N=${N} V=${V}`);
  requireBytes(o.label, 'logits', o.logits, N * V * 4);
  requireBytes(o.label, 'targets', o.targets, N * 4);
  requireBytes(o.label, 'losses', o.losses, N * 4);
  requireBytes(o.label, 'loss', o.loss, 4);
  requireBytes(o.label, 'workspace', o.workspace, 4);
  const u = rt.uniform(`${o.label}.ce`, new Uniforms().u32(N).u32(V));
  const rows: Binding[] = [o.logits, o.targets, u, o.workspace, o.losses];
  if (variant === 'separate') rows.push(dlogits!);
  const tag = variant === 'none' ? 'ceFwd' : 'ceFwdBwd';
  return [
    rt.kernel({ label: `${o.label}.ceCount`, code: code('none'), entryPoint: 'ce_count', constants: { WG: 256 }, bindings: [o.targets, o.workspace, u], workgroups: [1] }),
    rt.kernel({
      label: `${o.label}.${tag}`, code: code(variant), entryPoint: 'ce_rows',
      constants: { WG: rowWorkgroupSize(V), WRITE_GRAD: variant === 'none' ? 0 : 1 },
      bindings: rows, workgroups: grid2d(rt, N),
    }),
    rt.kernel({ label: `${o.label}.ceMean`, code: code('none'), entryPoint: 'ce_mean', constants: { WG: 256 }, bindings: [o.losses, o.workspace, u, o.loss], workgroups: [1] }),
  ];
}

/**
 * Losses, mean loss and dlogits in one pass over the logits (plus a read for the gradient).
 * Pass `dlogits: logits` (the same binding) to overwrite the logits with their gradient.
 */
export function crossEntropyForwardBackward(rt: Runtime, o: CeArgs & { dlogits: Binding }): Dispatch[] {
  if (sameBinding(o.dlogits, o.logits)) return build(rt, o, 'inplace');
  if (asSlice(o.dlogits).buffer === asSlice(o.logits).buffer) {
    throw new Error(`${o.label}: dlogits overlaps logits' buffer without being the same binding`);
  }
  requireBytes(o.label, 'dlogits', o.dlogits, o.dims.N * o.dims.V * 4);
  return build(rt, o, 'separate', o.dlogits);
}

/** Losses and mean loss only (evaluation): the logits are read once and left untouched. */
export function crossEntropyForward(rt: Runtime, o: CeArgs): Dispatch[] {
  return build(rt, o, 'none');
}
