/**
 * Dispatches of one training step (forward, backward, AdamW) of a SmolLM2-135M-shaped model's
 * layers, counted from the built dispatch lists (nothing runs: a count, valid on SwiftShader): full
 * fine-tuning against LoRA (LoRA with every split thin GEMM reducing its own partials: LoraPlan.batchReduce
 * false; under f16 LoRA with the f16 GEMMs' low-rank epilogue) per class —
 * the adapters' own GEMMs (labels with `lora_`), base GEMMs with and without the epilogue, casts —
 * then layer 0's adapter dispatches with each one's choice (split-K or one pass, grid) for the shapes
 * of --batch × --seq. Issue 39: the adapters' thin GEMMs were the step's cost.
 *   node scripts/run-node.mjs bench/lora-dispatches.ts [--layers 2] [--batch 8 --seq 512] [--rank 16] [--scheme fp32|f16]
 *
 * --time (on a GPU): each thin adapter GEMM shape of one layer (uᵀ per group, dB, vᵀ per adapter, dA
 * per group) timed alone (GPU timestamps; its split-K reduce included): the one-pass pick, the pick
 * with the step's workspace (what the step runs), and the fastest of a sweep of small tiles × K
 * splits; summed per layer and ×L per step. What a table entry (kernels/matmul/tables.ts) would win.
 * u and dA (the GEMMs over the layer input X) also with X as packed f16 (MatmulArgs.bHalf: the
 * backward's read of the f16 cells, issue 39).
 * Then, where the device has shader-f16, each f16 base GEMM of a layer alone, with the adapters'
 * low-rank epilogue, and the fp32 GEMM of their own that replaces it (LoraPlan.f16Epilogue's A/B).
 *   node lora-dispatches.mjs --time [--batch 8 --seq 512] [--reps 5]       (~20 s on an H100)
 */
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { buildMatmulF16, enableF16TensorCores, uploadF16 } from '../src/engine/kernels/matmul-f16/matmul-f16';
import { type Dispatch, Runtime } from '../src/engine/gpu/runtime';
import { LORA_SHARED_INPUT, loraSplitBytes } from '../src/engine/lora/plan';
import { defaultLoraSpec, loraAdapters } from '../src/engine/lora/spec';
import { buildMatmul } from '../src/engine/kernels/matmul/matmul';
import { type MatmulShape, matmulWorkspaceBytes } from '../src/engine/kernels/matmul/plan';
import { variantFits, getVariant } from '../src/engine/kernels/matmul/variants';
import { validateModelConfig } from '../src/engine/model/config';
import { LlamaGpu } from '../src/engine/model/llama';
import { resolvePlan } from '../src/engine/plan/run-plan';
import { SCHEME_PRESETS } from '../src/engine/scheme/presets';
import { gemmOperands, timeMatmul } from '../src/lab/gemm';
import { Rng } from '../src/engine/util/rng';

const a = parseArgs({ options: {
  layers: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, rank: { type: 'string' }, scheme: { type: 'string' },
  time: { type: 'boolean' }, reps: { type: 'string' }, cpu: { type: 'boolean' },
} }).values;
const L = Number(a.layers ?? (a.time ? 30 : 2));
const [B, T, r] = [Number(a.batch ?? 8), Number(a.seq ?? 512), Number(a.rank ?? 16)];
const scheme = a.scheme ?? 'fp32';
if (!(scheme in SCHEME_PRESETS)) throw new Error(`--scheme: unknown ${scheme} (have ${Object.keys(SCHEME_PRESETS).join(', ')})`);
const cfg = validateModelConfig({
  vocab_size: 49152, hidden_size: 576, intermediate_size: 1536, num_hidden_layers: L, num_attention_heads: 9, num_key_value_heads: 3,
  max_position_embeddings: 2048, rms_norm_eps: 1e-5, rope_theta: 100000, tie_word_embeddings: true, initializer_range: 0.041666666666666664,
});
// allow_unsafe_apis: the subgroup matrices of the f16 tensor-core GEMMs (--time's epilogue A/B).
const rt = new Runtime(await acquireNodeGpu({ forceSwiftShader: a.cpu, dawnFlags: ['disable-dawn-features=timestamp_quantization', 'enable-dawn-features=allow_unsafe_apis'] }));
const f16 = scheme === 'fp32' ? {} : { f16Device: { shaderF16: true, tensorCores: false }, f16Twin: true };
const plan = resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS[scheme], lora: defaultLoraSpec(r), ...f16 });

/** A dispatch's class in the full-vs-LoRA table: the adapters' own, base GEMMs with and without the low-rank epilogue, f16 casts and packs, the rest. */
function classOf(label: string): string {
  if (label.includes('lora_')) return /split-K reduce/.test(label) ? 'adapter split-K reduces' : 'adapter GEMMs';
  if (/\+lr\d+\]$/.test(label)) return 'base GEMMs +low-rank epilogue';
  if (/^lm_head/.test(label)) return 'LM head GEMMs and reduces';
  if (/\[(f16 |matmul )/.test(label)) return /split-K reduce/.test(label) ? 'base split-K reduces' : 'base GEMMs';
  if (/f32→f16|\.f16\.(un)?pack/.test(label)) return 'f16 casts and packs';
  return 'other';
}

if (!a.time) {
  // Full fine-tuning, LoRA (the default plan) and, under f16, LoRA with the f16 GEMMs' low-rank epilogue: dispatches a step per class.
  const rows: [string, Dispatch[]][] = [];
  const build = (name: string, p: typeof plan) => {
    const model = new LlamaGpu(rt, p);
    rows.push([name, [...model.forward, ...model.backward, ...model.optimizer]]);
    model.destroy();
  };
  build('full', resolvePlan(cfg, B, T, { scheme: SCHEME_PRESETS[scheme], ...f16 }));
  build(`lora r${r}`, plan);
  build(`lora r${r} each-reduce`, { ...plan, lora: { ...plan.lora!, batchReduce: false } });
  if (scheme !== 'fp32') build(`lora r${r} f16-epilogue`, { ...plan, lora: { ...plan.lora!, f16Epilogue: ['forward', 'dx'] } });
  const classes = [...new Set(rows.flatMap(([, s]) => s.map((d) => classOf(d.label))))];
  console.log(`${scheme}, ${L} layers, B${B}xT${T}: dispatches a step${f16.f16Twin ? ' (f16 GEMMs as built for the f32 twin: on a GPU the tensor-core layouts and their splits differ)' : ''}`);
  console.log(`  ${''.padEnd(32)}${rows.map(([n]) => n.padStart(22)).join('')}`);
  for (const c of ['total', ...classes]) {
    console.log(`  ${c.padEnd(32)}${rows.map(([, s]) => String(c === 'total' ? s.length : s.filter((d) => classOf(d.label) === c).length).padStart(22)).join('')}`);
  }
  const lora = rows[1][1].filter((d) => d.label.includes('lora_'));
  console.log(`LoRA's own dispatches: ${lora.length} (${(lora.length / L).toFixed(1)} a layer); layer 0's:`);
  for (const d of lora) if (d.label.startsWith('L0.')) console.log(`  ${d.label} ${d.workgroups.join('x')}`);
} else {
  if (!rt.gpu.features.timestampQuery) throw new Error('--time needs timestamp queries (a GPU; SwiftShader has them too, slowly)');
  const N = B * T;
  // One layer's thin GEMMs, as lora/gemms.ts builds them (groups stacked; workspaces as the step's).
  const layer0 = loraAdapters(cfg, plan.lora!.spec).filter((x) => x.layer === 0);
  // dB's and dA's split-K partials go to the backward's dead dW scratch (dq or dF1): [N, C] floats at least.
  const dwWs = N * cfg.hidden_size * 4;
  const stepWs = loraSplitBytes(plan.lora!, plan.dims);
  const shapes: { name: string; s: MatmulShape; ws: number }[] = [];
  for (const ts of LORA_SHARED_INPUT) {
    const g = layer0.filter((x) => ts.includes(x.target));
    if (!g.length) continue;
    shapes.push({ name: `u ${ts.join('')}`, s: { M: g.length * r, N, K: g[0].in, transB: true }, ws: stepWs });
    for (const x of g) {
      shapes.push({ name: `dB ${x.target}`, s: { M: x.out, N: r, K: N, transA: true, transB: true }, ws: dwWs });
      shapes.push({ name: `vT ${x.target}`, s: { M: r, N, K: x.out, transA: true, transB: true }, ws: stepWs });
    }
    shapes.push({ name: `dA ${ts.join('')}`, s: { M: g.length * r, N: g[0].in, K: N }, ws: dwWs });
  }
  const reps = Number(a.reps ?? 5);
  const sweep = ['32x32k16_4x4', '64x64k16_4x4', '128x32k16_8x4', '64x64k16_8x8'].filter((v) => variantFits(getVariant(v), rt.device.limits));
  let warm = 1000; // the first timing waits for steady clocks (ms), the rest run warm
  const time = async (s: MatmulShape, ws: number, variant?: string, bHalf = false) => {
    const op = gemmOperands(rt, s, 'lora-thin', ws);
    try {
      const m = buildMatmul(rt, { label: 'lora-thin', a: { buffer: op.a }, b: { buffer: op.b }, c: { buffer: op.c }, ...s, variant, bHalf, workspace: op.workspace ? { buffer: op.workspace } : undefined });
      const t = await timeMatmul(rt, m.dispatches, s, { reps, inner: 10, warmupMs: warm || undefined });
      warm = 0;
      m.uniforms.forEach((u) => rt.mem.free(u));
      return { us: t.ms * 1000, name: m.variant };
    } finally {
      op.free();
    }
  };
  const sum = { one: 0, picked: 0, best: 0, xPicked: 0, xHalf: 0 };
  console.log(`LoRA r${r} thin GEMMs of one layer, B${B}xT${T} (N ${N}); µs each: one-pass pick | the step's pick | fastest of the sweep`
    + ' [| the step\'s pick reading X as packed f16: u and dA, MatmulArgs.bHalf]');
  for (const { name, s, ws } of shapes) {
    const one = await time(s, 0);
    const picked = await time(s, ws);
    let best = picked;
    for (const v of sweep) {
      for (const S of [1, 2, 4, 8, 16, 32]) {
        const c = S === 1 ? v : `${v}_sk${S}`;
        if (matmulWorkspaceBytes(s, c) > ws) continue;
        const t = await time(s, ws, c);
        if (t.us < best.us) best = t;
      }
    }
    sum.one += one.us;
    sum.picked += picked.us;
    sum.best += best.us;
    // u and dA read the layer's input X: under f16 cells the backward's read its packed f16 cell (the forward's u reads fp32 X).
    const half = /^(u|dA) /.test(name) ? await time(s, ws, undefined, true) : undefined;
    if (half) {
      sum.xPicked += picked.us;
      sum.xHalf += half.us;
    }
    console.log(`  ${name.padEnd(8)} ${`${s.M}x${s.N}x${s.K}${s.transA ? 'T' : 'N'}${s.transB ? 'T' : 'N'}`.padEnd(18)} ${one.us.toFixed(1).padStart(7)} ${one.name.padEnd(22)} ${picked.us.toFixed(1).padStart(7)} ${picked.name.padEnd(22)} ${best.us.toFixed(1).padStart(7)} ${best.name}${half ? ` | ${half.us.toFixed(1)} f16 X` : ''}`);
  }
  console.log(`  u and dA with X fp32 | packed f16: ${sum.xPicked.toFixed(1)} | ${sum.xHalf.toFixed(1)} µs a layer`);
  const perStep = (us: number) => ((us * cfg.num_hidden_layers) / 1000).toFixed(2);
  console.log(`  a layer: ${sum.one.toFixed(1)} | ${sum.picked.toFixed(1)} | ${sum.best.toFixed(1)} µs; ×${cfg.num_hidden_layers} layers: ${perStep(sum.one)} | ${perStep(sum.picked)} | ${perStep(sum.best)} ms a step`);
  console.log('  (the step before this change ran uᵀ twice, forward and backward, one-pass; add the u rows again to the one-pass column for it)');
  await timeTerms(reps);
}

/**
 * The adapters' terms under f16 compute, per base GEMM of one layer (7 forward NT, one dX NN per
 * group at its rank): the f16 GEMM as the model picks it alone, with the low-rank epilogue, and the
 * fp32 GEMM of their own that replaces it (K = rank, accumulating into C). What LoraPlan.f16Epilogue decides.
 */
async function timeTerms(reps: number): Promise<void> {
  if (!rt.gpu.features.shaderF16) {
    console.log('f16 epilogue against own GEMMs: skipped (no shader-f16)');
    return;
  }
  await enableF16TensorCores(rt);
  const N = B * T;
  const { C, F, QC, KVC } = plan.dims;
  const s = plan.lora!.scale;
  const terms = [
    ...([['q', QC, C], ['k', KVC, C], ['v', KVC, C], ['o', C, QC], ['gate', F, C], ['up', F, C], ['down', C, F]] as const)
      .map(([t, out, inW]) => ({ name: `${t} fwd`, M: N, N: out, K: inW, rank: r, fwd: true })),
    ...([['qkv', C, QC, 3], ['o', QC, C, 1], ['gate/up', C, F, 2], ['down', F, C, 1]] as const)
      .map(([t, inW, out, g]) => ({ name: `${t} dx`, M: N, N: inW, K: out, rank: g * r, fwd: false })),
  ];
  const rng = new Rng(7);
  const sum = { base: 0, fused: 0, own: 0 };
  console.log(`f16 GEMMs of one layer, B${B}xT${T}: alone | with the low-rank epilogue | the fp32 GEMM of its own (µs; path: the model's)`);
  for (const x of terms) {
    const up = (label: string, n: number) => rt.upload('workspace', label, rng.uniformArray(n, -1, 1));
    const bufs = [uploadF16(rt, 'lr.a', rng.uniformArray(x.M * x.K, -1, 1)), uploadF16(rt, 'lr.b', rng.uniformArray(x.K * x.N, -1, 1)),
      rt.createBuffer('workspace', 'lr.c', x.M * x.N * 4), up('lr.u', x.rank * x.M), up('lr.v', x.rank * x.N)];
    try {
      const [A, Bm, Cm, U, V] = bufs.map((buffer) => ({ buffer }));
      const shape = { M: x.M, N: x.N, K: x.K, transB: x.fwd };
      const f16 = async (lowRank: boolean) => {
        const m = buildMatmulF16(rt, { label: 'lr', ...shape, a: A, b: Bm, c: Cm, lowRank: lowRank ? { u: U, v: V, rank: x.rank, scale: s, transV: x.fwd } : undefined });
        const t = await timeMatmul(rt, m.dispatches, shape, { reps, inner: 10 });
        m.uniforms.forEach((u) => rt.mem.free(u));
        return { us: t.ms * 1000, kernel: m.kernel };
      };
      const base = await f16(false);
      const fused = await f16(true);
      const own = buildMatmul(rt, { label: 'lr.own', a: U, b: V, c: Cm, M: x.M, N: x.N, K: x.rank, transA: true, transB: x.fwd, accumulate: true, alpha: s });
      const ownUs = (await timeMatmul(rt, own.dispatches, { M: x.M, N: x.N, K: x.rank }, { reps, inner: 10 })).ms * 1000;
      own.uniforms.forEach((u) => rt.mem.free(u));
      sum.base += base.us;
      sum.fused += fused.us;
      sum.own += ownUs;
      console.log(`  ${x.name.padEnd(11)} ${`${x.M}x${x.N}x${x.K} r${x.rank}`.padEnd(20)} ${base.us.toFixed(1).padStart(7)} ${fused.us.toFixed(1).padStart(7)} (${fused.us >= base.us ? '+' : ''}${(fused.us - base.us).toFixed(1)}) ${ownUs.toFixed(1).padStart(7)}  ${base.kernel} | ${own.variant}`);
    } finally {
      bufs.forEach((b) => rt.mem.free(b));
    }
  }
  const perStep = (us: number) => ((us * cfg.num_hidden_layers) / 1000).toFixed(2);
  console.log(`  a layer: the epilogue adds ${(sum.fused - sum.base).toFixed(1)} µs, own GEMMs ${sum.own.toFixed(1)} µs; ×${cfg.num_hidden_layers} layers: ${perStep(sum.fused - sum.base)} against ${perStep(sum.own)} ms a step`);
}
process.exit(0);
