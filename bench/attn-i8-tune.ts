/**
 * Tile tuning for the INT8-score attention kernels (kernels/attention-i8.ts): every forward tile and
 * every streamed dK/dV tile that fits the device, timed on a model's attention shape (GPU
 * timestamps), each checked against the default tile's outputs first (other tiles sum in another
 * order: within 1e-5 relative). The fastest per kernel is what MEASURED_ATTENTION_TILES' `fwdI8` /
 * `dkdvI8` / `dkdvDp8` (INT8 dP too) entries hold for a GPU model.
 *
 *   node attn-i8-tune.mjs [--shape 16x512x12x64] [--ff 2560] [--reps 10] [--kernels fwd,dkdv,dkdvDp8] [--default-only] [--json out.json] [--record rec.json]
 *   (--default-only: time each kernel's default tile only, and for the backward also all its dispatches)
 */
import { writeFileSync } from 'node:fs';
import { commandLine, gpuOf, writeRecord } from './record';
import { parseArgs } from 'node:util';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { Runtime, type Dispatch } from '../src/engine/gpu/runtime';
import { timeDispatches } from '../src/engine/gpu/timer';
import { ATTENTION_CANDIDATES, attentionBackwardWorkspaceBytes, attnTileName, attnTileOf, type AttnTile } from '../src/engine/kernels/attention/attention';
import {
  attentionBackwardI8, attentionForwardI8, attentionI8DkdvTileProblem, attentionI8FwdTileProblem, chooseAttentionI8DkdvTile,
  chooseAttentionI8Tile, headCodesLayout, quantizeHeadsI8,
} from '../src/engine/kernels/attention/i8';
import { Rng } from '../src/engine/util/rng';
import { relErr } from '../src/engine/tune/tuner';

const a = parseArgs({ options: { shape: { type: 'string' }, json: { type: 'string' }, record: { type: 'string' }, reps: { type: 'string' }, ff: { type: 'string' }, kernels: { type: 'string' }, 'default-only': { type: 'boolean' } } }).values;
const [B, T, nH, D] = (a.shape ?? '16x512x12x64').split('x').map(Number);
const nKV = nH;
const reps = Number(a.reps ?? 10);
const ff = Number(a.ff ?? 2560);
const gpu = await acquireNodeGpu({ dawnFlags: ['disable-dawn-features=timestamp_quantization'] });
const rt = new Runtime(gpu);
const n = B * T * nH * D;
const rng = new Rng(n);
const up = (len: number, scale = 1) => rt.upload('workspace', 'tune', rng.normalArray(len, scale));
const [q, k, v, dO] = [up(n), up(n), up(n), up(n, 0.1)];
const buf = (bytes: number) => rt.createBuffer('workspace', 'tune', bytes);
const [qc, kc, oc, vc] = [0, 0, 0, 0].map(() => buf(headCodesLayout(n / D, D).bytes));
const [o, lse, dq, dk, dv] = [buf(n * 4), buf(B * nH * T * 4), buf(n * 4), buf(n * 4), buf(n * 4)];
const ws = buf(attentionBackwardWorkspaceBytes(B, T, nH));
const dsScratch = buf(B * T * ff * 4);
const shape = { B, T, nH, nKV, D };
rt.run([...quantizeHeadsI8(rt, 'q', q, n / D, D, qc), ...quantizeHeadsI8(rt, 'k', k, n / D, D, kc),
  ...quantizeHeadsI8(rt, 'dO', dO, n / D, D, oc), ...quantizeHeadsI8(rt, 'v', v, n / D, D, vc)]);
const codes = { qc, kc };
const time = async (ds: Dispatch[]) => (await timeDispatches(rt, ds, { warmup: 2, reps, warmupMs: 200 })).medianMs;

const rel = relErr;

const rows: Record<string, unknown>[] = [];
const best: Record<string, { tile: AttnTile; ms: number; defaultMs: number }> = {};
const defaultMs: Record<string, number> = {};
console.log(`adapter ${JSON.stringify(gpu.adapterInfo)}; ${B}x${T}x${nH}x${D}`);
const kernels = (a.kernels ?? 'fwd,dkdv,dkdvDp8').split(',');
for (const kernel of (['fwd', 'dkdv', 'dkdvDp8'] as const).filter((k) => kernels.includes(k))) {
  const int8Dp = kernel === 'dkdvDp8';
  const def = kernel === 'fwd' ? chooseAttentionI8Tile(rt, D) : chooseAttentionI8DkdvTile(rt, D, int8Dp);
  const dp = int8Dp ? { oc, vc } : undefined;
  const run = (tile: AttnTile) => kernel === 'fwd'
    ? attentionForwardI8(rt, { label: 'tune', ...shape, ...codes, v, o, lse, tile })
    : attentionBackwardI8(rt, { label: 'tune', ...shape, ...codes, dp, q, k, v, o, lse, dO, dq, dk, dv, workspace: ws, dsScratch, tile });
  const outputs = async () => (kernel === 'fwd' ? [await rt.readF32(o, 0, n)] : [await rt.readF32(dk, 0, n), await rt.readF32(dv, 0, n)]);
  rt.run(attentionForwardI8(rt, { label: 'tune', ...shape, ...codes, v, o, lse })); // the backward's o and lse
  rt.run(run(def));
  const want = await outputs();
  for (const tile of [def, ...(a['default-only'] ? [] : ATTENTION_CANDIDATES[kernel === 'fwd' ? 'fwd' : 'dkdv'].map(attnTileOf))]) {
    const problem = kernel === 'fwd' ? attentionI8FwdTileProblem(rt, tile, D) : attentionI8DkdvTileProblem(rt, tile, D, int8Dp);
    if (problem || (tile !== def && attnTileName(tile) === attnTileName(def))) continue;
    const ds = run(tile);
    rt.run(ds);
    const err = Math.max(...(await outputs()).map((g, i) => rel(g, want[i])));
    if (kernel === 'fwd') rt.run(attentionForwardI8(rt, { label: 'tune', ...shape, ...codes, v, o, lse }));
    if (!(err <= 1e-5)) {
      console.log(`${kernel} ${attnTileName(tile)}: WRONG (rel ${err}), not timed`);
      continue;
    }
    // The dK/dV kernel alone: the backward's dispatches are Di, then per dS chunk dK/dV and dq.
    const ms = await time(kernel === 'fwd' ? ds : ds.filter((d) => d.label.includes('attnBwdDkDvDsI8')));
    const isDefault = tile === def;
    // The whole backward (Di, and per chunk dK/dV and dq) where only the default runs.
    const allMs = kernel !== 'fwd' && a['default-only'] ? await time(ds) : undefined;
    rows.push({ kernel, tile, ms, err, isDefault, allMs, dispatches: ds.length });
    console.log(`${kernel} ${attnTileName(tile)}${isDefault ? ' (default)' : ''}: ${ms.toFixed(3)} ms (rel ${err.toExponential(1)})`
      + (allMs !== undefined ? `; whole backward ${allMs.toFixed(3)} ms in ${ds.length} dispatches` : ''));
    if (isDefault) defaultMs[kernel] = ms;
    if (!best[kernel] || ms < best[kernel].ms) best[kernel] = { tile, ms, defaultMs: defaultMs[kernel] };
  }
}
for (const [key, b] of Object.entries(best)) console.log(`best ${key}: ${JSON.stringify(b.tile)} ${b.ms.toFixed(3)} ms (default ${b.defaultMs.toFixed(3)} ms)`);
if (a.json) writeFileSync(a.json, JSON.stringify({ date: new Date().toISOString(), adapter: gpu.adapterInfo, shape, rows, best }, null, 1));
// --record: the compact record a doc cites (bench/record.ts): the best tile per kernel and each default tile's times.
if (a.record) writeRecord(a.record, { command: commandLine('attn-i8-tune'), gpu: gpuOf(gpu.adapterInfo), baseline: null, figures: {
  shape, best, defaults: rows.filter((r) => r.isDefault).map((r) => ({ kernel: r.kernel, ms: r.ms, wholeBackwardMs: r.allMs })),
} });
process.exit(0);
