// ESLint flat config. Its main job is the architecture boundary: the engine (src/engine/**) runs in
// Node, in a worker and on a headless GPU box, so it imports nothing from React, zustand, recharts
// or the page layers (src/ui, src/state, src/worker), and touches no window/document.
// tests/engine/boundaries.test.ts runs this config on src/engine and fails on any violation.
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

const PAGE_LAYERS = ['ui', 'state', 'worker'];
const UI_PACKAGES = ['react', 'react-dom', 'zustand', 'recharts'];

/**
 * Relative imports that leave src/engine and land in a page layer. A file N directories below
 * src/engine needs exactly N+1 `../` to reach src/, so the pattern is built per depth: a plain
 * `(\.\./)+state` would also forbid an engine-internal module that happens to be called `state`.
 */
function boundaryBlocks(maxDepth = 6) {
  const layers = PAGE_LAYERS.join('|');
  const blocks = [];
  for (let depth = 0; depth <= maxDepth; depth++) {
    const dirs = Array.from({ length: depth }, () => '*').join('/');
    const up = '\\.\\./'.repeat(depth + 1);
    blocks.push({
      files: [`src/engine/${dirs ? `${dirs}/` : ''}*.{ts,tsx,js,mjs}`],
      rules: {
        'no-restricted-imports': [
          'error',
          {
            paths: UI_PACKAGES.map((name) => ({ name, message: 'The engine must not depend on UI libraries.' })),
            patterns: [
              {
                group: UI_PACKAGES.map((p) => `${p}/*`),
                message: 'The engine must not depend on UI libraries.',
              },
              {
                regex: `^(${up}(${layers})|(.*/)?src/(${layers}))(/|$)`,
                message: 'The engine must not import from src/ui, src/state or src/worker (dependencies point one way).',
              },
            ],
          },
        ],
      },
    });
  }
  return blocks;
}

export default defineConfig(
  { ignores: ['node_modules/**', 'dist/**', 'dist-node/**', '.cache/**', 'test-results/**', 'runs/**', 'public/**'] },
  {
    files: ['**/*.{ts,tsx}'],
    extends: [tseslint.configs.recommended],
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  ...boundaryBlocks(),
  {
    files: ['src/engine/**/*.{ts,tsx,js,mjs}'],
    rules: {
      'no-restricted-globals': [
        'error',
        { name: 'window', message: 'The engine runs outside the page; take what you need as a parameter.' },
        { name: 'document', message: 'The engine runs outside the page; it has no DOM.' },
      ],
    },
  },
);
