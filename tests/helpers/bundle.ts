/**
 * One bundle of a Node entry point per test file: the CLI and bench tests spawn it many times, and
 * bundling (what scripts/run-node.mjs does on every run) would dominate them.
 */
import { rmSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll } from 'vitest';

export const ROOT = path.resolve(__dirname, '../..');

/**
 * Bundles `entry` (relative to the repository root) before the file's tests and removes the bundle
 * after them; returns the bundle's path (valid once the tests run). The bundle lives inside the repo
 * (.cache/ is git-ignored) so that node_modules resolves from it.
 */
export function bundleForTests(entry: string): () => string {
  const name = path.basename(entry, '.ts').replaceAll('_', '-');
  const file = path.join(ROOT, '.cache', 'node', `${name}-test-${process.pid}.mjs`);
  beforeAll(async () => {
    const { bundle } = (await import(path.join(ROOT, 'scripts/bundle-node.mjs'))) as { bundle: (e: string, o: string) => Promise<string> };
    await bundle(path.join(ROOT, entry), file);
  });
  afterAll(() => rmSync(file, { force: true }));
  return () => file;
}
