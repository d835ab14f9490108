/**
 * f16 tensor-core GEMM jobs of the tuner (issue 36: the f16 layouts among the choices tuned on the
 * user's GPU). Per GEMM shape and form an f16 run computes on tensor cores: the layouts of
 * F16_TC_LAYOUTS with this device's f16 → f32 subgroup-matrix configurations within its limits (the
 * layout the GEMM would run now first), each checked on the device against the f16 reference
 * (checkF16Tc: partial and whole blocks, alpha with accumulate, split-K) before it is timed on the
 * job's shape in one pass. Picks are layout names (plan.ts f16TcPick); a GEMM takes the first tuned pick verified on its
 * runtime (kernels/matmul-f16 f16TensorCoreSpecFor). A device without shader-f16 or subgroup
 * matrices (SwiftShader) has no candidates: each job says it is skipped and why.
 */
import type { Runtime } from '../gpu/runtime';
import { buildMatmulF16, checkF16Tc, f16TensorCoreSpec, f16TensorCoreSpecFor, uploadF16 } from '../kernels/matmul-f16/matmul-f16';
import {
  F16_TC_LAYOUTS, f16ConfigsOf, f16TcCandidates, f16TcLabel, f16TcPick, f16TcSpecError, type F16TcSpec, vec4Operands,
} from '../kernels/matmul-f16/plan';
import { subgroupMatrixConfigs, subgroupSize } from '../kernels/qgemm/sgmat';
import { Rng } from '../util/rng';
import { builtInForms, type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import { callForms, type F16GemmJob } from './jobs';
import { gemmInner } from './measure';

/** Most layouts timed per shape unless the options say (each is compiled and checked first: ~1 s on a GPU). */
const DEFAULT_MAX = 12;

/**
 * The layouts worth timing on an f16 job, or none with the reason (no f16 tensor cores here, or the
 * shape's rows are not whole vec4s, so it runs the SIMT kernel). Order: the spec the GEMM runs now
 * (tuned, measured or its form's), the form's verified one, then f16TcCandidates's order with the
 * largest configuration's layouts first.
 */
export function f16GemmCandidates(rt: Runtime, job: F16GemmJob, max = DEFAULT_MAX): { candidates: F16TcSpec[]; rejected: { candidate: string; why: string }[] } {
  const f = rt.gpu.features;
  const skip = (why: string) => ({ candidates: [], rejected: [{ candidate: 'f16 tensor-core layouts', why: `skipped: ${why}` }] });
  if (!f.shaderF16) return skip('this device has no shader-f16 (its f16 GEMMs run the fp32 kernel or the f32 twin)');
  const cfgs = f.subgroupMatrix ? f16ConfigsOf(subgroupMatrixConfigs(rt)) : [];
  if (!cfgs.length) return skip('this device has no f16 → f32 subgroup matrices (its f16 GEMMs run the SIMT kernel)');
  const { form, shape } = job;
  if (!Object.values(vec4Operands(form, shape)).every(Boolean)) return skip(`${job.key}: the operands' rows are not whole vec4s (this GEMM runs the SIMT kernel)`);
  const limits = rt.device.limits;
  const rejected: { candidate: string; why: string }[] = [];
  const valid = (s: F16TcSpec) => {
    const e = f16TcSpecError(s, limits.maxComputeWorkgroupStorageSize, limits.maxComputeInvocationsPerWorkgroup);
    if (e) rejected.push({ candidate: f16TcPick(s), why: e });
    return !e;
  };
  const all = f16TcCandidates(form, cfgs, F16_TC_LAYOUTS, subgroupSize(rt), valid);
  const rank = (s: F16TcSpec) => cfgs.findIndex((c) => c.M === s.cfg.M && c.N === s.cfg.N && c.K === s.cfg.K);
  // Before enableF16TensorCores has run (a tune before the run's probe) there is no current spec: the list's order alone.
  const now = [f16TensorCoreSpecFor(rt, form, shape), f16TensorCoreSpec(rt, form)].filter((s): s is F16TcSpec => s !== undefined);
  const ordered = [...now, ...all.sort((a, b) => rank(a) - rank(b))];
  const seen = new Set<string>();
  const candidates = ordered.filter((s) => !seen.has(f16TcLabel(s)) && seen.add(f16TcLabel(s)) !== undefined);
  return { candidates: candidates.slice(0, Math.max(1, max)), rejected };
}

export function prepareF16Gemm(rt: Runtime, job: F16GemmJob, o: CandidateOptions): PreparedJob {
  const { candidates, rejected } = f16GemmCandidates(rt, job, o.maxGemmCandidates ?? DEFAULT_MAX);
  const { M, N, K } = job.shape;
  const forms = callForms(job.calls);
  let bufs: GPUBuffer[] | null = null;
  const operands = () => {
    if (!bufs) {
      const rng = new Rng(11);
      bufs = [uploadF16(rt, 'tune.f16.a', rng.uniformArray(M * K)), uploadF16(rt, 'tune.f16.b', rng.uniformArray(K * N)), rt.createBuffer('workspace', 'tune.f16.c', M * N * 4)];
      if (job.workspaceBytes > 0) bufs.push(rt.createBuffer('workspace', 'tune.f16.ws', job.workspaceBytes));
    }
    return bufs;
  };
  return {
    job, rejected,
    candidates: candidates.map((s) => {
      const name = f16TcPick(s);
      return {
        name,
        // The checks are the layout's (its label names its form), whatever the shape: one per device.
        check: () => memoCheck(rt, `f16gemm:${name}`, async () => {
          const r = await checkF16Tc(rt, s);
          return r.ok ? null : `wrong or does not build: ${r.failed}`;
        }),
        build: () => {
          const [a, b, c, workspace] = operands();
          // Each layout with the split-K the step would give it in this workspace (buildMatmulF16's own choice), in the
          // forms the step runs it (writing, accumulating: checkF16Tc's cases cover both).
          return builtInForms(rt, forms, o.gemmInner ?? gemmInner({ M, N, K }), (acc) =>
            rt.checked(name, () => buildMatmulF16(rt, { label: 'tune.f16', M, N, K, a, b, c, transA: s.transA, transB: s.transB, path: 'f16-tensor-core', spec: s, workspace, accumulate: acc })));
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
