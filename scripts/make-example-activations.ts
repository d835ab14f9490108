// Writes public/examples/activations.npy: a seeded, LLM-like activation matrix for the codec CLI.
// 64 tokens × 384 channels: Gaussian bulk with per-channel and per-token scale spread (log-normal),
// four outlier channels ~20-40× larger with a mean offset (the "massive activation" pattern that
// makes per-tensor absmax scaling lose the bulk), and a few exact zeros.
// Run: node scripts/run-node.mjs scripts/make-example-activations.ts
import { writeFileSync } from 'node:fs';
import { writeNpy } from '../src/engine/io/npy';
import { Rng } from '../src/engine/util/rng';

const T = 64;
const C = 384;
const OUTLIERS: Record<number, number> = { 7: 24, 101: -31, 222: 18, 350: 40 };
const rng = new Rng(20240613);
const chan = Array.from({ length: C }, () => Math.exp(0.35 * rng.normal()));
const tok = Array.from({ length: T }, () => Math.exp(0.2 * rng.normal()));
const x = new Float32Array(T * C);
for (let t = 0; t < T; t++) {
  for (let c = 0; c < C; c++) {
    let v = 0.5 * chan[c] * tok[t] * rng.normal();
    if (c in OUTLIERS) v = OUTLIERS[c] * (1 + 0.15 * rng.normal()) * tok[t];
    if (rng.next() < 0.002) v = 0;
    x[t * C + c] = v;
  }
}
const out = process.argv[2] ?? 'public/examples/activations.npy';
writeFileSync(out, writeNpy(x, [T, C]));
console.log(`wrote ${out}: (${T}, ${C}) float32`);
