import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';

// bench/gemm-dispatches.ts is carried to the GPU machine for one device call: here, on SwiftShader at
// a small shape, every kind of choice runs (one pass, split-K with its reduction, stream-K with its
// summing pass), each checked against the first one's output before its dispatches are timed.
const bundled = bundleForTests('bench/gemm-dispatches.ts');

describe('bench/gemm-dispatches.ts on SwiftShader', () => {
  it('times each dispatch of a one-pass, a split-K and a stream-K choice, outputs equal to the first\'s', () => {
    const r = spawnSync(process.execPath, [bundled(), '--cpu', '--shape', '96x64x40', '--choices', '32x32k16_4x4,32x32k16_4x4_sk2,32x32k16_4x4_st5', '--reps', '2'],
      { cwd: ROOT, encoding: 'utf8', timeout: 240_000 });
    expect(r.stderr).not.toMatch(/Error/);
    expect(r.status).toBe(0);
    const lines = r.stdout.split('\n').filter((l) => l.includes(' ms, '));
    // One dispatch, then the GEMM and its second pass: "t" or "t + t = total".
    const ms = String.raw`\d+\.\d{4}`;
    expect(lines[0]).toMatch(new RegExp(`^32x32k16_4x4: ${ms} = ${ms} ms`));
    expect(lines[1]).toMatch(new RegExp(`^32x32k16_4x4_sk2: ${ms} \\+ ${ms} = ${ms} ms`));
    expect(lines[2]).toMatch(new RegExp(`^32x32k16_4x4_st5: ${ms} \\+ ${ms} = ${ms} ms`));
    for (const l of lines) expect(Number(/largest difference from \S+ (\S+)$/.exec(l)?.[1]), l).toBeLessThan(1e-5);
  }, 300_000);

  it('refuses a malformed shape with its usage line', () => {
    const r = spawnSync(process.execPath, [bundled(), '--cpu', '--shape', '96x64', '--choices', '32x32k16_4x4'], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/^usage: node gemm-dispatches\.mjs --shape MxNxK/);
  }, 120_000);
});
