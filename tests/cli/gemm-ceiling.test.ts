import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';

// bench/gemm-ceiling.ts is carried to the GPU machine for one device call: on SwiftShader at a
// micro size it runs every part that can run here (the probe GEMMs checked bit for bit against the
// engine's, the engine's WGSL reordered or storing its prefetched tile in another k step, an extra
// variant, the synthetic kernels, the occupancy sweep), so a slip in them fails here rather than
// there.
const bundled = bundleForTests('bench/gemm-ceiling.ts');

describe('bench/gemm-ceiling.ts on SwiftShader', () => {
  it('its probe GEMMs, the reordered engine WGSL and an extra variant compute the engine\'s bits; every kernel is timed', () => {
    const r = spawnSync(process.execPath, [bundled(), '--cpu', '--n', '128', '--rounds', '1',
      '--modes', 'lds:eng,fma', '--probes', 'engine:eng:fn+zero+ovr,shifted:rq:pipe+decl', '--engine-orders', 'loop,rq', '--put-k', '3',
      '--variants', '128x128k8_8x8', '--occupancy', '--sms', '1', '--wmax', '2'], { cwd: ROOT, encoding: 'utf8', timeout: 240_000 });
    expect(r.stderr).not.toMatch(/Error/);
    expect(r.status).toBe(0);
    const out = r.stdout;
    const esc = (name: string) => name.replace(/\+/g, '\\+');
    // 128³: 16384 outputs, the same FMAs in the same order per output as the engine's kernel.
    for (const name of ['probe engine eng +fn +zero +ovr', 'probe shifted rq pipe +decl', 'engine loop', 'engine rq', 'engine put 3', 'gemm 128x128k8_8x8']) {
      expect(out, name).toMatch(new RegExp(`^${esc(name)}: 0 of 16384 outputs differ`, 'm'));
    }
    const swept = ['gemm 128x128k8_8x16', 'gemm 128x128k8_8x8', 'probe engine eng +fn +zero +ovr', 'probe shifted rq pipe +decl', 'lds eng', 'fma rq'];
    for (const name of [...swept, 'engine rq', 'engine put 3']) expect(out, name).toMatch(new RegExp(`^${esc(name)}\\s+\\d+\\.\\d+ ms`, 'm'));
    // The occupancy sweep covers the variants, the probes and the synthetic kernels (not the reordered engine WGSL).
    for (const name of swept) expect(out, `occupancy ${name}`).toMatch(new RegExp(`^occupancy ${esc(name)}\\s+w=1 \\d+\\.\\d+ ms  w=2 \\d+\\.\\d+ ms$`, 'm'));
  }, 300_000);

  it('refuses an unknown probe flag, mode or order with a clear message', () => {
    for (const args of [['--probes', 'engine:eng:nope'], ['--modes', 'lds:xy'], ['--engine-orders', 'zz'], ['--put-k', '9']]) {
      const r = spawnSync(process.execPath, [bundled(), '--cpu', '--n', '128', ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
      expect(r.status, args.join(' ')).not.toBe(0);
      expect(r.stderr, args.join(' ')).toMatch(/--(probes|modes|engine-orders): bad|--put-k: k steps/);
    }
  }, 300_000);
});
