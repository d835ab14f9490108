/**
 * DiLoCo's held-out check of the pseudo-gradients (issue 38, as Gauntlet does): after the verified
 * exchange and its statistical screen, every member evaluates, on one held-out batch that all
 * members draw alike (the validation split's rows of a step derived from the outer step: a function
 * of the run's data seed and the outer step, never a training batch), the loss of θ_global and of
 * θ_global − Δ_r for each kept candidate r alone (a full forward each: the outer step comes once per
 * H inner steps, so N forwards cost about N / 3H of an outer round; the first-order proxy g·Δ would
 * be exact only for small Δ and is blind to curvature). A candidate whose application raises the
 * held-out loss by more than `maxRise` × the loss before is left out of the mean and its sender
 * accused in the step's report, where only a strict majority of the others, `strikes` outer steps
 * in a row, removes it (member-group.ts's Accusations): one member's word removes nobody.
 *
 * Every member evaluates the same θ_global (its hash is in every report), the same bytes of every
 * candidate and the same batch with the same kernels, so members on one kind of device decide alike
 * and their means stay bit-identical. Members on different devices could round a candidate at the
 * bound differently; the weights-hash check then stops the minority (docs/peer-groups.md).
 */
import type { Exclusion } from '../../peers/collectives/screen';
import type { PeerId } from '../../peers/transport/transport';
import type { Dispatch, Runtime } from '../../engine/gpu/runtime';
import { Uniforms } from '../../engine/gpu/runtime';
import { grid2d } from '../../engine/kernels/launch';
import type { Trainer } from '../../engine/train/trainer';
import { DEFAULT_HELD_OUT_BATCHES, heldOutBatches, heldOutBatchStep, heldOutLoss, MAX_HELD_OUT_BATCHES } from '../held-out';

/**
 * Largest relative rise of the held-out loss a candidate may cause. bench/diloco-heldout-calibration.ts
 * (micro, H = 2, 4 held-out batches, all honest): 2 members, 200 evaluations, at most +1.96 %; 3 members,
 * 180, one at +4.65 %: 1 of 380 above this bound (an exclusion and one accusation; removal needs three
 * in a row). −1 × the last honest mean rose +0.3–0.5 % at the median (within honest noise: not
 * decidable here), −4 × it above 3 % in 32 of 60; ×−1000 and huge scales by orders of magnitude.
 */
export const DEFAULT_MAX_RISE = 0.03;

export interface HeldOutFigures {
  /** Loss of θ_global on the held-out batch. */
  before: number;
  /** Per candidate rank evaluated: the loss with its pseudo-gradient applied alone. */
  after: Map<number, number>;
}

/**
 * The candidates a held-out evaluation keeps (ascending) and those it leaves out, with why; a rise
 * above `maxRise` × |before| (or a non-finite loss) is left out. Pure: the same figures give the
 * same verdict on every member.
 */
export function judgeHeldOut(members: readonly PeerId[], cand: number[], f: HeldOutFigures, maxRise: number): { kept: number[]; excluded: Exclusion[] } {
  const bound = f.before + maxRise * Math.abs(f.before);
  const excluded: Exclusion[] = [];
  const kept = cand.filter((r) => {
    const a = f.after.get(r);
    if (a === undefined) return true;
    if (Number.isFinite(a) && a <= bound) return true;
    excluded.push({
      peer: members[r], rank: r, fault: false, strike: false,
      why: `held-out loss ${a.toPrecision(5)} with its pseudo-gradient alone, above ${bound.toPrecision(5)} (θ_global's ${f.before.toPrecision(5)} + ${(100 * maxRise).toFixed(1)} %)`,
    });
    return false;
  });
  return { kept, excluded };
}

const CANDIDATE_WGSL = /* wgsl */ `
struct P { n: u32, off: u32, _p0: u32, _p1: u32 }
@group(0) @binding(0) var<uniform> p: P;
@group(0) @binding(1) var<storage, read_write> w: array<f32>;
@group(0) @binding(2) var<storage, read_write> glob: array<f32>;
@group(0) @binding(3) var<storage, read_write> d: array<f32>;
@compute @workgroup_size(256)
fn candidate(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = gid.x + gid.y * nwg.x * 256u;
  if (i >= p.n) { return; }
  w[p.off + i] = glob[p.off + i] - d[i];
}`;

/**
 * The GPU side: the model's weights set to θ_global (all fragments: every member holds the same),
 * then fragment f's range to θ_global − Δ_r per candidate, one forward each on the held-out batch;
 * the member's own weights are copied aside first and put back after.
 */
export class HeldOutEvaluator {
  private saved: GPUBuffer | null = null;
  private losses: GPUBuffer | null = null;
  private readonly kernels = new Map<string, { u: GPUBuffer; k: Dispatch }>();

  constructor(
    private readonly trainer: Trainer,
    private readonly global: GPUBuffer,
    private readonly d: GPUBuffer,
  ) {}

  private get rt(): Runtime {
    return this.trainer.model.rt;
  }

  /** Mean loss of the model as it stands over the held-out batches (of outer step t: its step seed). */
  private forwardLoss(batches: Int32Array[], outerStep: number): Promise<number> {
    const out = this.losses ??= this.rt.createBuffer('workspace', 'diloco.heldout.losses', 4 * MAX_HELD_OUT_BATCHES);
    return heldOutLoss(this.trainer, batches, heldOutBatchStep(outerStep), out);
  }

  /** Losses of θ_global and of θ_global − Δ_r (fragment [off, off + n)) for each candidate given. */
  async evaluate(outerStep: number, frag: { off: number; n: number }, candidates: Map<number, Float32Array>, batches = DEFAULT_HELD_OUT_BATCHES): Promise<HeldOutFigures> {
    const { trainer, rt } = this;
    const { model } = trainer;
    await trainer.settle();
    const w = model.b('weights');
    const bytes = model.layout.totalFloats * 4;
    this.saved ??= rt.createBuffer('workspace', 'diloco.heldout.saved', bytes);
    const copy = (from: GPUBuffer, to: GPUBuffer) => rt.run([], (enc) => enc.copyBufferToBuffer(from, 0, to, 0, bytes));
    const held = heldOutBatches(trainer, outerStep, batches); // checks the count before the weights move
    copy(w, this.saved);
    copy(this.global, w);
    const key = `${frag.off}:${frag.n}`;
    if (!this.kernels.has(key)) {
      const u = rt.uniform('diloco.heldout', new Uniforms().u32(frag.n).u32(frag.off));
      this.kernels.set(key, { u, k: rt.kernel({ label: 'diloco.heldout.candidate', code: CANDIDATE_WGSL, entryPoint: 'candidate', bindings: [u, w, this.global, this.d], workgroups: grid2d(rt, Math.ceil(frag.n / 256)) }) });
    }
    const { k } = this.kernels.get(key)!;
    try {
      const before = await this.forwardLoss(held, outerStep);
      const after = new Map<number, number>();
      for (const [r, delta] of candidates) {
        rt.write(this.d, delta);
        rt.run([k]);
        after.set(r, await this.forwardLoss(held, outerStep));
      }
      return { before, after };
    } finally {
      copy(this.saved, w);
    }
  }

  destroy(): void {
    if (this.saved) this.rt.mem.free(this.saved);
    if (this.losses) this.rt.mem.free(this.losses);
    this.losses = null;
    for (const { u } of this.kernels.values()) this.rt.mem.free(u);
    this.kernels.clear();
    this.saved = null;
  }
}
