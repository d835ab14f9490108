import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { matmulWorkspaceBytes, parseChoice, shapeKey } from '../../src/engine/kernels/matmul/plan';
import { bundleForTests, ROOT } from '../helpers/bundle';

// bench/gemm-tune.ts is carried to the GPU machine for one device call: its --quick path on
// SwiftShader runs every phase that can run here (verification, timing, picks, JSON, the
// robustness-off device), so a slip in them fails here rather than there.
let dir: string;
const bundled = bundleForTests('bench/gemm-tune.ts');

function tune(...args: string[]) {
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

interface Timing { key: string; choice: string; ms: number; tflops: number; method: string; fullTiles: boolean }
interface Out {
  command: string; adapter: Record<string, string>; features: Record<string, boolean>; subgroupMatrixConfigs: unknown[];
  verification: { choice: string; ok: boolean; checks: { shape: string; ok: boolean }[] }[];
  timings: Timing[]; robustnessOff: Timing[]; skipped: string[];
  picks: { key: string; best: string; single: string; heuristic: string }[];
  tunedTable: Record<string, string>; tunedTableOnePass: Record<string, string>; rankedTable: Record<string, string[]>;
}

beforeAll(() => {
  dir = mkdtempSync(path.join(tmpdir(), 'gemm-tune-'));
});

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe('bench/gemm-tune.ts --quick', () => {
  it('verifies, times every candidate (split-K included) per shape, and writes the picks as tuned tables', () => {
    const file = path.join(dir, 'tune.json');
    const r = tune('--quick', '--cpu', '--variants', '32x32k16_4x4', '--stream-k', '3', '--json', file);
    expect(r.stderr.split('\n').filter((l) => l.startsWith('error:'))).toEqual([]);
    expect(r.status).toBe(0);
    expect(r.stdout).toContain('subgroup matrix: absent');
    const out = JSON.parse(readFileSync(file, 'utf8')) as Out;
    expect(out.adapter.architecture).toBe('swiftshader');
    expect(out.verification.map((v) => [v.choice, v.ok])).toEqual([['32x32k16_4x4', true]]);
    const checked = out.verification[0].checks.map((c) => c.shape).join(' | ');
    expect(checked).toMatch(/ full/); // the FULL_TILES path
    expect(checked).toMatch(/_sk4/); // split-K
    expect(checked).toMatch(/_st7/); // stream-K
    expect(out.skipped).toEqual([]);
    const keys = [...new Set(out.timings.map((t) => t.key))];
    expect(keys).toEqual(['64x64x64NN', '64x64x64NT', '128x32x32NT', '128x32x32NN', '32x32x128TN']);
    expect(out.timings.every((t) => t.ms > 0 && t.tflops > 0)).toBe(true);
    // The dW form has split-K candidates, and the one-pass table never holds one.
    expect(out.timings.some((t) => t.key === '32x32x128TN' && parseChoice(t.choice).splitK > 1)).toBe(true);
    // 64³ is four 32×32 tiles: stream-K over 3 workgroups shares them.
    expect(out.timings.some((t) => t.key === '64x64x64NN' && t.choice === '32x32k16_4x4_st3')).toBe(true);
    const shapeOf = (key: string) => {
      const [M, N, K] = key.slice(0, -2).split('x').map(Number);
      return { M, N, K, transA: key[key.length - 2] === 'T', transB: key[key.length - 1] === 'T' };
    };
    for (const p of out.picks) {
      const mine = out.timings.filter((t) => t.key === p.key);
      expect(mine.find((t) => t.choice === p.best)!.ms).toBe(Math.min(...mine.map((t) => t.ms)));
      expect(out.tunedTable[p.key]).toBe(p.best);
      expect(matmulWorkspaceBytes(shapeOf(p.key), out.tunedTableOnePass[p.key])).toBe(0);
      expect(r.stdout).toContain(p.best);
      // A ranked ladder starts at the best, needs fewer slices at each step and ends in one pass.
      const ladder = out.rankedTable[p.key];
      if (ladder) {
        expect(ladder[0]).toBe(p.best);
        const need = ladder.map((c) => matmulWorkspaceBytes(shapeOf(p.key), c));
        for (let i = 1; i < need.length; i++) expect(need[i]).toBeLessThan(need[i - 1]);
        expect(ladder[ladder.length - 1]).toBe(out.tunedTableOnePass[p.key]);
      } else {
        expect(matmulWorkspaceBytes(shapeOf(p.key), p.best)).toBe(0);
      }
    }
    expect(out.robustnessOff.length).toBeGreaterThan(0);
    expect(out.robustnessOff[0].key).toBe(shapeKey({ M: 64, N: 64, K: 64 }));
  });

  it('an unknown variant is a usage error', () => {
    const r = tune('--quick', '--cpu', '--variants', 'nope');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/error: --variants: 'nope' is unknown/);
    const w = tune('--quick', '--cpu', '--warmup-ms', 'soon');
    expect(w.status).toBe(2);
    expect(w.stderr).toMatch(/error: --warmup-ms/);
  });
});
