import { describe, expect, it } from 'vitest';
import { checkSampling, samplingDistribution, sampleToken, type SamplingOptions } from '../../src/engine/model/sampling';
import { TextStream } from '../../src/engine/model/generate';
import { Rng } from '../../src/engine/util/rng';

/** Brute force: softmax at temperature, then keep ids by rank while within k and until the mass reaches p. */
function reference(logits: number[], o: SamplingOptions): number[] {
  const e = logits.map((l) => Math.exp(l / o.temperature));
  const z = e.reduce((a, b) => a + b, 0);
  const p = e.map((v) => v / z);
  const ranked = p.map((v, i) => [v, i] as const).sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  const kept: number[] = [];
  let mass = 0;
  for (const [v, i] of ranked) {
    if (o.topK > 0 && kept.length >= o.topK) break;
    if (kept.length > 0 && mass >= o.topP) break;
    kept.push(i);
    mass += v;
  }
  return p.map((v, i) => (kept.includes(i) ? v / mass : 0));
}

const logits = [Math.log(1), Math.log(2), Math.log(3), Math.log(4), Math.log(0.5)];

describe('sampling', () => {
  it('temperature, top-k and top-p give the reference distribution', () => {
    for (const o of [
      { temperature: 1, topK: 0, topP: 1 }, { temperature: 1, topK: 2, topP: 1 }, { temperature: 1, topK: 0, topP: 0.5 },
      { temperature: 0.5, topK: 3, topP: 0.9 }, { temperature: 2, topK: 1, topP: 1 }, { temperature: 1, topK: 0, topP: 0.01 },
    ]) {
      const got = Array.from(samplingDistribution(logits, o));
      const want = reference(logits, o);
      got.forEach((v, i) => expect(v, `${JSON.stringify(o)} id ${i}`).toBeCloseTo(want[i], 12));
    }
    // Ties keep the lower id; a vocabulary past the insertion path's 256 sorts instead, same result.
    const tied = [1, 2, 2, 0, 2];
    expect(Array.from(samplingDistribution(tied, { temperature: 1, topK: 2, topP: 1 })).map((v) => v > 0)).toEqual([false, true, true, false, false]);
    const wide = Array.from({ length: 1000 }, (_, i) => Math.sin(i) * 3);
    for (const o of [{ temperature: 1, topK: 300, topP: 1 }, { temperature: 0.7, topK: 20, topP: 0.8 }, { temperature: 1.3, topK: 0, topP: 0.6 }]) {
      const got = samplingDistribution(wide, o);
      const want = reference(wide, o);
      got.forEach((v, i) => expect(v, `${JSON.stringify(o)} id ${i}`).toBeCloseTo(want[i], 12));
    }
    // By hand: probabilities 1, 2, 3, 4, 0.5 over 10.5; top-2 keeps 3 and 4 → 3/7, 4/7.
    expect(Array.from(samplingDistribution(logits, { temperature: 1, topK: 2, topP: 1 })).map((v) => v * 7)).toEqual([0, 0, 3, 4, 0].map((v) => expect.closeTo(v, 10)));
  });

  it('draws follow the distribution, only from kept ids; a seed repeats; temperature 0 is greedy', () => {
    const o = { temperature: 0.7, topK: 3, topP: 0.95 };
    const want = samplingDistribution(logits, o);
    const rng = new Rng(11);
    const counts = new Array(logits.length).fill(0);
    const n = 20000;
    for (let i = 0; i < n; i++) counts[sampleToken(logits, o, rng)]++;
    counts.forEach((c, i) => {
      if (want[i] === 0) expect(c, `id ${i} is filtered out`).toBe(0);
      else expect(Math.abs(c / n - want[i]), `id ${i}`).toBeLessThan(0.015);
    });
    const draw = (seed: number) => { const r = new Rng(seed); return Array.from({ length: 50 }, () => sampleToken(logits, { temperature: 1, topK: 0, topP: 1 }, r)); };
    expect(draw(3)).toEqual(draw(3));
    expect(draw(3)).not.toEqual(draw(4));
    expect(sampleToken([0.1, 0.9, 0.9, -1], { temperature: 0, topK: 0, topP: 1 }, new Rng(0))).toBe(1);
  });

  it('refuses options out of range', () => {
    expect(() => checkSampling({ temperature: -1, topK: 0, topP: 1 })).toThrow(/temperature/);
    expect(() => checkSampling({ temperature: 1, topK: 1.5, topP: 1 })).toThrow(/top-k/);
    expect(() => checkSampling({ temperature: 1, topK: 0, topP: 0 })).toThrow(/top-p/);
  });

  it('TextStream holds back a character split across tokens', () => {
    const bytes = [[0x68], [0xc3], [0xa9], [0x21]]; // "h", first and second byte of "é", "!"
    const s = new TextStream((ids) => new TextDecoder().decode(new Uint8Array(ids.flatMap((i) => bytes[i]))));
    expect([0, 1, 2, 3].map((i) => s.push(i))).toEqual(['h', '', 'é', '!']);
    expect(s.flush()).toBe('');
  });
});
