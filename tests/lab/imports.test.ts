// The lab notebook (bench/) builds on the product, never the reverse: nothing under src/ imports
// from bench/, and the engine imports nothing from src/lab (the measurement library the bench page
// and `npm run bench` share, which sits above the engine and the peers).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(__dirname, '../..');
const SPEC = /(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"]([^'"]+)['"]/g;

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    return e.isDirectory() ? sources(p) : /\.(ts|tsx)$/.test(e.name) ? [p] : [];
  });
}

/** Each relative import of the files under `dir`, resolved to a path relative to the project root. */
function imports(dir: string): { file: string; target: string }[] {
  return sources(path.join(ROOT, dir)).flatMap((file) =>
    [...readFileSync(file, 'utf8').matchAll(SPEC)].map((m) => m[1]).filter((s) => s.startsWith('.'))
      .map((s) => ({ file: path.relative(ROOT, file), target: path.relative(ROOT, path.resolve(path.dirname(file), s)) })));
}

const inside = (target: string, dir: string) => target === dir || target.startsWith(`${dir}${path.sep}`);

describe('dependency direction of the lab', () => {
  it('finds the imports it checks (the scan is not empty)', () => {
    expect(imports('src').some((i) => inside(i.target, 'src/lab'))).toBe(true);
  });

  it('nothing under src/ imports from bench/', () => {
    expect(imports('src').filter((i) => inside(i.target, 'bench'))).toEqual([]);
  });

  it('the engine imports nothing from src/lab', () => {
    expect(imports('src/engine').filter((i) => inside(i.target, 'src/lab'))).toEqual([]);
  });
});
