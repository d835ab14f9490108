// The mesh-scaling simulation (bench/mesh-scaling.ts) on small groups and a short vector: the
// bytes each member sends are the wire formula's, times are measured, a size past its deadline
// is stopped and the larger ones skipped.
import { describe, expect, it } from 'vitest';
import { allReduceWireBytes } from '../../src/peers/collectives/allreduce';
import { benchMesh } from '../../bench/mesh-sim';

describe('benchMesh', () => {
  it('2, 4 and 16 members: bytes per member equal allReduceWireBytes, times positive', async () => {
    const floats = 3000;
    const seen: number[] = [];
    const r = await benchMesh({ sizes: [2, 4, 16], floats, wire: 'int8', link: { bytesPerSecond: 20e6, latencyMs: 2 }, deadlineMs: 20_000, onRow: (row) => seen.push(row.members) });
    expect(seen).toEqual([2, 4, 16]);
    for (const row of r.rows) {
      const n = row.members;
      expect(row.status).toBe('ok');
      expect(row.links).toBe(n * (n - 1));
      expect(row.formulaBytes).toBe(allReduceWireBytes(floats, n, 0, 'int8'));
      expect(row.bytesSentMin).toBe(row.formulaBytes);
      expect(row.bytesSentMax).toBe(row.formulaBytes);
      expect(row.fp32Bytes).toBe(allReduceWireBytes(floats, n, 0, 'fp32'));
      expect(row.notices).toBe(0);
      expect(row.wallMs).toBeGreaterThan(0);
      expect(row.firstMs).toBeLessThanOrEqual(row.wallMs!);
      expect(row.memberCryptoMs).toBeGreaterThan(0);
      expect(row.memberCodecMs).toBeGreaterThan(0);
      expect(row.separateMs).toBeGreaterThan(row.uplinkMs + 4);
    }
  }, 30_000);

  it('fp32 on the wire sends its formula too', async () => {
    const r = await benchMesh({ sizes: [3], floats: 500, wire: 'fp32', link: { bytesPerSecond: 20e6 }, deadlineMs: 20_000 });
    expect(r.rows[0].bytesSentMax).toBe(allReduceWireBytes(500, 3, 0, 'fp32'));
    expect(r.rows[0].fp32Bytes).toBe(r.rows[0].formulaBytes);
  });

  it('a size past its deadline is reported as timed out and the larger ones are skipped', async () => {
    const r = await benchMesh({ sizes: [4, 8], floats: 100, wire: 'int8', link: { bytesPerSecond: 20e6, latencyMs: 100 }, deadlineMs: 120 });
    expect(r.rows.map((x) => x.status)).toEqual(['timed-out', 'skipped']);
    expect(r.rows[0].reason).toMatch(/not done after 120 ms \(0 of 4 members finished\)/);
    expect(r.rows[1].reason).toMatch(/a smaller group \(4\) did not finish/);
    expect(r.rows[1].wallMs).toBeUndefined();
  });

  it('refuses a group of one and a bad length', async () => {
    await expect(benchMesh({ sizes: [1], floats: 10, wire: 'int8', link: { bytesPerSecond: 1e6 }, deadlineMs: 1000 })).rejects.toThrow(/group size 1/);
    await expect(benchMesh({ sizes: [2], floats: 0, wire: 'int8', link: { bytesPerSecond: 1e6 }, deadlineMs: 1000 })).rejects.toThrow(/floats 0/);
  });
});
