/**
 * Tensor-parallel training over a group of t ranks (a TpCollective: src/parallel/tp/group.ts makes one of a
 * peer group): each member holds one Megatron shard of the model (tp-shard.ts: 1/t of the heads
 * and MLP units; embeddings, norms and lm_head replicated) and computes only its share; the four
 * all-reduces of every layer cross the group, compressed by TACO or as fp32 (the scheme's
 * tp.codec), in TpSim's two shots (tp-peer.ts), so a run over t peers reproduces the
 * single-device simulation of TP degree t.
 *
 * A step: the model's forward and backward lists run segment by segment; after each segment that
 * ends at a communication point, the rank reads back its outgoing chunks → all-to-all → uploads
 * what it received, reduces its own chunk on the GPU and reads it back → all-gather → uploads all
 * reduced chunks, which the next segment decodes. Then the global gradient norm: every rank
 * contributes the norm of its shards (one all-gather of a scalar), the replicated tensors' norm is
 * the same everywhere, so every rank computes the same clipping norm; AdamW then updates locally.
 *
 * Every rank feeds the same batch (all hold the same activations), so all members call trainStep /
 * evaluate / the gathers the same number of times in the same order. Anything received is checked
 * before use (size, finite values, codec range); a bad chunk or a failed collective rejects the
 * step before the optimizer runs, so weights and optimizer state stay those of the last step.
 */
import type { MemReport } from '../../engine/gpu/memory';
import type { Runtime } from '../../engine/gpu/runtime';
import type { CheckpointFiles } from '../../engine/io/checkpoint';
import { paramSpecs } from '../../engine/model/config';
import { LlamaGpu } from '../../engine/model/llama';
import { flatten, initParams, paramLayout, unflatten } from '../../engine/model/params';
import { resolveTrainingPlan } from '../../engine/plan/train-plan';
import { TextDataset } from '../../engine/train/data/data';
import type { TrainOptions } from '../../engine/train/options';
import type { RunTrainer } from '../../engine/train/run-trainer';
import { CharTokenizer, type Tokenizer } from '../../engine/train/tokenizer/tokenizer';
import { optionsForTokenizer, runCheckpoint, stepMetrics, type StepMetrics, type TrainerInit, writeAdamwStep } from '../../engine/train/trainer';
import { crc32, crc32Update } from '../../engine/util/crc32';
import type { TpCollective } from './collective';
import { rankBatch } from '../rank';
import { TpPeer, tpPeerProblem, type TpSegment } from '../../engine/model/tp/peer';
import { shardKind, shardParams, unshardTensor } from '../../engine/model/tp/shard';

/** Communication of one step (or evaluation) of one rank. */
export interface TpCommStats {
  /** All-reduces of activations / their gradients (4 per layer in a training step, 2 in a forward). */
  allReduces: number;
  /** Transport bytes (frames, headers included) this rank sent and received. */
  bytesSent: number;
  bytesReceived: number;
  /** Seconds spent awaiting collectives (the network and the slowest peer) … */
  commSeconds: number;
  /** … and the rest: GPU segments, readbacks, uploads and checks. */
  computeSeconds: number;
}

export interface TpStepMetrics extends StepMetrics {
  comm: TpCommStats;
}

/** Measures one step's communication: wall time inside collectives and the group's byte counters. */
class CommMeter {
  allReduces = 0;
  private commMs = 0;
  private readonly t0 = performance.now();
  private readonly sent0: number;
  private readonly recv0: number;

  constructor(private readonly group: TpCollective) {
    this.sent0 = group.stats.bytesSent;
    this.recv0 = group.stats.bytesReceived;
  }

  async comm<T>(p: Promise<T>): Promise<T> {
    const t = performance.now();
    try {
      return await p;
    } finally {
      this.commMs += performance.now() - t;
    }
  }

  finish(): TpCommStats {
    const total = (performance.now() - this.t0) / 1000;
    const commSeconds = this.commMs / 1000;
    return {
      allReduces: this.allReduces,
      bytesSent: this.group.stats.bytesSent - this.sent0,
      bytesReceived: this.group.stats.bytesReceived - this.recv0,
      commSeconds,
      computeSeconds: Math.max(0, total - commSeconds),
    };
  }
}

const f32Bytes = (x: Float32Array) => new Uint8Array(x.buffer, x.byteOffset, x.byteLength);

/** Decodes `n` fp32 values a peer sent; throws the group's invalid-payload error on a wrong size or a non-finite value. */
function decodeFinite(group: TpCollective, bytes: Uint8Array, n: number, what: string): Float32Array {
  if (bytes.length !== 4 * n) throw group.invalidPayload(`${what}: ${bytes.length} B, expected ${4 * n}`);
  const out = new Float32Array(bytes.slice().buffer);
  for (let i = 0; i < n; i++) if (!Number.isFinite(out[i])) throw group.invalidPayload(`${what}: non-finite value at ${i}`);
  return out;
}

/** The members whose u32 differs from this rank's (one all-gather). */
async function membersDiffering(group: TpCollective, value: number): Promise<string[]> {
  const all = await group.allGather(new Uint8Array(Uint32Array.of(value).buffer));
  return all.flatMap((b, r) => (b.length === 4 && new Uint32Array(b.slice().buffer)[0] === value ? [] : [group.members[r]]));
}

/** One rank's own part of a run: its shards (full names, shard shapes) and the step, saved without the others. */
export interface TpShardState {
  rank: number;
  degree: number;
  step: number;
  weights: Map<string, Float32Array>;
  m: Map<string, Float32Array>;
  v: Map<string, Float32Array>;
}

/** What every rank must agree on before training together: options, tokenizer and data. */
export function tpRunFingerprint(opts: TrainOptions, tokenizer: Tokenizer, text: string): number {
  const enc = new TextEncoder();
  return crc32Update(crc32(enc.encode(JSON.stringify({ opts, tokenizer: tokenizer.toJSON() }))), enc.encode(text));
}

let nextTpTrainerId = 0;

export class TpTrainer implements RunTrainer<TpStepMetrics> {
  /** Owner tag of this rank's allocations in the device's memory ledger. */
  readonly id: string;
  private stepCount = 0;
  private readonly startTime = performance.now();
  private readonly trainSegments: TpSegment[];
  private readonly forwardSegments: TpSegment[];

  private constructor(
    readonly rt: Runtime,
    readonly group: TpCollective,
    /** The full model's options (opts.model is the full config; model.cfg is this rank's shard). */
    readonly opts: TrainOptions,
    readonly model: LlamaGpu,
    readonly tp: TpPeer,
    readonly data: TextDataset,
    readonly tokenizer: Tokenizer,
    owner: string,
  ) {
    this.id = owner;
    this.trainSegments = tp.segments([...model.forward, ...model.backward]);
    this.forwardSegments = tp.segments(model.lossForward);
  }

  /**
   * Every member of `group` calls this with the same options and text; rank = group.rank, degree =
   * group.size = opts.scheme.tp.degree. Starts from exactly the full model's initialisation (or
   * init.params / init.optimizer, full tensors), of which this rank keeps its shard.
   */
  static async create(rt: Runtime, group: TpCollective, rawOpts: TrainOptions, text: string, init: TrainerInit = {}): Promise<TpTrainer> {
    const tokenizer = init.tokenizer ?? CharTokenizer.fromText(text);
    const opts = optionsForTokenizer(rawOpts, tokenizer);
    const t = group.size;
    // This rank's shard resolved once (engine/plan); the checks and the model read the plan.
    const plan = resolveTrainingPlan(opts, { tpShard: { rank: group.rank, degree: t } });
    const tp = plan.wire.tp;
    if (!tp || tp.degree !== t) {
      throw new Error(`tensor parallelism over ${t} peers needs a scheme with tp.degree ${t} (got ${tp?.degree ?? 1})`);
    }
    if (plan.model.grads) throw new Error('tensor parallelism across peers keeps fp32 gradients (scheme grads.storage must be fp32)');
    const cfg = plan.model.cfg;
    const problem = tpPeerProblem(plan.model.dims, tp, group.rank);
    if (problem) throw new Error(problem);
    const differ = await membersDiffering(group, tpRunFingerprint(opts, tokenizer, text));
    if (differ.length) throw new Error(`tensor parallelism: peers ${differ.join(', ')} have other options, tokenizer or data than ${group.members[group.rank]}`);

    // Shards first, so bad init tensors fail before anything is allocated.
    const layout = paramLayout(cfg);
    const shard = (full: Map<string, Float32Array>) => flatten(shardParams(full, opts.model, group.rank, t), layout);
    const fullLayout = paramLayout(opts.model);
    const weights = shard(init.params ?? unflatten(initParams(opts.model, fullLayout, opts.seed), fullLayout));
    const resume = init.optimizer ? { m: shard(init.optimizer.m), v: shard(init.optimizer.v), step: init.optimizer.step } : null;
    const owner = `tp${nextTpTrainerId++}.rank${group.rank}`;
    const model = await rt.checked('building the tensor-parallel shard', () =>
      rt.mem.withOwner(owner, () => new LlamaGpu(rt, plan.model)));
    if (!(model.tp instanceof TpPeer)) throw new Error('a TP rank model must hold a TpPeer');
    model.uploadParams(weights);
    const trainer = new TpTrainer(rt, group, opts, model, model.tp, new TextDataset(text, tokenizer, opts.seed), tokenizer, owner);
    if (resume) {
      rt.write(model.b('adam.m'), resume.m);
      rt.write(model.b('adam.v'), resume.v);
      trainer.stepCount = resume.step;
    }
    await rt.sync();
    return trainer;
  }

  get stepIndex(): number {
    return this.stepCount;
  }

  /** The batch [B, T+1] of `step`: every rank feeds the same rows, data-parallel rank 0 of 1 (rank.ts). */
  batchAt(step: number): Int32Array {
    return rankBatch(this.data, this.opts, step, { rank: 0, world: 1 });
  }

  /** Runs segments, all-reducing after each one that ends at a communication point. */
  private async runSegments(segments: TpSegment[], meter: CommMeter): Promise<void> {
    const { rt, tp, group } = this;
    for (const seg of segments) {
      if (!seg.allReduce) {
        rt.run(seg.dispatches);
        continue;
      }
      meter.allReduces++;
      const outgoing = await tp.runToPoint(seg.dispatches);
      const received = await meter.comm(group.allToAll(outgoing));
      this.checkChunks(seg.allReduce, received);
      const reduced = await tp.reduce(received);
      const gathered = await meter.comm(group.allGather(reduced));
      this.checkChunks(seg.allReduce, gathered);
      tp.loadGathered(gathered);
    }
  }

  private checkChunks(point: string, chunks: Uint8Array[]): void {
    chunks.forEach((c, r) => {
      if (r === this.group.rank) return;
      const why = this.tp.chunkProblem(c);
      if (why) throw this.group.invalidPayload(`${point}: chunk from ${this.group.members[r]}: ${why}`, this.group.members[r]);
    });
  }

  /**
   * The global gradient norm: √(replicated² + Σ_r shard_r²), summed in rank order from the
   * gathered fp32 shard norms, so every rank gets the same value. Returns it with the step's loss.
   */
  private async globalGradNorm(meter: CommMeter): Promise<{ gradNorm: number; loss: number }> {
    const { sharded, replicated, loss } = await this.tp.gradNormsAndLoss();
    const gathered = await meter.comm(this.group.allGather(f32Bytes(Float32Array.of(sharded))));
    let total = replicated * replicated;
    gathered.forEach((b, r) => {
      const v = decodeFinite(this.group, b, 1, `gradient norm from ${this.group.members[r]}`)[0];
      if (v < 0) throw this.group.invalidPayload(`negative gradient norm from ${this.group.members[r]}`, this.group.members[r]);
      total += v * v;
    });
    return { gradNorm: Math.fround(Math.sqrt(total)), loss };
  }

  async trainStep(): Promise<TpStepMetrics> {
    const { rt, model, opts, group, tp } = this;
    const t0 = performance.now();
    const step = this.stepCount;
    group.setStep(step);
    const meter = new CommMeter(group);
    model.setBatch(this.batchAt(step));
    model.setStepSeed(step);
    const lr = writeAdamwStep(rt, model, step, opts.optimizer);
    await this.runSegments(this.trainSegments, meter);
    const { gradNorm, loss } = await this.globalGradNorm(meter);
    tp.setGradNorm(gradNorm);
    rt.run(model.optimizerUpdate);
    this.stepCount++;
    await rt.sync();
    return { ...stepMetrics(opts, { step, loss, lr, gradNorm, t0, startTime: this.startTime, mem: this.memory() }), comm: meter.finish() };
  }

  /** RunTrainer's step: a rank's step waits on the group's collectives, so nothing is submitted ahead. */
  step(): Promise<TpStepMetrics> {
    return this.trainStep();
  }

  /** Nothing is ever in flight between steps. */
  async settle(): Promise<null> {
    return null;
  }

  /** Mean validation loss (a collective: every rank calls it). */
  async evaluate(): Promise<number> {
    return (await this.evaluateWithComm()).loss;
  }

  /** Mean validation loss over opts.evalBatches fixed batches, with its communication (a collective). */
  async evaluateWithComm(): Promise<{ loss: number; comm: TpCommStats }> {
    const meter = new CommMeter(this.group);
    let sum = 0;
    const batches = this.data.valBatches(this.opts.evalBatches, this.opts.batch, this.opts.seq);
    for (const b of batches) {
      this.model.setBatch(b);
      await this.runSegments(this.forwardSegments, meter);
      sum += await this.tp.loss();
    }
    return { loss: sum / batches.length, comm: meter.finish() };
  }

  /** Full tensors from every rank's shards of the flat buffer `key` (a collective). */
  private async gather(key: 'weights' | 'grads' | 'adam.m' | 'adam.v'): Promise<Map<string, Float32Array>> {
    const { group } = this;
    const local = unflatten(await this.model.readFlat(key), this.model.layout);
    const out = new Map<string, Float32Array>();
    for (const s of paramSpecs(this.opts.model)) {
      const mine = local.get(s.name)!;
      const kind = shardKind(s.name);
      if (kind === 'replicated') {
        out.set(s.name, mine);
        continue;
      }
      const parts = await group.allGather(f32Bytes(mine));
      out.set(s.name, unshardTensor(parts.map((p, r) => (r === group.rank ? mine : decodeFinite(group, p, mine.length, `${s.name} from ${group.members[r]}`))), s.shape, kind));
    }
    return out;
  }

  /** The full model's parameters (a collective). */
  gatherParameters(): Promise<Map<string, Float32Array>> {
    return this.gather('weights');
  }

  /** The full model's gradients of the last step (a collective). */
  gatherGradients(): Promise<Map<string, Float32Array>> {
    return this.gather('grads');
  }

  /** A full checkpoint, the same files a single-device Trainer writes (a collective). */
  async checkpoint(): Promise<CheckpointFiles> {
    const params = await this.gather('weights');
    const m = await this.gather('adam.m');
    const v = await this.gather('adam.v');
    return runCheckpoint(this.opts, this.tokenizer, this.stepCount, { params, m, v });
  }

  /**
   * Checks that every rank holds bit-identical replicated tensors (a collective: one all-gather of
   * a CRC); throws naming the ranks that differ from this one.
   */
  async checkReplicas(): Promise<void> {
    const w = unflatten(await this.model.readFlat('weights'), this.model.layout);
    let crc = 0;
    for (const [name, v] of w) if (shardKind(name) === 'replicated') crc = crc32Update(crc, f32Bytes(v));
    const differ = await membersDiffering(this.group, crc);
    if (differ.length) throw new Error(`replicated weights of ${differ.join(', ')} differ from ${this.group.members[this.group.rank]}'s at step ${this.stepCount}`);
  }

  /** This rank's shards of weights and Adam moments (not a collective: what a rank saves when the group has failed). */
  async shardState(): Promise<TpShardState> {
    const { model } = this;
    const [w, m, v] = await Promise.all([model.readFlat('weights'), model.readFlat('adam.m'), model.readFlat('adam.v')]);
    return {
      rank: this.group.rank, degree: this.group.size, step: this.stepCount,
      weights: unflatten(w, model.layout), m: unflatten(m, model.layout), v: unflatten(v, model.layout),
    };
  }

  /** This rank's allocated bytes per category (the ledger). */
  memory(): MemReport {
    return this.rt.mem.report(this.id);
  }

  destroy(): void {
    this.model.destroy();
  }
}
