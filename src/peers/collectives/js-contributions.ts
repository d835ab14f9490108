/**
 * The verified all-reduce's JS backend (verified-reduce.ts): the contribution's buckets encoded on
 * the host (fp32 LE, AGoQ's INT8 codes and scales, DiLoCo's INT4), decoded per bucket; norms and
 * dots in fp64, the mean summed in rank order.
 */
import { decodeF32, decodeInt8Chunk, encodeF32, encodeInt8Chunk } from './chunk-codec';
import { decodeInt4Chunk, encodeInt4Chunk } from './int4-chunk';
import type { WireFormat } from '../../engine/scheme/wire';
import type { PeerId } from '../transport/transport';
import type { Contributions, OpenedContributions } from './contributions';

export class JsContributions implements Contributions<Float32Array> {
  readonly length: number;
  private pieces: Uint8Array[][] = [];
  private spans: [number, number][] = [];
  private members: readonly PeerId[] = [];

  constructor(private readonly x: Float32Array, readonly mode: WireFormat, private readonly block: number) {
    if (!Number.isInteger(block) || block < 1) throw new Error(`allReduceMean: bad block size ${block}`);
    for (let i = 0; i < x.length; i++) if (!Number.isFinite(x[i])) throw new Error(`allReduceMean: non-finite input at ${i}`);
    this.length = x.length;
  }

  encode(spans: [number, number][]): Promise<Uint8Array>[] {
    const { x } = this;
    const enc = (v: Float32Array) => (this.mode === 'int4' ? encodeInt4Chunk(v, this.block) : this.mode === 'int8' ? encodeInt8Chunk(v, this.block) : encodeF32(v));
    return spans.map(([a, b]) => Promise.resolve(enc(x.subarray(a, b))));
  }

  private dec(b: number, r: number): Float32Array {
    const [lo, hi] = this.spans[b];
    const p = this.pieces[b][r];
    const who = this.members[r];
    return this.mode === 'int4' ? decodeInt4Chunk(p, hi - lo, this.block, who) : this.mode === 'int8' ? decodeInt8Chunk(p, hi - lo, this.block, who) : decodeF32(p, hi - lo, who);
  }

  open(pieces: Uint8Array[][], spans: [number, number][], cand: number[], members: readonly PeerId[]): Promise<OpenedContributions> {
    Object.assign(this, { pieces, spans, members });
    const N = members.length;
    const faults: [number, string][] = [];
    const finite = new Array<boolean>(N).fill(true);
    const norm2 = new Array<number>(N).fill(0);
    let live = [...cand];
    for (let b = 0; b < spans.length; b++) {
      for (const r of [...live]) {
        let v: Float32Array;
        try {
          v = this.dec(b, r);
        } catch (e) {
          faults.push([r, (e as Error).message]);
          live = live.filter((q) => q !== r);
          continue;
        }
        let s = 0;
        for (let i = 0; i < v.length; i++) s += v[i] * v[i];
        if (!Number.isFinite(s)) finite[r] = false;
        else norm2[r] += s;
      }
    }
    const dots = (set: number[]) => {
      const dot = set.map(() => 0);
      let sum2 = 0;
      for (let b = 0; b < spans.length; b++) {
        const vs = set.map((r) => this.dec(b, r));
        const S = new Float64Array(spans[b][1] - spans[b][0]);
        for (const v of vs) for (let i = 0; i < S.length; i++) S[i] += v[i];
        for (let i = 0; i < S.length; i++) sum2 += S[i] * S[i];
        vs.forEach((v, j) => {
          let d = 0;
          for (let i = 0; i < S.length; i++) d += v[i] * S[i];
          dot[j] += d;
        });
      }
      return { dot, sum2 };
    };
    const gram = (set: number[]) => {
      const G = set.map(() => set.map(() => 0));
      for (let b = 0; b < spans.length; b++) {
        const vs = set.map((r) => this.dec(b, r));
        for (let i = 0; i < vs.length; i++) {
          for (let j = i; j < vs.length; j++) {
            let d = 0;
            const [x, y] = [vs[i], vs[j]];
            for (let k = 0; k < x.length; k++) d += x[k] * y[k];
            G[i][j] += d;
            if (j !== i) G[j][i] += d;
          }
        }
      }
      return G;
    };
    return Promise.resolve({ faults, finite, norm2, dots, gram });
  }

  reduce(kept: number[]): Promise<Float32Array> {
    const out = new Float32Array(this.length);
    for (let b = 0; b < this.spans.length; b++) {
      const [lo, hi] = this.spans[b];
      // The quantized formats (INT8, DiLoCo's INT4) are summed in fp32 (as AGoQ specifies), fp32 in fp64.
      const acc = this.mode !== 'fp32' ? new Float32Array(hi - lo) : new Float64Array(hi - lo);
      for (const r of kept) {
        const v = this.dec(b, r);
        for (let i = 0; i < acc.length; i++) acc[i] += v[i];
      }
      for (let i = 0; i < acc.length; i++) out[lo + i] = acc[i] / kept.length;
    }
    return Promise.resolve(out);
  }
}
