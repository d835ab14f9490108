/**
 * DiLoCo's held-out check, its pure parts (src/parallel/diloco/held-out.ts): the verdict from the
 * figures, the held-out batches' steps (a function of the outer step only, never a training
 * step's rows), and the configuration's validation. The GPU side is insider-diloco-heldout.gpu.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { heldOutBatchStep } from '../../src/parallel/held-out';
import { DEFAULT_MAX_RISE, judgeHeldOut } from '../../src/parallel/diloco/held-out';
import { resolveDiloco } from '../../src/parallel/diloco/diloco';

const members = ['p0', 'p1', 'p2'];

describe('the held-out verdict', () => {
  it('leaves out a candidate that raises the held-out loss past the bound, or makes it non-finite; keeps the rest', () => {
    const after = new Map([[0, 3.0], [1, 3.05 * 1.049], [2, 3.05 * 1.051]]);
    const v = judgeHeldOut(members, [0, 1, 2], { before: 3.05, after }, 0.05);
    expect(v.kept).toEqual([0, 1]);
    expect(v.excluded.map((e) => [e.peer, e.fault, e.strike])).toEqual([['p2', false, false]]);
    expect(v.excluded[0].why).toMatch(/held-out loss 3\.205\d .*above 3\.2025/);
    const nan = judgeHeldOut(members, [0, 1, 2], { before: 3, after: new Map([[0, NaN], [1, Infinity], [2, 2.9]]) }, 0.05);
    expect(nan.kept).toEqual([2]);
    expect(nan.excluded.map((e) => e.peer)).toEqual(['p0', 'p1']);
  });

  it('judges each candidate on its own figure: one huge candidate changes nobody else\'s verdict', () => {
    const a = judgeHeldOut(members, [0, 1, 2], { before: 3, after: new Map([[0, 2.9], [1, 2.95], [2, 3.05]]) }, DEFAULT_MAX_RISE);
    const b = judgeHeldOut(members, [0, 1, 2], { before: 3, after: new Map([[0, 2.9], [1, 2.95], [2, 1e30]]) }, DEFAULT_MAX_RISE);
    expect(a.kept).toEqual([0, 1, 2]);
    expect(b.kept).toEqual([0, 1]);
    // A candidate not evaluated (none given for it) is not judged here.
    expect(judgeHeldOut(members, [0, 1], { before: 3, after: new Map([[1, 9]]) }, 0.05).kept).toEqual([0]);
  });

  it('held-out batches: one validation step per (outer step, batch), disjoint across outer steps, far above the evaluation\'s batches', () => {
    const steps = new Set<number>();
    for (let t = 0; t < 50; t++) for (let j = 0; j < 4; j++) steps.add(heldOutBatchStep(t, j, 4));
    expect(steps.size).toBe(200);
    expect(Math.min(...steps)).toBeGreaterThanOrEqual(2 ** 30);
    expect(heldOutBatchStep(7, 1, 4)).toBe(heldOutBatchStep(7, 1, 4));
  });

  it('configuration: on by default, null turns it off, a bad bound or batch count is refused', () => {
    const base = { innerSteps: 2, wire: 'int8' as const };
    expect(resolveDiloco(base).heldOut).toBe(DEFAULT_MAX_RISE);
    expect(resolveDiloco({ ...base, heldOut: null }).heldOut).toBeNull();
    expect(() => resolveDiloco({ ...base, heldOut: 0 })).toThrow(/held-out/);
    expect(() => resolveDiloco({ ...base, heldOut: Infinity })).toThrow(/held-out/);
    expect(() => resolveDiloco({ ...base, heldOutBatches: 0 })).toThrow(/held-out batches/);
  });
});
