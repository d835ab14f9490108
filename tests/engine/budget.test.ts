import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { allocateBits, BIT_CHOICES, type BudgetEntry, type Bits, noiseError, storedBytes } from '../../src/engine/scheme/budget';

const KINDS = ['norm_input', 'qkv_input', 'attn_qkv', 'swiglu', 'down_input'];

const entryArb: fc.Arbitrary<BudgetEntry> = fc.record({
  layer: fc.integer({ min: 0, max: 11 }),
  kind: fc.constantFrom(...KINDS),
  elements: fc.integer({ min: 0, max: 200_000 }),
  rowLength: fc.constantFrom(64, 96, 768),
  amax: fc.option(fc.double({ min: 1e-3, max: 100, noNaN: true }), { nil: undefined }),
  weight: fc.option(fc.double({ min: 0.1, max: 10, noNaN: true }), { nil: undefined }),
  // Mostly free entries, one in five pinned.
  pinned: fc.oneof({ arbitrary: fc.constant(undefined), weight: 4 }, { arbitrary: fc.constantFrom<Bits>(4, 8, 16, 32), weight: 1 }),
});
/** A budget position in [0, 1] between the minimum and the all-32 bytes (uniform, not edge-biased). */
const fraction = fc.integer({ min: 0, max: 1_000_000 }).map((k) => k / 1_000_000);
const choicesArb = fc.option(fc.subarray([...BIT_CHOICES] as Bits[], { minLength: 1 }), { nil: undefined });

/**
 * Σ bytes at each entry's cheapest and dearest allowed choice (pins as pinned). Not "at the lowest
 * bits" and "at 32 bits": for a tiny tensor the group scale makes 8 bits dearer than 32 (1 element:
 * 1 + 4 B against 4 B), and 32 may not be allowed at all.
 */
function extremes(layers: BudgetEntry[], choices: Bits[] = [...BIT_CHOICES], group = 128) {
  const at = (e: BudgetEntry) => (e.pinned !== undefined ? [e.pinned] : choices).map((b) => storedBytes(e.elements, b, group));
  const min = layers.reduce((s, e) => s + Math.min(...at(e)), 0);
  const max = layers.reduce((s, e) => s + Math.max(...at(e)), 0);
  return { min, max };
}

describe('allocateBits (AGoQ budget)', () => {
  it('models bytes and error as the brief states', () => {
    expect(storedBytes(1000, 4, 128)).toBe(500 + 4 * 8);
    expect(storedBytes(1001, 8, 128)).toBe(1001 + 4 * 8);
    expect(storedBytes(1001, 16)).toBe(2002);
    expect(storedBytes(1001, 32)).toBe(4004);
    expect(noiseError(12, 4, 7)).toBeCloseTo(1); // s = 7/7 = 1 → 12·1/12
    expect(noiseError(12, 8, 127)).toBeCloseTo(1);
    expect(noiseError(12, 16, 256)).toBeCloseTo(1);
    expect(noiseError(12, 32, 1)).toBe(0);
  });

  it('respects the budget and reports consistent bytes and error', () => {
    fc.assert(
      fc.property(fc.array(entryArb, { minLength: 1, maxLength: 12 }), fraction, choicesArb, (layers, t, choices) => {
        const { min, max } = extremes(layers, choices);
        const staticBytes = 4096;
        const budgetBytes = Math.floor(staticBytes + min + t * (max - min));
        const r = allocateBits({ layers, budgetBytes, staticBytes, choices });
        expect(r.feasible).toBe(true);
        expect(r.bytes).toBeLessThanOrEqual(budgetBytes);
        expect(r.savedBytes).toBe(layers.reduce((s, e, i) => s + storedBytes(e.elements, r.bits[i]), 0));
        expect(r.bytes).toBe(staticBytes + r.savedBytes);
        const err = layers.reduce((s, e, i) => s + (e.weight ?? 1) * noiseError(e.elements, r.bits[i], e.amax ?? 1), 0);
        expect(r.errorBound).toBeCloseTo(err, 10);
        layers.forEach((e, i) => {
          if (e.pinned !== undefined) expect(r.bits[i]).toBe(e.pinned);
          else expect(choices ?? BIT_CHOICES).toContain(r.bits[i]);
        });
      }),
      {
        numRuns: 300,
        // Found by CI (seed -1905959527): one 1-element tensor allowed only 8 bits, where the group scale
        // makes the cheapest choice dearer than 32 bits would be.
        examples: [[[{ layer: 0, kind: 'norm_input', elements: 1, rowLength: 64, amax: undefined, weight: undefined, pinned: undefined }], 0.000001, [8]]],
      },
    );
  });

  it('is monotone: more budget never gives a larger error', () => {
    fc.assert(
      fc.property(
        fc.array(entryArb, { minLength: 1, maxLength: 10 }),
        fraction,
        fraction,
        choicesArb,
        (layers, t1, t2, choices) => {
          const { min, max } = extremes(layers, choices);
          const [a, b] = [t1, t2].sort((x, y) => x - y).map((t) => Math.floor(min + t * (max - min)));
          const ra = allocateBits({ layers, budgetBytes: a, staticBytes: 0, choices });
          const rb = allocateBits({ layers, budgetBytes: b, staticBytes: 0, choices });
          expect(rb.errorBound).toBeLessThanOrEqual(ra.errorBound * (1 + 1e-12));
        },
      ),
      { numRuns: 400 },
    );
    // A sweep on a fixed model-like instance, one byte at a time near the interesting region.
    const layers: BudgetEntry[] = Array.from({ length: 8 }, (_, l) => ({ layer: l, kind: KINDS[l % 5], elements: 1000 + 333 * l, rowLength: 64, amax: 1 + l }));
    const { min, max } = extremes(layers);
    let prev = Infinity;
    const budgets = Array.from({ length: Math.floor((max - min) / 97) + 1 }, (_, k) => min + 97 * k).concat(max);
    for (const b of budgets) {
      const e = allocateBits({ layers, budgetBytes: b, staticBytes: 0 }).errorBound;
      expect(e).toBeLessThanOrEqual(prev);
      prev = e;
    }
    expect(prev).toBe(0);
  });

  it('leaves no next upgrade that would still fit (the greedy does not stop early)', () => {
    fc.assert(
      fc.property(fc.array(entryArb, { minLength: 1, maxLength: 10 }), fraction, (layers, t) => {
        const { min, max } = extremes(layers);
        const budgetBytes = Math.floor(min + t * (max - min));
        const r = allocateBits({ layers, budgetBytes, staticBytes: 0 });
        const left = budgetBytes - r.bytes;
        layers.forEach((e, i) => {
          const next = BIT_CHOICES.find((b) => b > r.bits[i]);
          if (e.pinned !== undefined || next === undefined || e.elements === 0 || e.weight === 0) return;
          expect(storedBytes(e.elements, next) - storedBytes(e.elements, r.bits[i])).toBeGreaterThan(left);
        });
      }),
      { numRuns: 200 },
    );
  });

  it('upgrades the tensor whose error drops most per byte first', () => {
    const layers: BudgetEntry[] = [
      { layer: 0, kind: 'swiglu', elements: 4096, rowLength: 64, amax: 1 },
      { layer: 1, kind: 'swiglu', elements: 4096, rowLength: 64, amax: 4 },
      { layer: 1, kind: 'attn_qkv', elements: 4096, rowLength: 64, amax: 100, pinned: 16 },
    ];
    const at4 = storedBytes(4096, 4);
    const up8 = storedBytes(4096, 8) - at4;
    const r = allocateBits({ layers, budgetBytes: 2 * at4 + 2 * 4096 + up8, staticBytes: 0 });
    expect(r.bits).toEqual([4, 8, 16]);
    expect(r.feasible).toBe(true);
    expect(r.explanation).toMatch(/1×4-bit, 1×8-bit, 1×16-bit \(1 pinned\)/);
  });

  it('goes all-32 when the budget is large, pins excepted', () => {
    const layers: BudgetEntry[] = [
      { layer: 0, kind: 'norm_input', elements: 777, rowLength: 7 },
      { layer: 0, kind: 'attn_qkv', elements: 1000, rowLength: 10, pinned: 8 },
      { layer: 1, kind: 'swiglu', elements: 1, rowLength: 1, amax: 0.01 },
    ];
    const r = allocateBits({ layers, budgetBytes: 1e9, staticBytes: 1e6 });
    expect(r.bits).toEqual([32, 8, 32]);
    expect(r.errorBound).toBeCloseTo(noiseError(1000, 8), 15);
    expect(r.bytes).toBe(1e6 + 4 * 778 + storedBytes(1000, 8));
  });

  it('says clearly when the budget is infeasible', () => {
    const layers: BudgetEntry[] = [
      { layer: 0, kind: 'norm_input', elements: 1000, rowLength: 100 },
      { layer: 0, kind: 'attn_qkv', elements: 1000, rowLength: 100, pinned: 32 },
    ];
    const need = 5000 + storedBytes(1000, 4) + 4000;
    const r = allocateBits({ layers, budgetBytes: need - 1, staticBytes: 5000 });
    expect(r.feasible).toBe(false);
    expect(r.bits).toEqual([4, 32]);
    expect(r.bytes).toBe(need);
    expect(r.explanation).toContain(`at least ${need} B`);
    expect(r.explanation).toContain('short by 1 B');
    const ok = allocateBits({ layers, budgetBytes: need, staticBytes: 5000 });
    expect(ok.feasible).toBe(true);
    expect(ok.bits).toEqual([4, 32]);
  });

  it('rejects invalid input', () => {
    const layers: BudgetEntry[] = [{ layer: 0, kind: 'x', elements: 10, rowLength: 10 }];
    expect(() => allocateBits({ layers, budgetBytes: 100, staticBytes: 0, choices: [] })).toThrow(/choices/);
    expect(() => allocateBits({ layers, budgetBytes: 100, staticBytes: 0, choices: [5 as Bits] })).toThrow(/choices/);
    expect(() => allocateBits({ layers, budgetBytes: NaN, staticBytes: 0 })).toThrow(/budgetBytes/);
    expect(() => allocateBits({ layers: [{ ...layers[0], elements: 1.5 }], budgetBytes: 100, staticBytes: 0 })).toThrow(/elements/);
  });
});
