// Runs a TypeScript Node entry point of this project: bundles it (esbuild, ~0.2 s) into .cache/
// and imports it with the remaining arguments. Used by `npm run train|codec|bench|peer`.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { bundle } from './bundle-node.mjs';

const [entry, ...rest] = process.argv.slice(2);
if (!entry) {
  console.error('usage: node scripts/run-node.mjs <entry.ts> [args...]');
  process.exit(2);
}
const out = path.resolve('.cache/node', path.basename(entry).replace(/\.ts$/, '.mjs'));
await bundle(entry, out);
process.argv = [process.argv[0], entry, ...rest];
await import(pathToFileURL(out).href);
