/**
 * The verified all-reduce's GPU backend (verified-reduce.ts's Contributions) over a GradExchange:
 * this member's contribution is encoded on the GPU (one readback, cut into the buckets' wire bytes:
 * the same bytes as the JS backend's encodeInt8Chunk / fp32 of the same gradient; or bucket by
 * bucket behind backward, GradExchange.encodeRange: the same bytes again), the gathered
 * buckets are joined back into whole contributions with byte copies, screened from GPU figures
 * (GradExchange.stats: norms; GradExchange.gram: the dots, only when the cosine test can run), and
 * the kept ones averaged on the GPU straight into the model's gradient storage — no per-element
 * JavaScript for INT8. fp32: the norms and dots are fp64 on the host (the GPU has no fp64), and the
 * mean is fp32 on the GPU in rank order, where the JS backend sums in fp64: the data-parallel
 * fingerprint names the backend, so a group never mixes the two.
 */
import { AGOQ_BLOCK, type GradWire } from '../../engine/scheme/wire';
import type { GradExchange } from './grad-exchange';
import { wireBytes, wireChunk } from './wire';
import type { Contributions, OpenedContributions } from '../../peers/collectives/contributions';
import type { PeerId } from '../../peers/transport/transport';

export class GpuContributions implements Contributions<null> {
  readonly length: number;
  readonly mode: GradWire;
  /** The gathered contributions of the current call, whole (null: faulted or not a candidate). */
  private whole: (Uint8Array | null)[] = [];

  /** `streamed`: the buckets already being encoded behind backward (GradExchange.encodeRange), one per span. */
  constructor(private readonly ex: GradExchange, private readonly streamed: Promise<Uint8Array>[] | null = null) {
    this.length = ex.n;
    this.mode = ex.wire;
  }

  encode(spans: [number, number][]): Promise<Uint8Array>[] {
    if (this.streamed) {
      if (this.streamed.length !== spans.length) throw new Error(`GpuContributions: ${this.streamed.length} streamed buckets for ${spans.length} spans`);
      return this.streamed;
    }
    const bytes = this.ex.encode();
    return spans.map(([a, b]) => bytes.then((w) => wireChunk(w, this.length, this.mode, a, b)));
  }

  /** The buckets of one rank in one contribution's layout (INT8: every bucket's scales, then every bucket's codes). */
  private join(parts: Uint8Array[], spans: [number, number][]): Uint8Array {
    if (parts.length === 1) return parts[0];
    const out = new Uint8Array(wireBytes(this.length, this.mode));
    const codesAt = 4 * Math.ceil(this.length / AGOQ_BLOCK);
    parts.forEach((p, b) => {
      const [lo, hi] = spans[b];
      if (this.mode === 'fp32') return out.set(p, 4 * lo);
      const sb = 4 * Math.ceil((hi - lo) / AGOQ_BLOCK);
      out.set(p.subarray(0, sb), 4 * (lo / AGOQ_BLOCK));
      out.set(p.subarray(sb), codesAt + lo);
    });
    return out;
  }

  async open(pieces: Uint8Array[][], spans: [number, number][], cand: number[], members: readonly PeerId[], needDots: boolean): Promise<OpenedContributions> {
    if (this.mode === 'int8' && spans.some(([lo]) => lo % AGOQ_BLOCK !== 0)) throw new Error(`GpuContributions: buckets must start at multiples of ${AGOQ_BLOCK}`);
    const N = members.length;
    const faults: [number, string][] = [];
    this.whole = new Array<Uint8Array | null>(N).fill(null);
    for (const r of cand) {
      const bad = spans.findIndex(([lo, hi], b) => pieces[b][r].length !== wireBytes(hi - lo, this.mode));
      if (bad >= 0) {
        const [lo, hi] = spans[bad];
        faults.push([r, `${this.mode} chunk from ${members[r]}: ${pieces[bad][r].length} B, expected ${wireBytes(hi - lo, this.mode)}`]);
        continue;
      }
      this.whole[r] = this.join(pieces.map((p) => p[r]), spans);
    }
    const stats = await this.ex.stats(this.whole);
    const finite = new Array<boolean>(N).fill(false);
    const norm2 = new Array<number>(N).fill(NaN);
    stats.forEach((s, r) => {
      if (!s) return;
      // INT8: a problem is a malformed scale (a fault, as the JS decoder's); fp32: non-finite values (screened).
      if (s.problem && this.mode === 'int8') {
        faults.push([r, `${members[r]}: ${s.problem}`]);
        this.whole[r] = null;
        return;
      }
      finite[r] = s.finite;
      norm2[r] = s.norm2;
    });
    // The screen's cosine test runs on finite contributions only, and needs three of them.
    const live = this.whole.map((b, r) => (b && finite[r] ? b : null));
    const G = needDots && live.filter((b) => b).length >= 3 ? await this.ex.gram(live) : null;
    const dots = (set: number[]) => {
      if (!G) throw new Error('GpuContributions: dots asked for without the Gram matrix');
      const dot = set.map((j) => set.reduce((a, k) => a + G[j]![k], 0));
      return { dot, sum2: dot.reduce((a, d) => a + d, 0) };
    };
    return { faults, finite, norm2, dots };
  }

  /** The mean of the kept ranks, on the GPU, where the optimizer reads the gradient. */
  async reduce(kept: number[]): Promise<null> {
    await this.ex.reduce(this.whole.map((b, r) => (kept.includes(r) ? b : null)));
    return null;
  }
}
