/**
 * Split-K of the INT8 weight-gradient GEMMs (src/engine/kernels/qgemm/splitk.ts) at a preset's dW
 * shapes (dW = dYᵀ·X: M×N per linear, K = the step's tokens): per kernel path (tensor cores where
 * enableI8TensorCores finds them, and dot4), the one-pass GEMM and each forced slice count, every
 * split checked bit for bit against the one pass before it is timed (GPU timestamps, median).
 * Also prints the slice count the engine would choose with the model's scratch as workspace.
 *
 *   node i8-splitk.mjs [--model base] [--batch B --seq T] [--splits 2,3,4,6,8] [--paths tc,dot4]
 *                      [--reps 10] [--json out.json] [--cpu]
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime } from '../src/engine/gpu/runtime';
import { type GemmTiles, qgemmI8SplitK, qgemmI8Steps } from '../src/engine/kernels/qgemm/qgemm';
import { enableI8TensorCores, i8TcLabel } from '../src/engine/kernels/qgemm/tc';
import { PRESET_NAMES, type PresetName } from '../src/engine/model/config';
import { modelDims } from '../src/engine/model/dims';
import { defaultTrainOptions } from '../src/engine/train/options';
import { Rng } from '../src/engine/util/rng';
import { msPer } from '../src/lab/quant';

const a = parseArgs({
  options: {
    model: { type: 'string' }, batch: { type: 'string' }, seq: { type: 'string' }, splits: { type: 'string' }, paths: { type: 'string' },
    reps: { type: 'string' }, json: { type: 'string' }, cpu: { type: 'boolean' },
  },
}).values;
const preset = (a.model ?? 'base') as PresetName;
if (!PRESET_NAMES.includes(preset)) throw new Error(`--model: unknown preset '${preset}' (${PRESET_NAMES.join(', ')})`);
const opts = defaultTrainOptions(preset, { batch: a.batch ? Number(a.batch) : undefined, seq: a.seq ? Number(a.seq) : undefined });
const d = modelDims(opts.model, opts.batch, opts.seq);
const K = d.N;
const splits = (a.splits ?? '2,3,4,6,8').split(',').map(Number);
if (splits.some((s) => !(Number.isInteger(s) && s >= 2))) throw new Error(`--splits: slice counts ≥ 2, got '${a.splits}'`);
const paths = (a.paths ?? 'tc,dot4').split(',');
const reps = Number(a.reps ?? 10);

// The dW GEMMs of one layer (model/backward.ts buildBackward) and the backward scratch their split-K uses (linear-gemms.ts dwGemm).
const dF1 = d.N * d.F * 4;
const dq = d.N * Math.max(d.C, d.QC) * 4;
const gemms = new Map<string, { M: number; N: number; names: string[]; workspace: number }>();
for (const [name, M, N, workspace] of [
  ['q', d.QC, d.C, dF1], ['k', d.KVC, d.C, dF1], ['v', d.KVC, d.C, dF1], ['o', d.C, d.QC, dF1],
  ['gate', d.F, d.C, dq], ['up', d.F, d.C, dq], ['down', d.C, d.F, dq],
] as const) {
  const key = `${M}x${N}`;
  const g = gemms.get(key) ?? { M, N, names: [], workspace };
  g.names.push(name);
  g.workspace = Math.min(g.workspace, workspace);
  gemms.set(key, g);
}

const gpu = await acquireNodeGpu({
  forceSwiftShader: a.cpu,
  dawnFlags: ['enable-dawn-features=allow_unsafe_apis', 'disable-dawn-features=timestamp_quantization'],
});
const rt = new Runtime(gpu);
const probe = await enableI8TensorCores(rt);
const chosen = probe.chosen ? i8TcLabel(probe.chosen) : 'none';
const tcSplit = probe.tried.find((t) => t.ok);
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)}; tensor cores: ${chosen}${tcSplit ? `, split-K check ${tcSplit.splitOk ? 'exact' : `failed (${tcSplit.splitError})`}` : ''}`);
console.log(`${preset} B=${opts.batch} T=${opts.seq}: K = ${K} tokens`);
const rows: unknown[] = [];
const out = { date: new Date().toISOString(), argv: process.argv.slice(2), adapter: gpu.adapterInfo, tensorCores: chosen, probe, preset, batch: opts.batch, seq: opts.seq, K, rows };
const kernels: [string, GemmTiles | undefined][] = [];
if (paths.includes('tc') && probe.chosen) kernels.push(['int8-tensor-core', undefined]);
if (paths.includes('dot4')) kernels.push(['int8-dot4', {}]);

for (const { M, N, names, workspace } of gemms.values()) {
  const rng = new Rng(M * 7 + N);
  const words = (n: number) => new Uint32Array(n / 4).map(() => rng.nextU32());
  const scales = (n: number) => Float32Array.from({ length: n }, () => 1e-4 + rng.next() * 1e-3);
  const bufs = [
    rt.upload('workspace', 'xq', words(M * K)), rt.upload('workspace', 'sx', scales(M)),
    rt.upload('workspace', 'wq', words(N * K)), rt.upload('workspace', 'sw', scales(N)),
    rt.createBuffer('workspace', 'c', M * N * 4), rt.createBuffer('workspace', 'modelWs', workspace),
  ];
  const [xq, sx, wq, sw, c, modelWs] = bufs;
  const base = { label: `dw ${M}x${N}`, xq, sx, wq, sw, c, M, N, K };
  // The engine's choice with the model's scratch, timed beside the forced counts.
  const autos = kernels.map(([, tiles]) => qgemmI8SplitK(rt, { ...base, tiles, workspace: modelWs }));
  const ws = rt.createBuffer('workspace', 'ws', Math.max(...splits, ...autos) * M * N * 4);
  bufs.push(ws);
  for (const [i, [path, tiles]] of kernels.entries()) {
    const args = { ...base, tiles, workspace: ws };
    const auto = autos[i];
    const run = async (splitK: number) => {
      const g = qgemmI8Steps(rt, { ...args, splitK });
      rt.device.queue.writeBuffer(c, 0, new Float32Array(M * N).fill(NaN));
      rt.run(g.dispatches);
      return { g, bits: new Uint32Array(await rt.read(c, 0, M * N * 4)) };
    };
    const one = await run(1);
    let oneMs = NaN;
    for (const S of [...new Set([1, ...splits, auto])]) {
      let r: Awaited<ReturnType<typeof run>>;
      try {
        r = S === 1 ? one : await run(S);
      } catch (e) {
        rows.push({ gemms: names.join(','), M, N, K, path, S, auto, error: (e as Error).message });
        console.log(`${M}x${N}x${K} [${names.join(',')}] ${path} S=${S}: ERROR ${(e as Error).message}`);
        continue;
      }
      const mismatches = r.bits.reduce((n, b, i) => n + (b !== one.bits[i] ? 1 : 0), 0);
      const row: Record<string, unknown> = { gemms: names.join(','), M, N, K, path, S, parts: r.g.splitK, auto, mismatches };
      if (mismatches === 0) {
        const { ms, method } = await msPer(rt, r.g.dispatches, { inner: 5, warmup: 2, reps });
        if (S === 1) oneMs = ms;
        Object.assign(row, { ms, tops: (2 * M * N * K) / (ms * 1e9), speedup: oneMs / ms, method });
      }
      rows.push(row);
      const t = row.tops === undefined ? 'NOT TIMED' : `${(row.tops as number).toFixed(1)} TOP/s (${(row.ms as number).toFixed(4)} ms, ${(row.speedup as number).toFixed(2)}x)`;
      console.log(`${M}x${N}x${K} [${names.join(',')}] ${path} S=${S} (${r.g.splitK} slices${S === auto ? ', the engine\'s choice' : ''}): ${t}; ${mismatches ? `${mismatches} MISMATCHES vs one pass` : 'bits = one pass'}`);
    }
    console.log(`  the engine chooses S=${auto} for ${M}x${N} on ${path} with the model's scratch (${workspace} bytes)`);
  }
  for (const b of bufs) rt.mem.free(b);
}
if (a.json) writeFileSync(a.json, JSON.stringify(out, null, 1));
process.exit(0);
