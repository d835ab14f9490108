/**
 * The INT8 transposed quantizers' forms as tuner jobs (issue 36: "quantizer forms"): per call shape of
 * quantizeColumnsI8 / quantizeTransposedI8 an INT8 step runs (Xᵀ and dYᵀ of the dW GEMMs, Wᵀ of the dX
 * GEMMs where the weights are quantized per GEMM), the forms of TQ_VARIANTS that build different code
 * there (staged or direct tiles, loads of 1 or 4 words, the register-transposed encode), the one the call
 * builds now first. Each is checked bit for bit against quantizeTransposedI8Ref on the device (codes and
 * scales, round to nearest and stochastic) before it is timed on the job's shape in the job's rounding.
 * Picks are TQ_VARIANTS names; a call takes its key's tuned pick (kernels/qgemm/block.ts tqVariantFor).
 */
import type { Runtime } from '../gpu/runtime';
import {
  columnAbsmaxWords, i8QuantKey, quantizeColumnsI8, quantizeTransposedI8, type TransposeQuantVariant, TQ_VARIANTS, tqVariantFor,
} from '../kernels/qgemm/block';
import { quantizeTransposedI8Ref } from '../kernels/qgemm/block.ref';
import { Rng } from '../util/rng';
import { type Candidate, type CandidateOptions, memoCheck, type PreparedJob } from './candidate';
import type { I8QuantJob } from './jobs';

/** What a form changes in a call of this block size: a form that builds the same kernel as an earlier one is left out. */
function formKey(v: TransposeQuantVariant, G: number | 'all', CN: number): string {
  // Staged tiles exist for blocks of ≤ 256 rows (every tile of quantizeColumnsI8); the register encode only there, CN % 8 == 0.
  const staged = v.staged && (G === 'all' || G <= 256);
  const regs = G === 'all' && v.registers === true && CN % 8 === 0;
  return `${staged}/${v.loads}/${regs}`;
}

/** The forms worth timing on a job (TQ_VARIANTS names), the one its calls build now first. */
export function i8QuantCandidates(rt: Runtime, job: I8QuantJob): string[] {
  const { R, CN, G } = job.shape;
  const now = tqVariantFor(rt, i8QuantKey(R, CN, G)).name;
  const seen = new Set<string>();
  const out: string[] = [];
  for (const name of [...(now ? [now] : []), ...Object.keys(TQ_VARIANTS)]) {
    const k = formKey(TQ_VARIANTS[name], G, CN);
    if (seen.has(k)) continue;
    seen.add(k);
    out.push(name);
  }
  return out;
}

/** GEMM-free passes are short: enough of them per timed pass to be ~0.1 ms on a GPU (up to 20). */
const quantInner = ({ R, CN }: I8QuantJob['shape']) => Math.min(20, Math.max(1, Math.round(1e8 / (R * CN))));

/** Runs one form on a small x of this block size (partial column tiles, rows past a 256-row tile) in both roundings; null where its codes and scales equal the reference's. */
async function checkForm(rt: Runtime, variant: TransposeQuantVariant, G: number | 'all'): Promise<string | null> {
  const [R, CN] = G === 'all' ? [520, 72] : [2 * G, 72];
  const x = new Rng(17).normalArray(R * CN);
  const bufs: GPUBuffer[] = [];
  const up = (label: string, d: Float32Array | Uint32Array) => {
    const b = rt.upload('workspace', `tune.tq.${label}`, d);
    bufs.push(b);
    return b;
  };
  try {
    const xb = up('x', x);
    for (const rounding of ['nearest', 'stochastic'] as const) {
      const codes = up('codes', new Uint32Array((R * CN) / 4));
      const scales = up('scales', new Float32Array(G === 'all' ? CN : (CN * R) / G));
      const a = { label: 'tune.tq.check', x: xb, R, CN, codes, scales, rounding, seed: 5, variant };
      const k = G === 'all' ? quantizeColumnsI8(rt, { ...a, amax: up('amax', new Uint32Array(columnAbsmaxWords(R, CN))) }) : quantizeTransposedI8(rt, { ...a, G });
      const dispatches = 'dispatches' in k ? k.dispatches : [k.dispatch];
      await rt.checked('tune.tq.check', () => rt.run(dispatches));
      const ref = quantizeTransposedI8Ref(x, R, CN, G === 'all' ? R : G, { rounding, seed: 5 });
      const gotScales = await rt.readF32(scales, 0, ref.scales.length);
      const gotCodes = await rt.readU32(codes, 0, ref.words.length);
      const bad = ref.words.reduce((n, w, i) => n + (gotCodes[i] !== w ? 1 : 0), 0) + ref.scales.reduce((n, s, i) => n + (Object.is(gotScales[i], s) ? 0 : 1), 0);
      if (bad) return `${bad} codes or scales differ from the reference (${rounding})`;
    }
    return null;
  } finally {
    bufs.forEach((b) => rt.mem.free(b));
  }
}

export function prepareI8Quant(rt: Runtime, job: I8QuantJob, o: CandidateOptions): PreparedJob {
  const { R, CN, G } = job.shape;
  let bufs: GPUBuffer[] | null = null;
  const operands = () => {
    if (!bufs) {
      bufs = [
        rt.upload('workspace', 'tune.tq.x', new Rng(19).normalArray(R * CN)), rt.createBuffer('workspace', 'tune.tq.codes', R * CN),
        rt.createBuffer('workspace', 'tune.tq.scales', (G === 'all' ? CN : (CN * R) / G) * 4),
        rt.createBuffer('workspace', 'tune.tq.amax', G === 'all' ? columnAbsmaxWords(R, CN) * 4 : 4),
      ];
    }
    return bufs;
  };
  const inner = o.gemmInner ?? quantInner(job.shape);
  return {
    job, rejected: [],
    candidates: i8QuantCandidates(rt, job).map((name): Candidate => ({
      name,
      // A form's check depends on the block size only (every shape of it shares one).
      check: () => memoCheck(rt, `i8quant:${name}/${G}`, () => checkForm(rt, TQ_VARIANTS[name], G)),
      build: async () => {
        const [x, codes, scales, amax] = operands();
        const a = { label: 'tune.tq', x, R, CN, codes, scales, rounding: job.rounding, variant: TQ_VARIANTS[name] };
        const { result: dispatches, uniforms } = await rt.checked(name, () => rt.mem.newUniforms(() => (G === 'all'
          ? quantizeColumnsI8(rt, { ...a, amax }).dispatches : [quantizeTransposedI8(rt, { ...a, G }).dispatch])));
        return {
          dispatches: Array.from({ length: inner }, () => dispatches).flat(), inner,
          free: () => uniforms.forEach((u) => rt.mem.free(u)),
        };
      },
    })),
    picks: (times) => [...times].sort((x, y) => x[1] - y[1]).map(([n]) => n).slice(0, 1),
    free: () => {
      bufs?.forEach((b) => rt.mem.free(b));
      bufs = null;
    },
  };
}
