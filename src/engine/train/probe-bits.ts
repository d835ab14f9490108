/**
 * Bits per element and bytes on the wire of a training run, from its scheme and model dimensions.
 * These are exact byte counts of the storage layouts (plan.ts: packed codes + fp32 scales) and of
 * the transfer protocols (scheme/wire.ts, tp/tp.ts), read off the run's resolved plan (engine/plan), not measurements:
 *  - saved activations: bits per element per layer and per kind, as stored for backward;
 *  - gradient storage: bits per element of the gradients kept between backward and the optimizer;
 *  - data parallel: bytes one peer sends per step for the gradient all-reduce, fp32 against AGoQ's
 *    INT8 verifiable all-reduce (frame headers included), in a group of `dpPeers`;
 *  - tensor parallel: bytes one rank sends per training step for the four all-reduces of every
 *    layer under the scheme's TP codec, and what fp32 all-reduces would send.
 */
import { FINAL_SAVED, LAYER_SAVED, layerSizes, SAVED_KIND_OF, savedKey } from '../model/plan';
import type { RunPlan } from '../plan/run-plan';
import { tpWireBytes } from '../model/tp/tp';
import { SAVED_KINDS, type SavedKind } from '../scheme/scheme';
import { allReduceWireBytes } from '../scheme/wire';

/** The data-parallel group the wire figures assume: the smallest one, two peers. */
export const DP_REFERENCE_PEERS = 2;
/** All-reduces per layer and training step under tensor parallelism: O-proj and down-proj forward, QKV and gate/up input gradients backward. */
export const TP_ALLREDUCES_PER_LAYER = 4;

export interface LayerBits {
  layer: number;
  /** Bits per element of the layer's saved activations (scales included; the final norm's tensors count in the last layer). */
  bits: number;
  bytes: number;
  elements: number;
}

export interface BitsAndWire {
  saved: {
    /** Element-weighted bits per element over all saved activations (fp32 = 32). */
    overall: number;
    perLayer: LayerBits[];
    /** Per saved kind; null for a kind with no tensors of its own (oproj_input shares attn_out's). */
    perKind: Record<SavedKind, number | null>;
  };
  grads: { bits: number; bytes: number; elements: number };
  dp: { peers: number; fp32Bytes: number; int8Bytes: number };
  tp: { degree: number; codec: string; perAllReduceBytes: number; stepBytes: number; fp32StepBytes: number } | null;
}

/** The figures of a resolved plan (a TrainingPlan's `model`); the data-parallel ones for a group of `dpPeers`. */
export function bitsAndWire(plan: RunPlan, dpPeers = DP_REFERENCE_PEERS): BitsAndWire {
  const d = plan.dims;
  const sizes = layerSizes(d);
  const perLayer: LayerBits[] = Array.from({ length: d.L }, (_, layer) => ({ layer, bits: 0, bytes: 0, elements: 0 }));
  const kinds = new Map<SavedKind, [bytes: number, elements: number]>(SAVED_KINDS.map((k) => [k, [0, 0]]));
  for (let l = 0; l <= d.L; l++) {
    const st = plan.saved[l];
    const row = perLayer[Math.min(l, d.L - 1)];
    for (const key of l < d.L ? LAYER_SAVED : FINAL_SAVED) {
      const kind = SAVED_KIND_OF[key];
      if (!kind) continue; // rstd, lse: per-row statistics, not activations
      // Checkpointing keeps one shared set of a layer's recomputed tensors: counted once, with layer 0 (as the plan allocates it).
      if (l > 0 && savedKey(l, key, d.L, plan.checkpoint).startsWith('ckpt.')) continue;
      const q = st[key];
      const n = sizes[key][0];
      const bytes = q ? (q.words + q.scales) * 4 : n * 4;
      row.bytes += bytes;
      row.elements += n;
      const k = kinds.get(kind)!;
      k[0] += bytes;
      k[1] += n;
    }
  }
  for (const r of perLayer) r.bits = r.elements > 0 ? (8 * r.bytes) / r.elements : 32;
  const perKind = {} as Record<SavedKind, number | null>;
  for (const [k, [bytes, n]] of kinds) perKind[k] = n > 0 ? (8 * bytes) / n : null;
  const savedBytes = perLayer.reduce((s, r) => s + r.bytes, 0);
  const savedElements = perLayer.reduce((s, r) => s + r.elements, 0);

  const params = plan.layout.views.reduce((s, v) => s + v.size, 0);
  const gs = plan.grads;
  const gradBytes = gs ? [...gs.values()].reduce((s, q) => s + (q.words + q.scales) * 4, 0) : params * 4;

  let tp: BitsAndWire['tp'] = null;
  const tpw = plan.wire.tp;
  if (tpw) {
    const perAllReduce = tpWireBytes(d, tpw);
    const per = TP_ALLREDUCES_PER_LAYER * d.L;
    tp = {
      degree: tpw.degree,
      codec: tpw.codec,
      perAllReduceBytes: perAllReduce,
      stepBytes: per * perAllReduce,
      fp32StepBytes: per * tpWireBytes(d, { ...tpw, codec: 'fp32' }),
    };
  }
  return {
    saved: { overall: savedElements > 0 ? (8 * savedBytes) / savedElements : 32, perLayer, perKind },
    grads: { bits: (8 * gradBytes) / params, bytes: gradBytes, elements: params },
    dp: { peers: dpPeers, fp32Bytes: allReduceWireBytes(params, dpPeers, 0, 'fp32'), int8Bytes: allReduceWireBytes(params, dpPeers, 0, 'int8') },
    tp,
  };
}
