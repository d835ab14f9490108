/**
 * Attention tile tuning: every candidate tile of each pass (forward, dQ, dK/dV) that fits the device,
 * timed on the models' attention shapes (GPU timestamps, warmed until steady), next to the default
 * pick. The fastest per pass and head dim is what MEASURED_ATTENTION_TILES (attention.ts) holds for
 * a GPU model. Correctness of every tile is the attention tests' job (they force several).
 *
 *   node attn-tune.mjs [--shapes 16x512x12x64,64x256x6x64] [--json out.json]   (B x T x heads x D)
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime, type Dispatch } from '../src/engine/gpu/runtime';
import { timeDispatches } from '../src/engine/gpu/timer';
import {
  ATTENTION_CANDIDATES, attentionBackward, attentionForward, attentionTileProblem, attnTileName, attnTileOf, chooseAttentionTile,
  type AttentionPass, type AttnTile,
} from '../src/engine/kernels/attention';
import { Rng } from '../src/engine/util/rng';

const a = parseArgs({ options: { shapes: { type: 'string' }, json: { type: 'string' }, reps: { type: 'string' } } }).values;
const shapes = (a.shapes ?? '16x512x12x64,64x256x6x64').split(',').map((s) => s.split('x').map(Number));
const reps = Number(a.reps ?? 10);

const gpu = await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const rows: Record<string, unknown>[] = [];
const best: Record<string, { tile: AttnTile; ms: number; defaultMs: number }> = {};
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)}`);
for (const [B, T, nH, D] of shapes) {
  const n = B * T * nH * D;
  const rng = new Rng(n);
  const up = (label: string, len: number, scale = 1) => rt.upload('workspace', label, rng.normalArray(len, scale));
  const q = up('q', n); const k = up('k', n); const v = up('v', n); const dO = up('dO', n, 0.1);
  const o = rt.createBuffer('workspace', 'o', n * 4);
  const lse = rt.createBuffer('workspace', 'lse', B * nH * T * 4);
  const dq = rt.createBuffer('workspace', 'dq', n * 4);
  const dk = rt.createBuffer('workspace', 'dk', n * 4);
  const dv = rt.createBuffer('workspace', 'dv', n * 4);
  const shape = { B, T, nH, nKV: nH, D };
  rt.run(attentionForward(rt, { label: 'tune', ...shape, q, k, v, o, lse })); // o and lse for the backward
  const flops: Record<AttentionPass, number> = { fwd: 2, dq: 3, dkdv: 4 }; // causal-half matmuls per pass, ×B·nH·T²·D
  for (const pass of ['fwd', 'dq', 'dkdv'] as AttentionPass[]) {
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
  for (const b of [q, k, v, dO, o, lse, dq, dk, dv]) rt.mem.free(b);
}
for (const [key, b] of Object.entries(best)) console.log(`best ${key}: ${JSON.stringify(b.tile)} ${b.ms.toFixed(3)} ms (default ${b.defaultMs.toFixed(3)} ms)`);
if (a.json) writeFileSync(a.json, JSON.stringify({ date: new Date().toISOString(), adapter: gpu.adapterInfo, rows, best }, null, 1));
process.exit(0);
