/**
 * f16 flash-attention jobs of the tuner (issue 36): per call shape an f16 run makes (head dim, T,
 * heads, KV heads, batch; causal), the forward's block layouts (F16_ATTN_LAYOUTS) and the backward's
 * dq + dk/dv pairs (F16_ATTN_BWD_LAYOUTS) with this device's f16 → f32 subgroup-matrix configurations
 * within its limits, the spec the call runs now first. Each is checked on the device against the
 * reference (checkF16AttnSpec, checkF16AttnBwdSpecs: what enableF16Attention runs) before it is
 * timed on the job's shape, the model's variant (f16 q/k/v/dO copies read by the matrix loads, o's or
 * dv's f16 copy written). Picks are f16AttnPick / f16AttnBwdPick names (kernels/attention/f16/picks.ts);
 * a call takes its first tuned pick verified on its runtime (f16AttentionSpecFor, f16AttentionBackwardSpecsFor).
 * A device without shader-f16 or subgroup matrices (SwiftShader) has no candidates: each job says
 * it is skipped and why.
 */
import type { Runtime } from '../gpu/runtime';
import { attentionBackwardF16, attentionForwardF16 } from '../kernels/attention/f16/attention-f16';
import { checkF16AttnBwdSpecs, checkF16AttnSpec, F16_ATTENTION_HEAD_DIMS } from '../kernels/attention/f16/checks';
import { f16AttnInputElems, type F16AttnSpec } from '../kernels/attention/f16/code';
import { f16AttnBwdCandidates, type F16AttnBwdSpecs, f16AttnCandidates } from '../kernels/attention/f16/layouts';
import { f16AttentionBackwardSpecsFor, f16AttentionSpecFor, f16AttnBwdPick, f16AttnPick } from '../kernels/attention/f16/picks';
import { f16AttnSpecError } from '../kernels/attention/f16/code';
import { f16AttnDsPairBytes } from '../kernels/attention/f16/code-bwd';
import { f16OperandBytes } from '../kernels/matmul-f16/cast';
import { f16ConfigsOf } from '../kernels/matmul-f16/plan';
import { subgroupMatrixConfigs, subgroupSize } from '../kernels/qgemm/sgmat';
import { f32ArrayToF16 } from '../quant/f16';
import { type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import type { F16AttnJob } from './jobs';
import { fillPattern } from './measure';

/** What each job's candidate is: the forward's spec or the backward's pair. */
export type F16AttnCandidate = { pass: 'fwd'; spec: F16AttnSpec } | { pass: 'bwd'; specs: F16AttnBwdSpecs };

/** Its pick name (the cache's). */
export const f16AttnCandidatePick = (c: F16AttnCandidate) => (c.pass === 'fwd' ? f16AttnPick(c.spec) : f16AttnBwdPick(c.specs));

/**
 * The candidates worth timing on an f16 attention job, or none with the reason (no shader-f16 or f16
 * subgroup matrices here, or a head dim the f16 kernel is not verified for: that call runs fp32
 * attention). Order: the spec the call runs now (tuned or first passing), then the layout lists'
 * order per configuration (enableF16Attention's). `max`: most kept (default all).
 */
export function f16AttnJobCandidates(rt: Runtime, job: F16AttnJob, max = Infinity): { candidates: F16AttnCandidate[]; rejected: { candidate: string; why: string }[] } {
  const f = rt.gpu.features;
  const skip = (why: string) => ({ candidates: [], rejected: [{ candidate: 'f16 attention layouts', why: `skipped: ${why}` }] });
  if (!f.shaderF16) return skip('this device has no shader-f16 (its attention runs the fp32 kernels)');
  const cfgs = f.subgroupMatrix ? f16ConfigsOf(subgroupMatrixConfigs(rt)) : [];
  if (!cfgs.length) return skip('this device has no f16 → f32 subgroup matrices (its attention runs the fp32 kernels)');
  const { D } = job.shape;
  if (!F16_ATTENTION_HEAD_DIMS.includes(D)) return skip(`head dim ${D}: the f16 attention is verified for head dims ${F16_ATTENTION_HEAD_DIMS.join(', ')} (this call runs fp32 attention)`);
  const lim = rt.device.limits;
  const sg = subgroupSize(rt);
  // The spec the call runs now (none before enableF16Attention: a tune before the run's probe), no choice noted: the tune makes no call.
  const fwdNow = job.pass === 'fwd' ? f16AttentionSpecFor(rt, job.shape, false, false) : undefined;
  const bwdNow = job.pass === 'bwd' ? f16AttentionBackwardSpecsFor(rt, job.shape, false, false) : undefined;
  const now: F16AttnCandidate[] = fwdNow ? [{ pass: 'fwd', spec: fwdNow }] : bwdNow ? [{ pass: 'bwd', specs: bwdNow }] : [];
  const all: F16AttnCandidate[] = job.pass === 'fwd'
    ? f16AttnCandidates(cfgs, D, sg, (s) => !f16AttnSpecError(s, lim.maxComputeWorkgroupStorageSize, lim.maxComputeInvocationsPerWorkgroup, false, true)).map((spec) => ({ pass: 'fwd', spec }))
    : f16AttnBwdCandidates(cfgs, D, sg, lim).map((specs) => ({ pass: 'bwd', specs }));
  const seen = new Set<string>();
  const candidates = [...now, ...all].filter((c) => !seen.has(f16AttnCandidatePick(c)) && seen.add(f16AttnCandidatePick(c)) !== undefined);
  return { candidates: candidates.slice(0, Math.max(1, max)), rejected: [] };
}

/** f16 copies of seeded data (padded as the kernels read them: F16AttnInputs), fp32 outputs; freed with `free`. */
function operands(rt: Runtime, job: F16AttnJob) {
  const { B, T, nH, nKV, D } = job.shape;
  const bufs: GPUBuffer[] = [];
  const keep = (b: GPUBuffer) => (bufs.push(b), b);
  const copy16 = (width: number, seed: number, scale = 1) => keep(rt.upload('workspace', 'tune.f16attn.in', f32ArrayToF16(fillPattern(f16AttnInputElems(B * T, width), seed).map((x) => scale * x))));
  const f32 = (n: number, seed?: number) => keep(seed === undefined ? rt.createBuffer('workspace', 'tune.f16attn.out', n * 4) : rt.upload('workspace', 'tune.f16attn.out', fillPattern(n, seed)));
  const nq = B * T * nH * D;
  const nk = B * T * nKV * D;
  // q ×6 (the pattern is in ±0.5: ±3 as the checks' q) makes the softmax peaked, so the forward's lazy rescale meets real row maxima.
  const q = copy16(nH * D, 1, 6);
  const k = copy16(nKV * D, 2);
  const v = copy16(nKV * D, 3);
  // lse of the backward: ~log of the keys a row sees, so P = exp(s − lse) stays finite as in training.
  const lse = keep(rt.upload('workspace', 'tune.f16attn.lse', Float32Array.from({ length: B * nH * T }, (_, i) => Math.log((i % T) + 1) + 1)));
  return {
    // dO32: fp32 dO, which the stored-dS path's Di pass reads (the recomputing dq kernel takes dO's f16 copy).
    q, k, v, lse, o: f32(nq, 4), dO: copy16(nH * D, 5), dO32: f32(nq, 5), dq: f32(nq), dk: f32(nk), dv: f32(nk), ws: f32(B * nH * T),
    o16: keep(rt.createBuffer('workspace', 'tune.f16attn.o16', f16OperandBytes(nq, false))),
    dv16: keep(rt.createBuffer('workspace', 'tune.f16attn.dv16', f16OperandBytes(nk, false))),
    // The stored-dS candidates' scratch: every pair at once (the model's dF1 holds base's in one chunk).
    dsScratch: job.pass === 'bwd' ? keep(rt.createBuffer('workspace', 'tune.f16attn.ds', B * nKV * f16AttnDsPairBytes(T, nH / nKV))) : undefined,
    free: () => bufs.forEach((b) => rt.mem.free(b)),
  };
}

export function prepareF16Attention(rt: Runtime, job: F16AttnJob, o: CandidateOptions): PreparedJob {
  const { candidates, rejected } = f16AttnJobCandidates(rt, job, o.maxAttentionCandidates);
  let bufs: ReturnType<typeof operands> | null = null;
  const { D } = job.shape;
  return {
    job, rejected,
    candidates: candidates.map((c) => {
      const name = f16AttnCandidatePick(c);
      return {
        name,
        // The checks are the spec's (its small cases), whatever the shape: one per device and head dim.
        check: () => memoCheck(rt, `f16attn:${c.pass}:D${D}:${name}`, async () => {
          const r = c.pass === 'fwd' ? await checkF16AttnSpec(rt, c.spec) : await checkF16AttnBwdSpecs(rt, c.specs);
          return r.ok ? null : `wrong or does not build: ${r.failed}`;
        }),
        build: async () => {
          const b = (bufs ??= operands(rt, job));
          const s = { label: 'tune.f16attn', ...job.shape };
          const qkv16 = { q: b.q, k: b.k, v: b.v, elem: 'f16' as const };
          const ds = await rt.checked(name, () => (c.pass === 'fwd'
            ? attentionForwardF16(rt, { ...s, q: b.q, k: b.k, v: b.v, o: b.o, lse: b.lse, spec: c.spec, o16: { out: b.o16, elem: 'f16' }, qkv16 })
            : attentionBackwardF16(rt, {
              ...s, q: b.q, k: b.k, v: b.v, o: b.o, lse: b.lse, dO: b.dO32, dq: b.dq, dk: b.dk, dv: b.dv, workspace: b.ws, specs: c.specs,
              dv16: { out: b.dv16, elem: 'f16' }, qkv16: { ...qkv16, dO: b.dO }, dsScratch: b.dsScratch,
            })));
          return { dispatches: ds, inner: 1, free: () => {} };
        },
      };
    }),
    picks: (times) => [...times].sort((x, y) => x[1] - y[1]).map(([n]) => n).slice(0, 2),
    free: () => {
      bufs?.free();
      bufs = null;
    },
  };
}
