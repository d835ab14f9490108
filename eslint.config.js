// ESLint flat config. Its main job is the architecture boundary: every top-level folder of src/ is a
// layer, and LAYERS below says which other layers and which UI packages each may import and whether it
// may touch window/document; everything it does not list is an error, one rule entry per forbidden
// edge, named in its message. Dependencies point one way: engine ← peers ← parallel ← state ← ui, with
// worker, cli, server, lab and bench-page as thin adapters; nothing in src/ imports the bench/ tuners.
// tests/boundaries.test.ts runs this config on the tree and proves, from the same table, that every
// forbidden edge is reported and every allowed one passes; import cycles are `npm run cycles`.
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

export const UI_PACKAGES = ['react', 'react-dom', 'zustand', 'recharts'];

/**
 * The layer table: one entry per folder of src/. `imports`: the other src/ layers it may import;
 * `packages`: the UI packages it may import; `dom`: whether it may use window/document (the rest run
 * in Node, in a worker or on a headless GPU box). The tightest set the tree satisfies, in layer order.
 */
export const LAYERS = {
  engine: { imports: [], packages: [], dom: false },
  peers: { imports: ['engine'], packages: [], dom: false },
  parallel: { imports: ['engine', 'peers'], packages: [], dom: false },
  // The page's training adapter: runs a run off the main thread, getting its trainer from parallel's factory.
  worker: { imports: ['engine', 'parallel'], packages: [], dom: false },
  state: { imports: ['engine', 'peers', 'parallel', 'worker'], packages: ['zustand'], dom: true },
  // The view reaches parallel training only through state.
  ui: { imports: ['engine', 'peers', 'state', 'worker'], packages: UI_PACKAGES, dom: true },
  // The bench page's suites.
  lab: { imports: ['engine', 'peers', 'parallel'], packages: [], dom: false },
  'bench-page': { imports: ['engine', 'lab', 'ui'], packages: UI_PACKAGES, dom: true },
  cli: { imports: ['engine', 'peers', 'parallel', 'state', 'lab'], packages: [], dom: false },
  // The page server and its headless peers; shares the CLI's option helpers.
  server: { imports: ['peers', 'cli'], packages: [], dom: false },
};

/** Deepest folder below a layer that the generated blocks cover; a deeper file is an error itself. */
export const MAX_DEPTH = 6;

// `[/]` rather than `\/`: the same source is used as an esquery regex, where a bare `/` ends it.
const esc = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const up = (n) => '\\.\\.[/]'.repeat(n);

/**
 * One forbidden edge: its message and the regex of the import specifiers that cross it, seen from a
 * file `depth` folders below src/<from>. Such a file needs exactly depth+1 `../` to reach src/ (depth+2
 * for the repo root), so the pattern is built per depth: a plain `(\.\./)+state` would also catch a
 * module called `state` inside a layer. A path that climbs out and back in through `src/` is caught too.
 */
export function forbiddenEdges(from, depth) {
  const rule = LAYERS[from];
  const edges = [];
  for (const to of Object.keys(LAYERS)) {
    if (to === from || rule.imports.includes(to)) continue;
    edges.push({
      regex: `^(${up(depth + 1)}${esc(to)}|(.*[/])?src[/]${esc(to)})([/]|$)`,
      message: `Edge src/${from} → src/${to} is forbidden: ${
        rule.imports.length ? `src/${from} may import only ${rule.imports.map((l) => `src/${l}`).join(', ')}` : `src/${from} imports no other layer`
      } (LAYERS in eslint.config.js; dependencies point one way).`,
    });
  }
  edges.push({
    regex: `^${up(depth + 2)}bench([/]|$)`,
    message: `Edge src/${from} → bench/ is forbidden: the bench/ tuners depend on src, never the reverse.`,
  });
  for (const pkg of UI_PACKAGES) {
    if (rule.packages.includes(pkg)) continue;
    edges.push({
      regex: `^${esc(pkg)}([/]|$)`,
      message: `Edge src/${from} → ${pkg} is forbidden: only ${Object.keys(LAYERS)
        .filter((l) => LAYERS[l].packages.includes(pkg))
        .map((l) => `src/${l}`)
        .join(', ')} may use ${pkg} (LAYERS in eslint.config.js).`,
    });
  }
  return edges;
}

const SOURCES = '*.{ts,tsx,js,mjs}';

function boundaryBlocks() {
  const blocks = [];
  for (const from of Object.keys(LAYERS)) {
    for (let depth = 0; depth <= MAX_DEPTH; depth++) {
      const dirs = '*/'.repeat(depth);
      const edges = forbiddenEdges(from, depth);
      blocks.push({
        files: [`src/${from}/${dirs}${SOURCES}`],
        rules: {
          'no-restricted-imports': ['error', { patterns: edges.map(({ regex, message }) => ({ regex, message })) }],
          // no-restricted-imports does not look at import(); the same edges, for dynamic imports.
          'no-restricted-syntax': [
            'error',
            ...edges.map(({ regex, message }) => ({ selector: `ImportExpression[source.value=/${regex}/]`, message })),
          ],
        },
      });
    }
    blocks.push({
      files: [`src/${from}/${'*/'.repeat(MAX_DEPTH + 1)}**/${SOURCES}`],
      rules: {
        'no-restricted-syntax': [
          'error',
          { selector: 'Program', message: `Deeper than the boundary rules reach: raise MAX_DEPTH in eslint.config.js.` },
        ],
      },
    });
    if (!LAYERS[from].dom) {
      const where = `src/${from} runs outside the page (Node, a worker, a headless GPU box)`;
      blocks.push({
        files: [`src/${from}/**/${SOURCES}`],
        rules: {
          'no-restricted-globals': [
            'error',
            { name: 'window', message: `${where}; take what you need as a parameter.` },
            { name: 'document', message: `${where}; it has no DOM.` },
          ],
        },
      });
    }
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
);
