/**
 * Tensor parallelism over a peer group: the engine's TpTrainer (src/parallel/tp/trainer.ts) with
 * the group as its collective, and the transport bytes of a step.
 */
import type { Runtime } from '../../engine/gpu/runtime';
import type { ModelDims } from '../../engine/model/plan';
import type { TpCollective } from './collective';
import type { TpConfig } from '../../engine/model/tp/tp';
import { tpPeerSizes } from '../../engine/model/tp/peer';
import { TpTrainer } from './trainer';
import type { TrainOptions } from '../../engine/train/options';
import type { TrainerInit } from '../../engine/train/trainer';
import { messageWireBytes } from '../../peers/collectives/allreduce';
import { DEFAULT_CHUNK_PAYLOAD } from '../../peers/collectives/framing';
import { CollectiveError, type PeerGroup } from '../../peers/collectives/group';

/** A peer group as a tensor-parallel rank's collective; a bad payload fails it as CollectiveError('invalid-payload'). */
export function tpCollective(group: PeerGroup): TpCollective {
  return {
    rank: group.rank,
    size: group.size,
    members: group.members,
    get stats() {
      return group.transport.stats;
    },
    setStep: (step) => group.setStep(step),
    allToAll: (parts) => group.allToAll(parts),
    allGather: (part) => group.allGather(part),
    invalidPayload: (message, peer) => new CollectiveError('invalid-payload', message, peer),
  };
}

/** This member's rank of a tensor-parallel run over `group` (every member calls it alike: TpTrainer.create). */
export function createTpTrainer(rt: Runtime, group: PeerGroup, opts: TrainOptions, text: string, init: TrainerInit = {}): Promise<TpTrainer> {
  return TpTrainer.create(rt, tpCollective(group), opts, text, init);
}

/**
 * Transport bytes one rank sends per training step: 4 all-reduces per layer, each (t−1) chunks out
 * in the all-to-all and (t−1) copies of its reduced chunk in the all-gather, plus the all-gather of
 * its 4-byte shard gradient norm. (What it receives is the same.)
 */
export function tpStepWireBytes(d: ModelDims, tp: TpConfig, chunkPayload = DEFAULT_CHUNK_PAYLOAD): number {
  const t = tp.degree;
  const perAllReduce = 2 * (t - 1) * messageWireBytes(tpPeerSizes(d, tp).wire, chunkPayload);
  return 4 * d.L * perAllReduce + (t - 1) * messageWireBytes(4, chunkPayload);
}
