// ESLint flat config. Its main job is the architecture boundary: the engine (src/engine/**) runs in
// Node, in a worker and on a headless GPU box, and dependencies point one way (engine ← peers ←
// state ← ui), so it imports nothing from React, zustand, recharts, the layers above it (src/peers,
// src/state, src/ui, src/worker, src/cli, src/bench-page, src/lab, src/server) or the bench/ lab, and touches
// no window/document. tests/engine/boundaries.test.ts runs this config on src/engine and fails on
// any violation; import cycles are `npm run cycles` (tests/cycles.test.ts).
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

const OUTER_LAYERS = ['peers', 'state', 'ui', 'worker', 'cli', 'bench-page', 'lab', 'server'];
const UI_PACKAGES = ['react', 'react-dom', 'zustand', 'recharts'];

/**
 * Relative imports that leave src/engine and land in an outer layer. A file N directories below
 * src/engine needs exactly N+1 `../` to reach src/ (N+2 to reach bench/), so the pattern is built
 * per depth: a plain `(\.\./)+state` would also forbid an engine-internal module called `state`.
 */
function boundaryBlocks(maxDepth = 6) {
  const layers = OUTER_LAYERS.join('|');
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
                message: `The engine must not import from src/{${OUTER_LAYERS.join(',')}} (dependencies point one way).`,
              },
              {
                regex: `^${up}\\.\\./bench(/|$)`,
                message: 'The engine must not import from bench/ (the lab depends on the engine, never the reverse).',
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
