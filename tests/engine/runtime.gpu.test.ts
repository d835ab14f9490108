import { describe, expect, it } from 'vitest';
import elementwise from '../../src/engine/kernels/elementwise/elementwise.wgsl?raw';
import { wgslErrors } from '../../src/engine/gpu/pipelines';
import { Uniforms } from '../../src/engine/gpu/runtime';
import { testRuntime } from '../helpers/gpu';

describe('runtime', () => {
  it('acquires a device, runs a kernel, accounts memory per category', async () => {
    const rt = await testRuntime();
    const n = 1000;
    const a = rt.upload('activations', 'a', new Float32Array(n).fill(2));
    const out = rt.upload('grads', 'out', new Float32Array(n).fill(1));
    const u = rt.uniform('axpy', new Uniforms().u32(n).f32(0.5));
    const d = rt.kernel({ label: 'axpy', code: elementwise, entryPoint: 'axpy', bindings: [a, out, u], workgroups: [Math.ceil(n / 256)] });
    rt.run([d]);
    const r = await rt.readF32(out, 0, n);
    expect(r[0]).toBe(2);
    expect(r[n - 1]).toBe(2);
    const mem = rt.mem.report();
    expect(mem.activations).toBeGreaterThanOrEqual(4000);
    expect(mem.grads).toBeGreaterThanOrEqual(4000);
    expect(mem.total).toBe(Object.entries(mem).filter(([k]) => k !== 'total').reduce((s, [, v]) => s + v, 0));
    rt.mem.free(a);
    rt.mem.free(out);
    rt.mem.free(u);
  });

  it('wgslErrors: line:column messages for bad WGSL (captured when quiet), none for good', async () => {
    const rt = await testRuntime();
    const good = '@compute @workgroup_size(1) fn main() {}';
    expect(await wgslErrors(rt.device, 'good', good, true)).toEqual([]);
    const bad = '@compute @workgroup_size(1) fn main() {\n  let x: u32 = 1.5;\n}';
    rt.device.pushErrorScope('validation');
    const errors = await wgslErrors(rt.device, 'bad', bad, true);
    expect(await rt.device.popErrorScope()).toBeNull(); // quiet: the module's error was captured inside
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatch(/^2:\d+ /);
  });
});
