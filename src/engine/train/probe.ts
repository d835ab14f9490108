/**
 * Per-layer quantization error, measured on the GPU: for every layer and tensor kind that a scheme
 * quantizes in the forward pass, the relative error ‖x − x̂‖ / ‖x‖ of what is kept (or computed with)
 * against the exact tensor, summed over the tensors of that (layer, kind):
 *  - saved activations stored quantized (AGoQ): x̂ = the stored codes decoded, i.e. exactly what the
 *    backward pass will read;
 *  - the study's fake-quantized weights (per layer, its seven linear weights) and forward GEMM inputs.
 * Not measured: the study's output gradients and Adam moments (backward / optimizer, not run on an
 * evaluation), gradient storage, and TACO's all-reduce compression.
 *
 * The probes run where the tensors are live: each probe dispatch goes right after the model's
 * dispatch that produced the quantized form (LlamaGpu.probePoints), in a copy of the forward pass
 * that the trainer runs on evaluation steps only. Each dispatch writes per-workgroup partial sums
 * of (x − x̂)² and x² into blocks at 256-byte offsets; normFinalize reduces a block into a norm, and
 * one small read brings them back.
 *
 * The buffers are part of the trainer's memory plan (`quantProbeBufferPlan`), so plan = allocation.
 */
import type { Dispatch, Runtime } from '../gpu/runtime';
import { quantErrorPartials } from '../kernels/quantize/quantize';
import { normFinalize, sumSquaresPartialCount } from '../kernels/reduce/reduce';
import { type BufferSpec, FINAL_SAVED, LAYER_SAVED, LINEAR, type LlamaGpu, type RunPlan, SAVED_KIND_OF } from '../model/llama';
import { isFp32, isHalfFormat, SAVED_KINDS } from '../scheme/scheme';

export const PROBE_KINDS = [...SAVED_KINDS, 'weights', 'gemm_inputs'] as const;
export type ProbeKind = (typeof PROBE_KINDS)[number];

export interface QuantErrorRecord {
  layer: number;
  kind: ProbeKind;
  /** ‖x − x̂‖ / ‖x‖ over the (layer, kind)'s tensors on one evaluation batch. */
  rel_err: number;
}

/** One tensor to probe: `key` names the model's probe point. */
export interface ProbeSite {
  key: string;
  layer: number;
  kind: ProbeKind;
  n: number;
}

/** The forward GEMM inputs (LlamaGpu.gemmInput's labels) and their row widths. */
const GEMM_INPUTS: [label: string, width: 'C' | 'QC' | 'F'][] = [['qkv_in', 'C'], ['o_in', 'QC'], ['mlp_in', 'C'], ['down_in', 'F']];

/** Every tensor a training model quantizes in its forward pass under its plan. */
export function probeSites(plan: RunPlan): ProbeSite[] {
  const { dims: d, layout } = plan;
  const out: ProbeSite[] = [];
  // Saved activations: the model's own storage table (l = L holds the final norm's tensors, priced by the last layer's cells).
  for (let l = 0; l <= d.L; l++) {
    const st = plan.saved[l];
    for (const key of l < d.L ? LAYER_SAVED : FINAL_SAVED) {
      const kind = SAVED_KIND_OF[key];
      const s = st[key];
      // bf16/f16 storage is no quantizer's codes + scales: nothing to probe (its error is ~2^-9 / 2^-12 relative).
      if (kind && s && !isHalfFormat(s.format)) out.push({ key: `L${l}.${key}`, layer: Math.min(l, d.L - 1), kind, n: s.n });
    }
  }
  for (let l = 0; l < d.L; l++) {
    const ls = plan.layers[l];
    if (!isFp32(ls.weights)) {
      for (const name of LINEAR) out.push({ key: `L${l}.${name}.wq`, layer: l, kind: 'weights', n: layout.byName.get(`model.layers.${l}.${name}.weight`)!.size });
    }
    if (!isFp32(ls.gemmInputs)) {
      for (const [label, w] of GEMM_INPUTS) out.push({ key: `L${l}.${label}`, layer: l, kind: 'gemm_inputs', n: d.N * d[w] });
    }
  }
  return out;
}

/** Floats per 256-byte binding-offset step. */
const ALIGN = 64;
const alignUp = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

interface RecordLayout {
  layer: number;
  kind: ProbeKind;
  sites: ProbeSite[];
  /** Partials of Σ(x − x̂)² start at errBase, those of Σx² at refBase; `count` of each. */
  errBase: number;
  refBase: number;
  count: number;
}

function probeLayout(sites: ProbeSite[]): { records: RecordLayout[]; partialsFloats: number; outFloats: number } {
  const groups = new Map<string, ProbeSite[]>();
  for (const s of sites) {
    const k = `${s.layer}:${s.kind}`;
    groups.set(k, [...(groups.get(k) ?? []), s]);
  }
  const records: RecordLayout[] = [];
  let at = 0;
  const ordered = [...groups.values()].sort((a, b) => a[0].layer - b[0].layer || PROBE_KINDS.indexOf(a[0].kind) - PROBE_KINDS.indexOf(b[0].kind));
  for (const g of ordered) {
    const count = g.reduce((s, x) => s + sumSquaresPartialCount(x.n), 0);
    records.push({ layer: g[0].layer, kind: g[0].kind, sites: g, errBase: at, refBase: at + alignUp(count), count });
    at += 2 * alignUp(count);
  }
  // Two norms per record, each at its own 256-byte offset (normFinalize writes out[0] of its binding).
  return { records, partialsFloats: at, outFloats: 2 * ALIGN * records.length };
}

/** The probe's buffers in the trainer's plan (none when the scheme quantizes nothing in the forward). */
export function quantProbeBufferPlan(plan: RunPlan): BufferSpec[] {
  const { records, partialsFloats, outFloats } = probeLayout(probeSites(plan));
  if (records.length === 0) return [];
  return [
    { key: 'probe.partials', category: 'workspace', bytes: partialsFloats * 4 },
    { key: 'probe.out', category: 'workspace', bytes: outFloats * 4 },
  ];
}

export class QuantErrorProbe {
  private constructor(
    private readonly rt: Runtime,
    /** The model's forward up to the LM head's input (every probe point lies there) with the probe dispatches after their points, then the reductions. */
    readonly forward: Dispatch[],
    private readonly records: RecordLayout[],
    private readonly buffers: GPUBuffer[],
  ) {}

  /**
   * The probe of a training model, allocating the planned buffers (charged to the current memory
   * owner); null when the model quantizes nothing in its forward pass. Throws when the model's probe
   * points and the planned sites disagree (a model change that forgot the other side).
   */
  static create(rt: Runtime, model: LlamaGpu): QuantErrorProbe | null {
    const sites = probeSites(model.plan);
    const planned = new Set(sites.map((s) => s.key));
    const unplanned = [...model.probePoints.keys()].filter((k) => !planned.has(k));
    if (unplanned.length) throw new Error(`quantization probe: the model has probe points the plan lacks: ${unplanned.join(', ')}`);
    const layout = probeLayout(sites);
    if (layout.records.length === 0) return null;
    const specs = quantProbeBufferPlan(model.plan);
    const [partials, out] = specs.map((s) => rt.createBuffer(s.category, s.key, s.bytes));
    const extra = new Map<Dispatch, Dispatch[]>();
    const finals: Dispatch[] = [];
    layout.records.forEach((r, i) => {
      let k = 0;
      for (const site of r.sites) {
        const pt = model.probePoints.get(site.key);
        if (!pt || pt.n !== site.n) throw new Error(`quantization probe: the model has no probe point ${site.key} of ${site.n} values`);
        const st = pt.stored;
        extra.set(pt.after, [...(extra.get(pt.after) ?? []), quantErrorPartials(rt, {
          label: `probe.${site.key}`, x: pt.x, n: pt.n, partials, errBase: r.errBase + k, refBase: r.refBase + k,
          ...(st ? { stored: { spec: { format: st.storage.format, granularity: st.storage.granularity, n: st.storage.n }, words: st.words, scales: st.scales } } : { xhat: pt.xhat }),
        })]);
        k += sumSquaresPartialCount(site.n);
      }
      const block = (base: number) => ({ buffer: partials, offset: base * 4, size: r.count * 4 });
      const slot = (j: number) => ({ buffer: out, offset: j * ALIGN * 4, size: 4 });
      finals.push(
        normFinalize(rt, { label: `probe.L${r.layer}.${r.kind}.err`, partials: block(r.errBase), count: r.count, out: slot(2 * i) }),
        normFinalize(rt, { label: `probe.L${r.layer}.${r.kind}.ref`, partials: block(r.refBase), count: r.count, out: slot(2 * i + 1) }),
      );
    });
    const base = model.forwardBody;
    const placed = base.filter((d) => extra.has(d)).length;
    if (placed !== extra.size) throw new Error('quantization probe: a probe point lies outside the forward pass');
    const forward = [...base.flatMap((d) => [d, ...(extra.get(d) ?? [])]), ...finals];
    return new QuantErrorProbe(rt, forward, layout.records, [partials, out]);
  }

  /** The sites' count (for tests and labels). */
  get size(): number {
    return this.records.length;
  }

  /** Reads the norms written by the last run of `forward`. */
  async read(): Promise<QuantErrorRecord[]> {
    const norms = await this.rt.readF32(this.buffers[1]);
    return this.records.map((r, i) => {
      const err = norms[2 * i * ALIGN];
      const ref = norms[(2 * i + 1) * ALIGN];
      return { layer: r.layer, kind: r.kind, rel_err: ref > 0 ? err / ref : err > 0 ? Infinity : 0 };
    });
  }

  destroy(): void {
    for (const b of this.buffers) this.rt.mem.free(b);
  }
}
