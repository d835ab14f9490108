/**
 * The scheme's gradient wire format (grads.wire) and the engine's wire-byte formula: the cells the
 * data-parallel all-reduce carries map to its modes, every other cell is refused by the scheme
 * check, and the resolved plan says which all-reduce a run uses.
 */
import { describe, expect, it } from 'vitest';
import { PRESETS } from '../../src/engine/model/config';
import { resolvePlan } from '../../src/engine/plan/run-plan';
import { FP32, parseScheme, unsupportedFeatures } from '../../src/engine/scheme/scheme';
import { allReduceWireBytes, gradWireOf, INT8_WIRE } from '../../src/engine/scheme/wire';

describe('gradient wire format', () => {
  it('maps fp32 and the all-reduce INT8 cell to their modes, nothing else', () => {
    expect(gradWireOf(FP32)).toBe('fp32');
    expect(gradWireOf(INT8_WIRE)).toBe('int8');
    expect(gradWireOf({ ...INT8_WIRE, group: 128 })).toBeNull();
    expect(gradWireOf({ ...INT8_WIRE, rounding: 'stochastic' })).toBeNull();
    expect(gradWireOf({ ...INT8_WIRE, granularity: 'row' })).toBeNull();
    expect(gradWireOf({ ...INT8_WIRE, format: 'int4' })).toBeNull();
  });

  it('a scheme with the INT8 wire is supported and its plan names the all-reduce; another cell is refused with a reason', () => {
    const int8 = parseScheme({ name: 'w', grads: { wire: INT8_WIRE } });
    expect(unsupportedFeatures(int8)).toEqual([]);
    expect(resolvePlan(PRESETS.micro, 2, 16, { scheme: int8, dpMembers: 3 }).wire.dp).toEqual({ members: 3, format: 'int8' });
    expect(resolvePlan(PRESETS.micro, 2, 16).wire.dp).toEqual({ members: 1, format: 'fp32' });
    const odd = parseScheme({ name: 'w4', grads: { wire: { format: 'int4' } } });
    expect(unsupportedFeatures(odd).join(' ')).toMatch(/gradient wire format/);
    expect(resolvePlan(PRESETS.micro, 2, 16, { scheme: odd }).wire.dp.format).toBeNull();
  });

  it('INT8 sends about a quarter of fp32 (codes + a scale per 256, plus frame headers)', () => {
    const n = 1 << 20;
    const f = allReduceWireBytes(n, 2, 0, 'fp32');
    const q = allReduceWireBytes(n, 2, 0, 'int8');
    expect(q).toBeLessThan(f / 3.9);
    expect(q).toBeGreaterThan(f / 4);
  });
});
