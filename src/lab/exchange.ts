/**
 * Host time of one member's gradient exchange per data-parallel step, the JS path against the GPU
 * one, without a network: the other members' contributions are fixed synthetic wire bytes, so what
 * is timed is the work one member does around the transport.
 *  - js:      gradientAccess read → encodeInt8Chunk per chunk → decode + fp32 sum of the N pieces of
 *             its chunk → re-encode → decode the N gathered chunks → write (allReduceMean's work).
 *  - gpu:     GradExchange encode → reduce of the N whole contributions (one shot).
 *  - gpu-2shot: encode → reduceChunk of its chunk → assign of the N gathered chunks.
 * Wall = from the start of the exchange to the GPU done with it; host = wall less the time spent
 * awaiting the GPU (buffer maps, queue done: what the JS thread does itself); cpu = the process's
 * CPU time (Dawn's threads too: on SwiftShader that is the GPU's work); gc = GC pauses meanwhile.
 * A step's backward is not included (the gradient is computed once). Node only (process.cpuUsage, GC entries).
 */
import { chunkBounds, decodeInt8Chunk, encodeInt8Chunk } from '../peers/collectives/allreduce';
import { gradientAccess } from '../parallel/dp/grads';
import type { Runtime } from '../engine/gpu/runtime';
import { median } from '../engine/gpu/timer';
import type { PresetName } from '../engine/model/config';
import type { Scheme } from '../engine/scheme/scheme';
import { wireChunk } from '../parallel/exchange/wire';
import { GradExchange } from '../parallel/exchange/grad-exchange';
import { defaultTrainOptions } from '../engine/train/options';
import { Trainer } from '../engine/train/trainer';
import { Rng } from '../engine/util/rng';
import { syntheticText } from './step';

export type ExchangePath = 'js' | 'gpu' | 'gpu-2shot';
export const EXCHANGE_PATHS: ExchangePath[] = ['js', 'gpu', 'gpu-2shot'];

export interface ExchangeBenchOptions {
  preset: PresetName;
  scheme: Scheme;
  members: number[];
  batch?: number;
  seq?: number;
  steps: number;
  warmup: number;
  paths?: ExchangePath[];
}

export interface ExchangeBenchRow {
  path: ExchangePath;
  members: number;
  /** Medians per step, ms. */
  hostMs: number;
  wallMs: number;
  cpuMs: number;
  gcMs: number;
  /** Floats in the exchange vector and wire bytes of one contribution. */
  n: number;
  wireBytes: number;
  direct: boolean;
}

/**
 * A clock of the time spent awaiting GPUBuffer.mapAsync (patched on the buffers' prototype, every
 * map of the process, until `restore`): Dawn in Node keeps the event loop busy while it waits, so
 * the event loop's own utilisation cannot tell waiting from working.
 */
function mapWaitClock(rt: Runtime): { ms(): number; restore(): void } {
  const probe = rt.device.createBuffer({ size: 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const proto = Object.getPrototypeOf(probe) as { mapAsync: GPUBuffer['mapAsync'] };
  probe.destroy();
  const orig = proto.mapAsync;
  let waited = 0;
  proto.mapAsync = async function (this: GPUBuffer, ...args: Parameters<GPUBuffer['mapAsync']>) {
    const t0 = performance.now();
    try {
      return await orig.apply(this, args);
    } finally {
      waited += performance.now() - t0;
    }
  };
  return { ms: () => waited, restore: () => void (proto.mapAsync = orig) };
}

/** The synthetic contribution of another member: INT8 wire bytes of a random gradient-sized vector. */
function otherContribution(n: number, seed: number): Uint8Array {
  return encodeInt8Chunk(new Rng(seed).normalArray(n, 1e-3));
}

export async function benchExchange(rt: Runtime, o: ExchangeBenchOptions, log: (s: string) => void = () => {}): Promise<ExchangeBenchRow[]> {
  const text = syntheticText(o.batch ?? 8, o.seq ?? 256);
  const t = await Trainer.create(rt, defaultTrainOptions(o.preset, { batch: o.batch, seq: o.seq, scheme: o.scheme, evalEvery: 0 }), text);
  const rows: ExchangeBenchRow[] = [];
  let gc = 0;
  const obs = new PerformanceObserver((list) => {
    for (const e of list.getEntries()) gc += e.duration;
  });
  obs.observe({ entryTypes: ['gc'] });
  const waits = mapWaitClock(rt);
  try {
    await t.computeGradients(t.batchAt(0));
    const access = gradientAccess(t.model);
    const ex = GradExchange.forModel(t.model, 'int8');
    const n = access.length;
    if (ex.n !== n) throw new Error(`exchange vectors differ: GPU ${ex.n}, JS ${n}`);
    const maxN = Math.max(...o.members);
    const others = Array.from({ length: maxN - 1 }, (_, i) => otherContribution(n, i + 1));
    for (const N of o.members) {
      const bounds = chunkBounds(n, N);
      const [lo, hi] = bounds[0];
      // What this member (rank 0) receives: the others' pieces of its chunk and their reduced chunks.
      const pieces = others.slice(0, N - 1).map((b) => encodeInt8Chunk(decodeInt8Chunk(b, n).subarray(lo, hi)));
      const gathered = bounds.map(([a, b], r) => encodeInt8Chunk(decodeInt8Chunk(others[r % others.length], n).subarray(a, b)));
      const paths: Record<ExchangePath, () => Promise<void>> = {
        js: async () => {
          const g = await access.read();
          const mine = bounds.map(([a, b]) => encodeInt8Chunk(g.subarray(a, b)));
          const acc = new Float32Array(hi - lo);
          for (const p of [mine[0], ...pieces]) {
            const v = decodeInt8Chunk(p, hi - lo);
            for (let i = 0; i < v.length; i++) acc[i] += v[i];
          }
          for (let i = 0; i < acc.length; i++) acc[i] /= N;
          const own = encodeInt8Chunk(acc);
          const out = new Float32Array(n);
          bounds.forEach(([a, b], r) => out.set(decodeInt8Chunk(r === 0 ? own : gathered[r], b - a), a));
          access.write(out);
        },
        gpu: async () => {
          const mine = await ex.encode();
          await ex.reduce([mine, ...others.slice(0, N - 1)]);
        },
        'gpu-2shot': async () => {
          const mine = await ex.encode();
          const own = await ex.reduceChunk([wireChunk(mine, n, 'int8', lo, hi), ...pieces], lo, hi);
          await ex.assign([own, ...gathered.slice(1)], bounds);
        },
      };
      for (const path of o.paths ?? EXCHANGE_PATHS) {
        const host: number[] = [];
        const wall: number[] = [];
        const cpu: number[] = [];
        const gcs: number[] = [];
        for (let i = 0; i < o.warmup + o.steps; i++) {
          await rt.sync();
          const gc0 = gc;
          const w0 = waits.ms();
          const c0 = process.cpuUsage();
          const t0 = performance.now();
          await paths[path]();
          const s0 = performance.now();
          await rt.sync();
          const t1 = performance.now();
          const c = process.cpuUsage(c0);
          // GC entries arrive after the pause; give the observer a turn before reading.
          await new Promise((r) => setImmediate(r));
          if (i < o.warmup) continue;
          wall.push(t1 - t0);
          host.push(t1 - t0 - (t1 - s0) - (waits.ms() - w0));
          cpu.push((c.user + c.system) / 1000);
          gcs.push(gc - gc0);
        }
        const row: ExchangeBenchRow = { path, members: N, hostMs: median(host), wallMs: median(wall), cpuMs: median(cpu), gcMs: median(gcs), n, wireBytes: ex.bytes, direct: ex.direct };
        log(`  ${o.preset} ${o.scheme.name} ${N} members ${path}: host ${row.hostMs.toFixed(1)} ms, wall ${row.wallMs.toFixed(1)} ms, cpu ${row.cpuMs.toFixed(1)} ms, gc ${row.gcMs.toFixed(1)} ms per step`);
        rows.push(row);
      }
    }
    ex.destroy();
  } finally {
    waits.restore();
    obs.disconnect();
    t.destroy();
  }
  return rows;
}
