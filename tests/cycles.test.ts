/**
 * No import cycles in src/ or bench/: runs `npm run cycles` (dpdm over both trees, type-only imports
 * included, since a cycle through types is still two modules that cannot be understood apart), and
 * checks on a planted pair of modules that the same command fails on a cycle.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..');

function cycles(...extra: string[]): { status: number | null; out: string } {
  const r = spawnSync('npm', ['run', '--silent', 'cycles', ...(extra.length ? ['--', ...extra] : [])], { cwd: root, encoding: 'utf8' });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

describe('import cycles', () => {
  it('src/ and bench/ have none', () => {
    const r = cycles();
    expect(r.out).toMatch(/no circular dependency/);
    expect(r.status, r.out).toBe(0);
  }, 60_000);

  it('the check fails on a cycle, a type-only one included', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'cycle-'));
    try {
      writeFileSync(path.join(dir, 'a.ts'), "import type { B } from './b';\nexport type A = { b?: B };\n");
      writeFileSync(path.join(dir, 'b.ts'), "import type { A } from './a';\nexport type B = { a?: A };\n");
      const r = cycles(path.join(dir, '*.ts'));
      expect(r.status).toBe(1);
      expect(r.out).toMatch(/b\.ts -> .*a\.ts|a\.ts -> .*b\.ts/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
