import { describe, expect, it } from 'vitest';
import { lrAt } from '../../src/engine/optim/schedule';

describe('lrAt', () => {
  const s = { lr: 1e-3, min_lr: 1e-4, warmup_steps: 10, total_steps: 110 };

  it('linear warmup reaches lr at the last warmup step', () => {
    expect(lrAt(0, s)).toBeCloseTo(1e-4, 15);
    expect(lrAt(4, s)).toBeCloseTo(5e-4, 15);
    expect(lrAt(9, s)).toBeCloseTo(1e-3, 15);
  });

  it('cosine from lr to min_lr between warmup and total_steps, then flat', () => {
    expect(lrAt(10, s)).toBe(1e-3);
    expect(lrAt(60, s)).toBeCloseTo(5.5e-4, 15); // half way: mean of lr and min_lr
    expect(lrAt(35, s)).toBeCloseTo(1e-4 + 0.5 * (1 + Math.cos(Math.PI / 4)) * 9e-4, 15);
    expect(lrAt(110, s)).toBeCloseTo(1e-4, 15);
    expect(lrAt(500, s)).toBeCloseTo(1e-4, 15);
    for (let k = 10; k < 110; k++) expect(lrAt(k + 1, s)).toBeLessThanOrEqual(lrAt(k, s));
  });

  it('degenerate schedules', () => {
    expect(lrAt(0, { lr: 2, min_lr: 2, warmup_steps: 0, total_steps: 0 })).toBe(2);
    expect(lrAt(0, { lr: 1, min_lr: 0, warmup_steps: 0, total_steps: 1 })).toBe(1);
    expect(lrAt(1, { lr: 1, min_lr: 0, warmup_steps: 0, total_steps: 1 })).toBeCloseTo(0, 15);
    expect(() => lrAt(-1, s)).toThrow(/non-negative integer/);
  });

  it('matches the Python formula of tools/torch_replay.py (values computed there)', () => {
    // cd tools && python3 -c "import torch_replay as t; print([t.lr_at(k, 6e-4, 6e-5, 3, 20) for k in (0, 2, 3, 7, 19, 20)])"
    const py = [0.00019999999999999998, 0.0006, 0.0006, 0.0005295324076495779, 6.459726308534652e-05, 6e-5];
    const js = [0, 2, 3, 7, 19, 20].map((k) => lrAt(k, { lr: 6e-4, min_lr: 6e-5, warmup_steps: 3, total_steps: 20 }));
    js.forEach((v, i) => expect(v).toBeCloseTo(py[i], 18));
  });
});
