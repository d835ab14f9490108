/**
 * Attention tile tuning: every candidate tile of each pass (forward, dQ, dK/dV) that fits the device,
 * timed on the models' attention shapes (GPU timestamps, warmed until steady), next to the default
 * pick. The fastest per pass and head dim is what MEASURED_ATTENTION_TILES (attention.ts) holds for
 * a GPU model. Correctness of every tile is the attention tests' job (they force several).
 *
 * Pass `ds`: the backward's two dq paths per layer. Recompute (dq pass + dK/dV pass) against stored
 * dS (dK/dV pass that stores dS + dq from it, attention-ds.ts), in a scratch of B·T·F fp32 as the
 * model's dF1 (so the same chunks); each stored-path variant is checked against the recompute
 * path's gradients before it is timed: every dq-from-dS tile with the default dK/dV tile, then every
 * dK/dV tile (DS variant) with the best of those.
 *
 *   node attn-tune.mjs [--shapes 16x512x12x64,64x256x6x64] [--passes fwd,dq,dkdv,ds] [--ff 2560] [--json out.json] [--record rec.json]
 *   (shapes B x T x heads x D [x KV heads]; --ff: the MLP width F that sizes the dS scratch)
 */
import { writeFileSync } from 'node:fs';
import { commandLine, gpuOf, writeRecord } from './record';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime, type Dispatch } from '../src/engine/gpu/runtime';
import { timeDispatches } from '../src/engine/gpu/timer';
import {
  ATTENTION_CANDIDATES, attentionBackward, attentionBackwardWorkspaceBytes, attentionDqPlan, attentionForward, attentionTileProblem,
  attnTileName, attnTileOf, chooseAttentionTile, type AttentionPass, type AttnTile,
} from '../src/engine/kernels/attention/attention';
import { chooseDqDsTile, DQDS_CANDIDATES, dqDsTileName, dqDsTileProblem, type DqDsTile } from '../src/engine/kernels/attention/ds';
import { Rng } from '../src/engine/util/rng';

const a = parseArgs({
  options: { shapes: { type: 'string' }, json: { type: 'string' }, record: { type: 'string' }, reps: { type: 'string' }, passes: { type: 'string' }, ff: { type: 'string' } },
}).values;
const shapes = (a.shapes ?? '16x512x12x64,64x256x6x64').split(',').map((s) => s.split('x').map(Number));
const reps = Number(a.reps ?? 10);
const passes = new Set((a.passes ?? 'fwd,dq,dkdv,ds').split(','));
const ff = Number(a.ff ?? 2560);

const gpu = await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const rows: Record<string, unknown>[] = [];
const best: Record<string, { tile: AttnTile; ms: number; defaultMs: number }> = {};
const dqPaths: Record<string, unknown>[] = [];
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)}`);
for (const [B, T, nH, D, kvHeads] of shapes) {
  const nKV = kvHeads ?? nH;
  const n = B * T * nH * D;
  const nk = B * T * nKV * D;
  const rng = new Rng(n);
  const up = (label: string, len: number, scale = 1) => rt.upload('workspace', label, rng.normalArray(len, scale));
  const q = up('q', n); const k = up('k', nk); const v = up('v', nk); const dO = up('dO', n, 0.1);
  const o = rt.createBuffer('workspace', 'o', n * 4);
  const lse = rt.createBuffer('workspace', 'lse', B * nH * T * 4);
  const dq = rt.createBuffer('workspace', 'dq', n * 4);
  const dk = rt.createBuffer('workspace', 'dk', nk * 4);
  const dv = rt.createBuffer('workspace', 'dv', nk * 4);
  const shape = { B, T, nH, nKV, D };
  rt.run(attentionForward(rt, { label: 'tune', ...shape, q, k, v, o, lse })); // o and lse for the backward
  const flops: Record<AttentionPass, number> = { fwd: 2, dq: 3, dkdv: 4 }; // causal-half matmuls per pass, ×B·nH·T²·D
  for (const pass of (['fwd', 'dq', 'dkdv'] as AttentionPass[]).filter((p) => passes.has(p))) {
    const def = chooseAttentionTile(rt, pass, D);
    let defaultMs = NaN;
    for (const entry of ATTENTION_CANDIDATES[pass]) {
      const tile = attnTileOf(entry);
      if (attentionTileProblem(rt, pass, tile, D)) continue;
      let ds: Dispatch[];
      if (pass === 'fwd') ds = attentionForward(rt, { label: 'tune', ...shape, q, k, v, o, lse, tile });
      else {
        const all = attentionBackward(rt, { label: 'tune', ...shape, q, k, v, o, lse, dO, dq, dk, dv, tiles: { [pass]: tile } });
        rt.run(all.slice(0, 1)); // Di, which the dQ and dK/dV passes read
        ds = [all[pass === 'dq' ? 1 : 2]];
      }
      const t = await timeDispatches(rt, ds, { warmup: 2, reps, warmupMs: 200 });
      const tflops = (flops[pass] * B * nH * T * T * D) / (t.medianMs * 1e9);
      const isDefault = attnTileName(tile) === attnTileName(def);
      if (isDefault) defaultMs = t.medianMs;
      rows.push({ B, T, nH, D, pass, tile, ms: t.medianMs, tflops, method: t.method, isDefault });
      console.log(`${B}x${T}x${nH}x${D} ${pass} ${attnTileName(tile)}${isDefault ? ' (default)' : ''}: ${t.medianMs.toFixed(3)} ms, ${tflops.toFixed(1)} TFLOP/s`);
      const key = `${B}x${T}x${nH}x${D}/${pass}`;
      if (!best[key] || t.medianMs < best[key].ms) best[key] = { tile, ms: t.medianMs, defaultMs: NaN };
    }
    best[`${B}x${T}x${nH}x${D}/${pass}`].defaultMs = defaultMs;
  }
  if (passes.has('ds')) dqPaths.push(await compareDqPaths(shape, { q, k, v, o, lse, dO, dq, dk, dv }, n, nk));
  for (const b of [q, k, v, dO, o, lse, dq, dk, dv]) rt.mem.free(b);
}
for (const [key, b] of Object.entries(best)) console.log(`best ${key}: ${JSON.stringify(b.tile)} ${b.ms.toFixed(3)} ms (default ${b.defaultMs.toFixed(3)} ms)`);
if (a.json) writeFileSync(a.json, JSON.stringify({ date: new Date().toISOString(), adapter: gpu.adapterInfo, rows, best, dqPaths }, null, 1));
// --record: the compact record a doc cites (bench/record.ts): the best tile per pass and the per-layer dq paths.
if (a.record) writeRecord(a.record, { command: commandLine('attn-tune'), gpu: gpuOf(gpu.adapterInfo), baseline: null, figures: {
  best: Object.fromEntries(Object.entries(best).map(([k, b]) => [k, { tile: b.tile, ms: b.ms, defaultMs: b.defaultMs }])),
  dqPaths: dqPaths.map(({ shape, ff: f, chunks, diMs, recompute, best: bestDs, layer }) => ({ shape, ff: f, chunks, diMs, recompute, best: bestDs, layer })),
} });
process.exit(0);

type Bufs = Record<'q' | 'k' | 'v' | 'o' | 'lse' | 'dO' | 'dq' | 'dk' | 'dv', GPUBuffer>;

/** Worst |got − want| over max |want| of one gradient, and how many elements differ at all. */
function diff(got: Float32Array, want: Float32Array): { rel: number; differ: number } {
  let worst = 0;
  let scale = 0;
  let differ = 0;
  for (let i = 0; i < want.length; i++) {
    const e = Math.abs(got[i] - want[i]);
    if (!(e <= worst)) worst = e; // NaN sticks
    if (!Object.is(got[i], want[i])) differ++;
    scale = Math.max(scale, Math.abs(want[i]));
  }
  return { rel: worst / (scale || 1), differ };
}

/** The recompute and stored-dS backward of one shape, per layer (Di included in both totals). */
async function compareDqPaths(shape: { B: number; T: number; nH: number; nKV: number; D: number }, b: Bufs, n: number, nk: number) {
  const { B, T, nH, nKV, D } = shape;
  const tag = `${B}x${T}x${nH}x${D}${nKV !== nH ? `kv${nKV}` : ''}`;
  const ws = rt.createBuffer('workspace', 'di', attentionBackwardWorkspaceBytes(B, T, nH));
  const scratch = rt.createBuffer('workspace', 'dsScratch', B * T * ff * 4);
  const base = { label: 'tune', ...shape, ...b, workspace: ws };
  const time = async (ds: Dispatch[]) => (await timeDispatches(rt, ds, { warmup: 2, reps, warmupMs: 200 })).medianMs;
  const read = async () => [await rt.readF32(b.dq, 0, n), await rt.readF32(b.dk, 0, nk), await rt.readF32(b.dv, 0, nk)];
  const old = attentionBackward(rt, { ...base, dqPath: 'recompute' });
  rt.run(old);
  const want = await read();
  const diMs = await time(old.slice(0, 1));
  const recompute = { dqMs: await time([old[1]]), dkdvMs: await time([old[2]]), ms: await time(old.slice(1)) };
  const plan = attentionDqPlan(rt, { ...base, dsScratch: scratch });
  console.log(`${tag} dq paths: Di ${diMs.toFixed(3)} ms; recompute dq ${recompute.dqMs.toFixed(3)} + dkdv ${recompute.dkdvMs.toFixed(3)} = ${recompute.ms.toFixed(3)} ms`
    + ` (default dq ${attnTileName(chooseAttentionTile(rt, 'dq', D))}, dkdv ${attnTileName(chooseAttentionTile(rt, 'dkdv', D))});`
    + ` stored dS in ${plan.chunks.length} chunk(s) of a ${B * T * ff * 4 / 2 ** 20} MiB scratch${plan.why ? ` (${plan.why})` : ''}`);
  const variants: Record<string, unknown>[] = [];
  const stored = async (dqDs: DqDsTile, dkdv?: AttnTile) => {
    const name = `dqDs ${dqDsTileName(dqDs)} dkdv ${attnTileName(dkdv ?? chooseAttentionTile(rt, 'dkdv', D))}`;
    const all = attentionBackward(rt, { ...base, dsScratch: scratch, dqPath: 'stored', tiles: { dqDs, dkdv } });
    for (const [buf, len] of [[b.dq, n], [b.dk, nk], [b.dv, nk]] as const) rt.write(buf, new Float32Array(len).fill(NaN));
    rt.run(all);
    const [gq, gk, gv] = await read();
    const check = { dq: diff(gq, want[0]), dk: diff(gk, want[1]), dv: diff(gv, want[2]) };
    const ok = check.dq.rel <= 1e-4 && check.dk.rel <= 1e-5 && check.dv.rel <= 1e-5;
    const checkText = `dq rel ${check.dq.rel.toExponential(1)}, dk/dv ${check.dk.differ + check.dv.differ} elements not bit-identical`;
    if (!ok) {
      console.log(`${tag} stored ${name}: WRONG vs recompute (${checkText}), not timed`);
      variants.push({ dqDs, dkdv, check, ok });
      return null;
    }
    const r = {
      dqDs, dkdv, check, ok,
      dkdvMs: await time(all.filter((d) => d.label.endsWith('.attnBwdDkDvDs'))),
      dqMs: await time(all.filter((d) => d.label.endsWith('.attnDqDs'))),
      ms: await time(all.slice(1)),
    };
    variants.push(r);
    console.log(`${tag} stored ${name}: dkdv+dS ${r.dkdvMs.toFixed(3)} + dq ${r.dqMs.toFixed(3)} = ${r.ms.toFixed(3)} ms (recompute ${recompute.ms.toFixed(3)}; ${checkText})`);
    return r;
  };
  let bestDs: { dqDs: DqDsTile; dkdv?: AttnTile; ms: number; dqMs: number } | null = null;
  if (plan.path === 'stored') {
    for (const t of DQDS_CANDIDATES.filter((c) => !dqDsTileProblem(rt, c, D))) {
      const r = await stored(t);
      if (r && (!bestDs || r.dqMs < bestDs.dqMs)) bestDs = r;
    }
    const defaultDkdv = attnTileName(chooseAttentionTile(rt, 'dkdv', D));
    for (const e of ATTENTION_CANDIDATES.dkdv) {
      const tile = attnTileOf(e);
      if (!bestDs || attnTileName(tile) === defaultDkdv || attentionTileProblem(rt, 'dkdv', tile, D)) continue;
      const r = await stored(bestDs.dqDs, tile);
      if (r && r.ms < bestDs.ms) bestDs = r;
    }
  }
  const layer = { recomputeMs: diMs + recompute.ms, storedMs: bestDs ? diMs + bestDs.ms : null };
  console.log(`${tag} per layer backward: recompute ${layer.recomputeMs.toFixed(3)} ms, stored dS ${layer.storedMs?.toFixed(3) ?? '-'} ms`
    + (bestDs ? ` (dqDs ${dqDsTileName(bestDs.dqDs)}, dkdv ${attnTileName(bestDs.dkdv ?? chooseAttentionTile(rt, 'dkdv', D))}; default dqDs ${dqDsTileName(chooseDqDsTile(rt, D))})` : ''));
  rt.mem.free(ws);
  rt.mem.free(scratch);
  return { shape, ff, chunks: plan.chunks.length, why: plan.why, diMs, recompute, best: bestDs, layer, variants };
}
