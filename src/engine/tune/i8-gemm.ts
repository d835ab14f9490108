/**
 * INT8 tensor-core GEMM jobs of the tuner (issue 36: the INT8 layouts among the choices tuned on the
 * user's GPU). Per INT8 GEMM shape the step runs with qgemmI8: the block layouts of I8_TC_LAYOUTS with
 * this device's i8 → i32 subgroup-matrix configurations within its limits, unsplit and (where the step
 * lends the GEMM a workspace and a split would fill the GPU better) split over K, the one the GEMM runs
 * now first. Each is checked bit for bit on the device against the exact reference (checkI8Tc, its split
 * too where it splits) before it is timed on the job's shape. Picks are kernels/qgemm/tc.ts i8TcPick
 * names; a GEMM takes the first tuned pick verified on its runtime (i8TcChoiceFor). A device without
 * INT8 subgroup matrices (SwiftShader, browsers without the unsafe flag) has no candidates: each job
 * says it is skipped and why.
 */
import type { Runtime } from '../gpu/runtime';
import { qgemmI8Steps } from '../kernels/qgemm/qgemm';
import { chooseI8SplitK, i8SplitKMax } from '../kernels/qgemm/splitk';
import {
  checkI8Tc, enableI8TensorCores, i8Configs, i8TcChoiceFor, i8TcPick, i8TcPickParse, i8TcShapeOk, i8TcSpecError, i8TcSpecOfPick, i8TcSplitShape,
  i8TensorCoreSpec, type I8TcSpec,
} from '../kernels/qgemm/tc';
import { I8_TC_LAYOUTS } from '../kernels/qgemm/tc-tables';
import { subgroupSize } from '../kernels/qgemm/sgmat';
import { Rng } from '../util/rng';
import { builtInForms, type Candidate, type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import { callForms, type I8GemmJob } from './jobs';

/** Most layouts timed per shape unless the options say (each is compiled and checked first). */
const DEFAULT_MAX = 24;

/** GEMMs per timed pass: a pass of ~0.1 ms at INT8 tensor-core speed (up to 20 of a small GEMM). */
const i8Inner = ({ M, N, K }: I8GemmJob['shape']) => Math.min(20, Math.max(1, Math.round(3e10 / (M * N * K))));

/** The spelling (syntax, 8-bit units, subgroup size) every candidate takes: the enabled spec's, or a stand-in before the probe. */
function spellingOf(rt: Runtime): Pick<I8TcSpec, 'syntax' | 'unitDiv' | 'sgSize'> {
  return i8TensorCoreSpec(rt) ?? { syntax: 'template', unitDiv: 1, sgSize: subgroupSize(rt) };
}

/**
 * The picks worth timing on an INT8 job (i8TcPick names), or none with the reason. Order: what the
 * GEMM runs now, then each configuration's layouts (largest tile first) unsplit, and split where the
 * job has a workspace and the split would cut K at all.
 */
export function i8GemmCandidates(rt: Runtime, job: I8GemmJob, max = DEFAULT_MAX): { candidates: string[]; rejected: { candidate: string; why: string }[] } {
  const skip = (why: string) => ({ candidates: [], rejected: [{ candidate: 'INT8 tensor-core layouts', why: `skipped: ${why}` }] });
  const cfgs = rt.gpu.features.subgroupMatrix ? i8Configs(rt) : [];
  if (!cfgs.length) return skip('this device has no INT8 subgroup matrices (its INT8 GEMMs run dot4)');
  const { M, N, K } = job.shape;
  if (!i8TcShapeOk(K)) return skip(`${job.key}: K is not a multiple of 16 (this GEMM runs dot4)`);
  const limits = rt.device.limits;
  const spelling = spellingOf(rt);
  const rejected: { candidate: string; why: string }[] = [];
  const names: string[] = [];
  const now = i8TcChoiceFor(rt, M, N, K);
  if (now) names.push(i8TcPick(now.spec, now.split && job.workspaceBytes > 0 && splits(rt, now.spec, job)));
  for (const cfg of cfgs) {
    for (const layout of I8_TC_LAYOUTS) {
      const s: I8TcSpec = { ...spelling, cfg, ...layout };
      const e = i8TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup);
      if (e) {
        rejected.push({ candidate: i8TcPick(s, false), why: e });
        continue;
      }
      names.push(i8TcPick(s, false));
      if (job.workspaceBytes > 0 && splits(rt, s, job)) names.push(i8TcPick(s, true));
    }
  }
  return { candidates: [...new Set(names)].slice(0, Math.max(1, max)), rejected };
}

/** Whether qgemmI8Steps would cut this job's K into more than one slice with this spec in its workspace. */
function splits(rt: Runtime, s: I8TcSpec, job: I8GemmJob): boolean {
  const { M, N, K } = job.shape;
  return chooseI8SplitK(i8TcSplitShape(s, M, N, K), job.workspaceBytes, i8SplitKMax(rt)) > 1;
}

/** The enabled spelling, running the device's probe first where no run has yet (a tune before the run's model is built). */
async function enabledSpelling(rt: Runtime): Promise<I8TcSpec | undefined> {
  if (!i8TensorCoreSpec(rt)) await enableI8TensorCores(rt);
  return i8TensorCoreSpec(rt);
}

export function prepareI8Gemm(rt: Runtime, job: I8GemmJob, o: CandidateOptions): PreparedJob {
  const { candidates, rejected } = i8GemmCandidates(rt, job, o.maxGemmCandidates ?? DEFAULT_MAX);
  const { M, N, K } = job.shape;
  const forms = callForms(job.calls);
  let bufs: GPUBuffer[] | null = null;
  const operands = () => {
    if (!bufs) {
      const rng = new Rng(13);
      const words = (n: number) => Uint32Array.from({ length: n }, () => rng.nextU32());
      const scales = (n: number) => Float32Array.from({ length: n }, () => 1e-3 * (1 + rng.next()));
      bufs = [
        rt.upload('workspace', 'tune.i8.xq', words((M * K) / 4)), rt.upload('workspace', 'tune.i8.sx', scales(M)),
        rt.upload('workspace', 'tune.i8.wq', words((N * K) / 4)), rt.upload('workspace', 'tune.i8.sw', scales(N)),
        rt.createBuffer('workspace', 'tune.i8.c', M * N * 4),
      ];
      if (job.workspaceBytes > 0) bufs.push(rt.createBuffer('workspace', 'tune.i8.ws', job.workspaceBytes));
    }
    return bufs;
  };
  return {
    job, rejected,
    candidates: candidates.map((name): Candidate => {
      const p = i8TcPickParse(name)!;
      return {
        name,
        // A layout's check (with its split where the pick splits) is the same on every shape: once per device.
        check: () => memoCheck(rt, `i8tc:${name}`, async () => {
          const base = await enabledSpelling(rt);
          if (!base) return 'no INT8 tensor-core spelling computes exactly on this device';
          const r = await checkI8Tc(rt, i8TcSpecOfPick(base, p), { split: p.split });
          if (!r.ok) return `not exact or does not build: ${r.error ?? `${r.mismatches} mismatches`}`;
          return p.split && !r.splitOk ? `its split over K is not exact: ${r.splitError}` : null;
        }),
        build: () => {
          const [xq, sx, wq, sw, c, workspace] = operands();
          const spec = i8TcSpecOfPick(spellingOf(rt), p);
          // In the forms the step runs it (writing, accumulating), split as the step would split it in this workspace.
          return builtInForms(rt, forms, o.gemmInner ?? i8Inner(job.shape), async (accumulate) => {
            const { result, uniforms } = await rt.checked(name, () => rt.mem.newUniforms(() => qgemmI8Steps(rt, {
              label: 'tune.i8', xq, sx, wq, sw, c, M, N, K, accumulate, workspace, choice: { spec, split: p.split },
            })));
            return { dispatches: result.dispatches, uniforms };
          });
        },
      };
    }),
    picks: (times) => [...times].sort((x, y) => x[1] - y[1]).map(([n]) => n).slice(0, 2),
    free: () => {
      bufs?.forEach((x) => rt.mem.free(x));
      bufs = null;
    },
  };
}
