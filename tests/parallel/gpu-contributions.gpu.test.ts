/**
 * The verified all-reduce's GPU backend (src/parallel/exchange/gpu-contributions.ts) against the JS backend on
 * the insider cases (tests/peers/adversary/insider-reduce.test.ts's): two honest members and a
 * third that sends −1000 × the mean, the sign-flipped mean, NaN, or honest noise. The honest
 * members reach the same decisions on either backend, and the GPU INT8 mean is the JS one bit for bit.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { encodeF32, encodeInt8Chunk } from '../../src/peers/collectives/chunk-codec';
import { DEFAULT_SCREEN } from '../../src/peers/collectives/screen';
import { GpuContributions } from '../../src/parallel/exchange/gpu-contributions';
import { PeerGroup } from '../../src/peers/collectives/group';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { type Contributions, reduceContributions, reduceVerified, type VerifiedResult } from '../../src/peers/collectives/verified-reduce';
import type { Runtime } from '../../src/engine/gpu/runtime';
import type { GradWire } from '../../src/engine/scheme/wire';
import { GradExchange } from '../../src/parallel/exchange/grad-exchange';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime, trackBuffers } from '../helpers/gpu';

const { up } = trackBuffers();
let rt: Runtime;
beforeAll(async () => {
  rt = await testRuntime();
});

const n = 3000;
const bucketFloats = 1024; // several buckets, the last one partial
const opts = { bucketFloats, screen: DEFAULT_SCREEN };

/** Honest gradients of one direction plus per-member noise (cosine ≈ 0.6 between members). */
function honest(seed: number): Float32Array[] {
  const base = new Rng(seed).normalArray(n, 1);
  return [1, 2].map((k) => {
    const noise = new Rng(seed * 10 + k).normalArray(n, 0.8);
    return base.map((v, i) => v + noise[i]);
  });
}

/** A member that sends fixed bytes, bucket by bucket, and takes no further part in the numbers. */
class Sender implements Contributions<null> {
  readonly length = n;
  constructor(readonly mode: GradWire, private readonly bytes: (a: number, b: number) => Uint8Array) {}
  encode(spans: [number, number][]): Promise<Uint8Array>[] {
    return spans.map(([a, b]) => Promise.resolve(this.bytes(a, b)));
  }
  open() {
    return Promise.resolve({ faults: [], finite: [true, true, true], norm2: [1, 1, 1], dots: (s: number[]) => ({ dot: s.map(() => 0), sum2: 0 }) });
  }
  reduce(): Promise<null> {
    return Promise.resolve(null);
  }
}

type Attack = (mean: Float32Array) => Float32Array | ((mode: GradWire, a: number, b: number) => Uint8Array);

/** The 3-member run; the honest members on `backend`; their results and (GPU) the mean left in their buffers. */
async function run(mode: GradWire, backend: 'js' | 'gpu', attack: Attack): Promise<{ res: VerifiedResult<Float32Array | null>[]; means: Float32Array[] }> {
  const gs = honest(5);
  const mean = gs[0].map((v, i) => (v + gs[1][i]) / 2);
  const evil = attack(mean);
  const bytes = typeof evil === 'function'
    ? (a: number, b: number) => evil(mode, a, b)
    : (a: number, b: number) => (mode === 'int8' ? encodeInt8Chunk(evil.subarray(a, b)) : encodeF32(evil.subarray(a, b)));
  const { transports } = LoopbackHub.group(3);
  const groups = transports.map((t) => new PeerGroup(t, { runId: 9, timeoutMs: 5000 }));
  const bufs = gs.map((x) => up(rt, x));
  const exs = bufs.map((b) => GradExchange.forBuffer(rt, mode, b, n));
  try {
    const runs = gs.map((x, r) => (backend === 'js'
      ? reduceVerified(groups[r], x, { ...opts, mode })
      : reduceContributions<Float32Array | null>(groups[r], new GpuContributions(exs[r]), opts)));
    const [res] = await Promise.all([Promise.all(runs), reduceContributions(groups[2], new Sender(mode, bytes), opts)]);
    const means = await Promise.all(res.map((r, i) => (r.out ? Promise.resolve(r.out) : rt.readF32(bufs[i], 0, n))));
    return { res, means };
  } finally {
    exs.forEach((e) => e.destroy());
  }
}

const same = (a: Float32Array, b: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

describe('the GPU backend screens as the JS backend does (3 members, default screen)', () => {
  const nanBytes = (mode: GradWire, a: number, b: number) => {
    if (mode === 'fp32') return encodeF32(new Float32Array(b - a).fill(NaN));
    const c = encodeInt8Chunk(new Float32Array(b - a).fill(1));
    new DataView(c.buffer).setFloat32(0, NaN, true); // a NaN scale: malformed
    return c;
  };
  const cases: [string, Attack, RegExp | null][] = [
    ['−1000 × the mean', (m) => m.map((v) => -1000 * v), /norm .* above 16 × p\d's/],
    ['sign-flipped, 5 × the mean', (m) => m.map((v) => -5 * v), /cosine -?\d\.\d+ with p\d's|undoes/],
    ['NaN', () => nanBytes, null],
    ['noise within the screen', (m) => new Rng(9).normalArray(n, 1.5).map((v, i) => v + m[i]), null],
  ];
  for (const mode of ['int8', 'fp32'] as const) {
    it.each(cases)(`${mode}: %s`, async (name, attack, why) => {
      const js = await run(mode, 'js', attack);
      const gpu = await run(mode, 'gpu', attack);
      for (let r = 0; r < 2; r++) {
        expect(gpu.res[r].kept).toEqual(js.res[r].kept);
        expect(gpu.res[r].excluded.map((e) => [e.peer, e.fault])).toEqual(js.res[r].excluded.map((e) => [e.peer, e.fault]));
        if (why) expect(gpu.res[r].excluded[0].why).toMatch(why);
        expect(same(gpu.means[r], gpu.means[0])).toBe(true);
        if (mode === 'int8') expect(same(gpu.means[r], js.means[r])).toBe(true);
        else for (let i = 0; i < n; i++) expect(Math.abs(gpu.means[r][i] - js.means[r][i])).toBeLessThanOrEqual(1e-6); // fp32 vs fp64 sums
      }
      const want = name.startsWith('noise') ? [0, 1, 2] : [0, 1];
      expect(gpu.res[0].kept).toEqual(want);
      if (name === 'NaN') expect(gpu.res[0].excluded.map((e) => [e.peer, e.fault])).toEqual([['p2', mode === 'int8']]);
    });
  }
});
