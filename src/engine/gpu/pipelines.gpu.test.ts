// The pipeline cache builds each (code, entry point, constants) once and counts the time spent creating them
// (what tuneForRun takes out of the step timing that prices the tune's step check).
import { describe, expect, it } from 'vitest';
import { testRuntime } from '../../../tests/helpers/gpu';

describe('PipelineCache', () => {
  it('creates a pipeline once per code and constants, and counts the time spent only when it creates one', async () => {
    const rt = await testRuntime();
    const code = '@group(0) @binding(0) var<storage, read_write> x: array<f32>;\noverride V: f32 = 1.0;\n@compute @workgroup_size(1) fn main() { x[0] = V; }';
    const n0 = rt.pipelines.size;
    const t0 = rt.pipelines.createMs;
    const a = rt.pipelines.get({ label: 'cache-a', code, constants: { V: 2 } });
    const t1 = rt.pipelines.createMs;
    expect(t1).toBeGreaterThan(t0);
    expect(rt.pipelines.get({ label: 'cache-a again', code, constants: { V: 2 } })).toBe(a);
    expect(rt.pipelines.createMs).toBe(t1);
    expect(rt.pipelines.get({ label: 'cache-b', code, constants: { V: 3 } })).not.toBe(a);
    expect(rt.pipelines.size).toBe(n0 + 2);
  });
});
