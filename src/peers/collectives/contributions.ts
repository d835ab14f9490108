/**
 * What holds the numbers of the verified all-reduce (verified-reduce.ts): the JS backend
 * (js-contributions.ts) or the GPU one (gpu-contributions.ts).
 */
import type { WireFormat } from '../../engine/scheme/wire';
import type { ScreenData } from './screen';
import type { PeerId } from '../transport/transport';

/** The gathered contributions, as the screen sees them; `faults`: malformed ones (rank, why). */
export interface OpenedContributions extends ScreenData {
  faults: [number, string][];
}

/**
 * What holds the numbers of one verified all-reduce, one call at a time: this member's
 * contribution cut into the buckets' wire bytes, the gathered buckets' screening figures, and the
 * mean of the kept ranks (R: where it goes).
 */
export interface Contributions<R> {
  /** Floats in the exchanged vector. */
  readonly length: number;
  readonly mode: WireFormat;
  /** This member's buckets in wire bytes, one promise per span, each settling as its bytes exist (any order). */
  encode(spans: [number, number][]): Promise<Uint8Array>[];
  /**
   * pieces[b][r]: bucket b of rank r; only the `cand` ranks are looked at. `needDots`: whether the
   * screen may ask for dots (a backend may then prepare them; without, it may refuse them).
   */
  open(pieces: Uint8Array[][], spans: [number, number][], cand: number[], members: readonly PeerId[], needDots: boolean): Promise<OpenedContributions>;
  /** The mean of the kept ranks (ascending), in rank order. */
  reduce(kept: number[]): Promise<R>;
}
