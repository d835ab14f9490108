/**
 * Token embedding forward/backward on the GPU (maths in embedding.ref.ts).
 *
 * Shapes: N tokens, V vocab rows, C channels. ids: int32 [N]; W, dW: [V, C]; out, dout: [N, C].
 * Ids outside [0, V) give a zero output row and contribute no gradient (never clamped).
 * The backward is deterministic (a stable sort of token indices by id, then ordered sums); it needs
 * embeddingWorkspaceBytes({N, V}) of u32 workspace. Its sort runs in ONE workgroup (about
 * N + V/256 + 256 serial steps per lane): a fraction of a millisecond for N = 64K on a big GPU, but
 * the step to parallelise if it ever shows up in a profile.
 */
import src from './embedding.wgsl?raw';
import { Uniforms, type Binding, type Dispatch, type Runtime } from '../../gpu/runtime';
import { grid2d, nextPow2, requireBytes } from '../launch';

export interface EmbeddingDims {
  N: number;
  V: number;
  C: number;
}

const WG = 256;

/** Column tile of the gather: up to 64 columns (256 B per token row read), the rest token lanes. */
function columnTile(C: number): number {
  return Math.min(64, nextPow2(C));
}

/** u32 workspace of the backward: offsets [V+1], cursors [V], token order [N]. */
export function embeddingWorkspaceBytes(d: { N: number; V: number }): number {
  return (2 * d.V + 1 + d.N) * 4;
}

function check(label: string, d: EmbeddingDims): void {
  const ok = [d.N, d.V, d.C].every((k) => Number.isInteger(k)) && d.N >= 0 && d.V >= 1 && d.C >= 1;
  if (!ok) throw new Error(`${label}: invalid embedding dims N=${d.N} V=${d.V} C=${d.C}`);
}

function params(d: EmbeddingDims, accumulate: boolean): Uniforms {
  const colTiles = Math.ceil(d.C / columnTile(d.C));
  return new Uniforms().u32(d.N).u32(d.V).u32(d.C).u32(accumulate ? 1 : 0).u32(colTiles).u32(0).u32(0).u32(0);
}

/** out[n, :] = W[ids[n], :]. */
export function embeddingForward(rt: Runtime, o: { label: string; ids: Binding; W: Binding; out: Binding; dims: EmbeddingDims }): Dispatch {
  const d = o.dims;
  check(o.label, d);
  requireBytes(o.label, 'ids', o.ids, d.N * 4);
  requireBytes(o.label, 'W', o.W, d.V * d.C * 4);
  requireBytes(o.label, 'out', o.out, d.N * d.C * 4);
  const u = rt.uniform(`${o.label}.embedFwd`, params(d, false));
  return rt.kernel({
    label: `${o.label}.embedFwd`, code: src, entryPoint: 'embed_fwd',
    bindings: [o.ids, o.W, u, o.out], workgroups: grid2d(rt, Math.ceil((d.N * d.C) / 256)),
  });
}

/**
 * dW[v, :] = Σ_{n: ids[n] = v} dout[n, :], summed in token order; rows with no token become 0, or
 * are left as they were with `accumulate` (tied embeddings: lm_head's gradient is already in dW).
 */
export function embeddingBackward(rt: Runtime, o: {
  label: string; ids: Binding; dout: Binding; dW: Binding; workspace: Binding; dims: EmbeddingDims; accumulate?: boolean;
}): Dispatch[] {
  const d = o.dims;
  check(o.label, d);
  requireBytes(o.label, 'ids', o.ids, d.N * 4);
  requireBytes(o.label, 'dout', o.dout, d.N * d.C * 4);
  requireBytes(o.label, 'dW', o.dW, d.V * d.C * 4);
  requireBytes(o.label, 'workspace', o.workspace, embeddingWorkspaceBytes(d));
  const u = rt.uniform(`${o.label}.embedBwd`, params(d, !!o.accumulate));
  const TC = columnTile(d.C);
  return [
    rt.kernel({ label: `${o.label}.embedSort`, code: src, entryPoint: 'embed_sort', constants: { WG }, bindings: [o.ids, o.workspace, u], workgroups: [1] }),
    rt.kernel({
      label: `${o.label}.embedBwd`, code: src, entryPoint: 'embed_bwd', constants: { WG, TC },
      bindings: [o.workspace, o.dout, u, o.dW], workgroups: grid2d(rt, d.V * Math.ceil(d.C / TC)),
    }),
  ];
}
