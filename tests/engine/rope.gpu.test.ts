import { describe, expect, it } from 'vitest';
import { rope, uploadRopeTable } from '../../src/engine/kernels/rope/rope';
import { ropeRef } from '../../src/engine/kernels/rope/rope.ref';
import { Rng } from '../../src/engine/util/rng';
import { expectClose } from '../helpers/compare';
import { testRuntime } from '../helpers/gpu';

interface Case { B: number; T: number; H: number; D: number; theta: number }

async function check(c: Case, opts: { inverse?: boolean; inPlace?: boolean; tableT?: number }, seed: number) {
  const rt = await testRuntime();
  const n = c.B * c.T * c.H * c.D;
  const host = new Rng(seed).normalArray(n, 2);
  const x = rt.upload('activations', 'x', host);
  const y = opts.inPlace ? x : rt.createBuffer('activations', 'y', n * 4);
  const table = uploadRopeTable(rt, 'rope', opts.tableT ?? c.T, c.D, c.theta);
  const d = rope(rt, {
    label: 'rope', x, y, table, B: c.B, T: c.T, nHeads: c.H, D: c.D, inverse: opts.inverse, tableT: opts.tableT,
  });
  rt.run([d]);
  const got = await rt.readF32(y, 0, n);
  const want = ropeRef(host, c.B, c.T, c.H, c.D, c.theta, opts.inverse);
  expectClose(got, want, { atol: 1e-5, rtol: 1e-5, label: `rope ${JSON.stringify(c)} ${JSON.stringify(opts)}` });
  for (const b of new Set([x, y, table])) rt.mem.free(b);
  return got;
}

describe('rope GPU vs reference', () => {
  it('B2 T7 H3 D8 forward', () => check({ B: 2, T: 7, H: 3, D: 8, theta: 10000 }, {}, 1));
  it('B1 T65 H2 D64 forward', () => check({ B: 1, T: 65, H: 2, D: 64, theta: 500000 }, {}, 2));
  it('B2 T33 H4 D32 backward (inverse)', () => check({ B: 2, T: 33, H: 4, D: 32, theta: 10000 }, { inverse: true }, 3));
  it('T1 D10 in place', () => check({ B: 3, T: 1, H: 1, D: 10, theta: 10000 }, { inPlace: true }, 4));
  it('in place, inverse, table built for a longer max length', () =>
    check({ B: 2, T: 7, H: 2, D: 16, theta: 10000 }, { inPlace: true, inverse: true, tableT: 20 }, 5));

  it('inverse after forward restores x', async () => {
    const rt = await testRuntime();
    const [B, T, H, D] = [1, 9, 2, 8];
    const n = B * T * H * D;
    const host = new Rng(6).normalArray(n);
    const x = rt.upload('activations', 'x', host);
    const y = rt.createBuffer('activations', 'y', n * 4);
    const table = uploadRopeTable(rt, 'rope', T, D, 10000);
    rt.run([
      rope(rt, { label: 'f', x, y, table, B, T, nHeads: H, D }),
      rope(rt, { label: 'b', x: y, y, table, B, T, nHeads: H, D, inverse: true }),
    ]);
    expectClose(await rt.readF32(y, 0, n), host, { atol: 1e-5, rtol: 1e-5, label: 'roundtrip' });
    expect(rt.mem.report().workspace).toBeGreaterThanOrEqual(2 * T * (D / 2) * 4);
    for (const b of [x, y, table]) rt.mem.free(b);
  });
});
