import { describe, expect, it } from 'vitest';
import { tacoCompress, tacoDecompress } from '../../src/engine/kernels/taco';
import { tacoCompressRef, tacoDecompressRef, tacoPayload, tacoPayloadBytes, parseTacoPayload } from '../../src/engine/quant/taco';
import { Rng } from '../../src/engine/util/rng';
import { testRuntime } from '../helpers/gpu';

describe('scratch', () => {
  it('runs', async () => {
    const rt = await testRuntime();
    for (const sg of [false, true]) for (const G of [32, 128, 512]) for (const n of [1, 127, 129, 1000, 5000]) {
      const x = new Rng(n + G).normalArray(n, 0.01);
      const xb = rt.upload('activations', 'x', x);
      const pb = rt.createBuffer('comm', 'p', tacoPayloadBytes(n, G));
      const yb = rt.createBuffer('activations', 'y', n * 4);
      const d1 = tacoCompress(rt, { label: 'c', x: xb, payload: pb, n, G, subgroups: sg });
      const d2 = tacoDecompress(rt, { label: 'd', payload: pb, y: yb, n, G, subgroups: sg });
      rt.run([d1, d2]);
      const pay = new Uint8Array(await rt.read(pb, 0, tacoPayloadBytes(n, G)));
      const ref = tacoPayload(tacoCompressRef(x, G));
      let diff = 0;
      for (let i = 0; i < ref.length; i++) if (pay[i] !== ref[i]) diff++;
      const y = await rt.readF32(yb, 0, n);
      const yr = tacoDecompressRef(parseTacoPayload(pay, n, G), n, G);
      let dy = 0;
      for (let i = 0; i < n; i++) if (y[i] !== yr[i]) dy++;
      console.log(sg, G, n, 'payload diff bytes', diff, 'y diff', dy);
    }
    expect(1).toBe(1);
  });
});
