import { describe, expect, it } from 'vitest';
import { schemeKeyProblems } from '../../src/cli/scheme-keys';

describe('schemeKeyProblems', () => {
  it('names a misspelt compute key in the layer default and in a layer override', () => {
    const raw = { name: 'x', layer: { compute: { foward: 'int8' } }, layers: { 1: { compute: { dw: 'int8', dw_blok: 64 } } } };
    const problems = schemeKeyProblems(raw, 2).join('\n');
    expect(problems).toMatch(/layer\.compute.*foward/);
    expect(problems).toMatch(/layers\["1"\]\.compute.*dw_blok/);
  });
  it('accepts every compute key', () => {
    const compute = { forward: 'int8', dx: 'int8', dw: 'fp32', dw_block: 32, grad_rounding: 'stochastic' };
    expect(schemeKeyProblems({ name: 'x', layer: { compute } }, 2)).toEqual([]);
  });
});
