// Bundles a Node entry point (CLI, benchmark, peer) into one ESM file with esbuild, so that
// `import x from '../shaders/foo.wgsl?raw'` works outside Vite and the result can be carried to the
// GPU machine. `webgpu` (a native addon) and other node_modules stay external.
// Usage: node scripts/bundle-node.mjs src/cli/train.ts [out.mjs]
import { build } from 'esbuild';
import { readFile } from 'node:fs/promises';
import path from 'node:path';

const rawPlugin = {
  name: 'raw',
  setup(b) {
    b.onResolve({ filter: /\?raw$/ }, (args) => ({
      path: path.resolve(args.resolveDir, args.path.replace(/\?raw$/, '')),
      namespace: 'raw',
    }));
    b.onLoad({ filter: /.*/, namespace: 'raw' }, async (args) => ({
      contents: await readFile(args.path, 'utf8'),
      loader: 'text',
    }));
  },
};

export async function bundle(entry, outfile, { external = true } = {}) {
  await build({
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: 'inline',
    // Everything from node_modules stays external when running here; for the GPU machine only
    // the native addons (Dawn, WebRTC) must stay outside the bundle.
    packages: external ? 'external' : undefined,
    external: external ? undefined : ['webgpu', '@roamhq/wrtc'],
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    plugins: [rawPlugin],
    logLevel: 'warning',
  });
  return outfile;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const [entry, out] = process.argv.slice(2);
  const outfile = out ?? path.join('dist-node', path.basename(entry).replace(/\.ts$/, '.mjs'));
  await bundle(entry, outfile, { external: !process.env.BUNDLE_ALL });
  console.error(`bundled ${entry} -> ${outfile}`);
}
