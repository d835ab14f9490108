/**
 * The layer boundaries, enforced by ESLint (eslint.config.js): each folder of src/ is a layer, and
 * LAYERS there lists which other layers and UI packages (react, react-dom, zustand, recharts) it may
 * import and whether it may touch window/document; nothing in src/ imports bench/. Runs the real config
 * on src/, and proves from the same table that every forbidden edge is reported (static import,
 * re-export, dynamic import, any depth) and every allowed edge passes, so a broken rule or a layer added
 * without a row cannot pass.
 */
import { ESLint } from 'eslint';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';

type Layer = { imports: string[]; packages: string[]; dom: boolean };
type BoundaryConfig = { LAYERS: Record<string, Layer>; UI_PACKAGES: string[]; MAX_DEPTH: number };

const root = path.resolve(__dirname, '..');
const eslint = new ESLint({ cwd: root });
// A computed specifier: the table is read from the very config ESLint runs (a plain JS module).
const { LAYERS, UI_PACKAGES, MAX_DEPTH } = (await import(pathToFileURL(path.join(root, 'eslint.config.js')).href)) as BoundaryConfig;

const names = Object.keys(LAYERS);
const forbidden = names.flatMap((from) => names.filter((to) => to !== from && !LAYERS[from].imports.includes(to)).map((to) => [from, to]));
const allowed = names.flatMap((from) => LAYERS[from].imports.map((to) => [from, to]));
const forbiddenPackages = names.flatMap((from) => UI_PACKAGES.filter((p) => !LAYERS[from].packages.includes(p)).map((p) => [from, p]));
const allowedPackages = names.flatMap((from) => LAYERS[from].packages.map((p) => [from, p]));

function describeMessages(results: ESLint.LintResult[]): string[] {
  return results.flatMap((r) =>
    r.messages
      .filter((m) => m.severity === 2)
      .map((m) => `${path.relative(root, r.filePath)}:${m.line}:${m.column} ${m.ruleId ?? 'fatal'}: ${m.message}`),
  );
}

async function errors(code: string, file: string): Promise<{ ruleId: string; message: string }[]> {
  const [r] = await eslint.lintText(code, { filePath: path.join(root, file) });
  return r.messages.filter((m) => m.severity === 2).map((m) => ({ ruleId: m.ruleId ?? 'fatal', message: m.message }));
}

async function ruleIds(code: string, file: string): Promise<string[]> {
  return (await errors(code, file)).map((e) => e.ruleId);
}

/** A file `depth` folders below src/<layer>, and the `../` that climb from it to src/. */
function fileAt(layer: string, depth: number): { file: string; toSrc: string } {
  const dirs = Array.from({ length: depth }, (_, i) => `d${i}/`).join('');
  return { file: `src/${layer}/${dirs}x.ts`, toSrc: '../'.repeat(depth + 1) };
}

/** The ways one module can reach another: import, type import, re-export, dynamic import. */
function uses(spec: string): string[] {
  return [
    `import { m } from '${spec}';\nexport const used = m;\n`,
    `import type { M } from '${spec}';\nexport type Used = M;\n`,
    `export * from '${spec}';\n`,
    `export const load = () => import('${spec}');\n`,
  ];
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sourceFiles(path.join(dir, e.name)) : /\.(ts|tsx|js|mjs)$/.test(e.name) ? [path.join(dir, e.name)] : [],
  );
}

describe('layer boundaries', () => {
  it('the table has one row per folder of src/, names only its layers, and points one way', () => {
    const folders = readdirSync(path.join(root, 'src'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
    expect(names.slice().sort()).toEqual(folders.sort());
    for (const [from, row] of Object.entries(LAYERS)) {
      for (const to of row.imports) expect(names, `${from} imports unknown layer ${to}`).toContain(to);
      for (const p of row.packages) expect(UI_PACKAGES).toContain(p);
    }
    // Acyclic: peel off layers whose imports are all placed already.
    const placed = new Set<string>();
    while (placed.size < names.length) {
      const next = names.filter((l) => !placed.has(l) && LAYERS[l].imports.every((to) => placed.has(to)));
      expect(next, `cycle among ${names.filter((l) => !placed.has(l)).join(', ')}`).not.toEqual([]);
      for (const l of next) placed.add(l);
    }
  });

  it('the spine is engine ← peers ← parallel ← state ← ui', () => {
    const spine = ['engine', 'peers', 'parallel', 'state', 'ui'];
    spine.forEach((layer, i) => {
      for (const above of spine.slice(i + 1)) expect(LAYERS[layer].imports, `${layer} → ${above}`).not.toContain(above);
    });
    expect(LAYERS.engine.imports).toEqual([]);
  });

  it('src/ lints clean (no forbidden edge, no DOM globals outside the page, no other errors)', async () => {
    const results = await eslint.lintFiles(['src']);
    expect(results.length).toBeGreaterThan(0);
    const problems = describeMessages(results);
    const boundary = problems.filter((p) => /no-restricted-(imports|globals|syntax)/.test(p));
    expect(boundary, `boundary violations:\n${boundary.join('\n')}`).toEqual([]);
    expect(problems, `lint errors:\n${problems.join('\n')}`).toEqual([]);
  }, 180_000);

  it('every source file of src/ is within the depth the rules cover, and a deeper one is an error', async () => {
    for (const f of sourceFiles(path.join(root, 'src'))) {
      const parts = path.relative(path.join(root, 'src'), f).split(path.sep);
      if (parts.length === 1) continue; // src/env.d.ts and the like belong to no layer
      expect(parts.length - 2, f).toBeLessThanOrEqual(MAX_DEPTH);
    }
    const { file } = fileAt('peers', MAX_DEPTH + 1);
    expect(await ruleIds('export const a = 1;\n', file)).toContain('no-restricted-syntax');
  });

  it.each(forbidden)('forbids src/%s → src/%s', async (from, to) => {
    for (const depth of [0, 2]) {
      const { file, toSrc } = fileAt(from, depth);
      for (const spec of [`${toSrc}${to}`, `${toSrc}${to}/a/m`, `${toSrc}../src/${to}/m`]) {
        for (const code of uses(spec)) {
          const found = await errors(code, file);
          expect(found.map((e) => e.ruleId), `${file}: ${code}`).toContainEqual(expect.stringMatching(/^no-restricted-(imports|syntax)$/));
          expect(found.map((e) => e.message).join('\n'), `${file}: ${code}`).toContain(`src/${from} → src/${to}`);
        }
      }
    }
  });

  it.each(allowed)('allows src/%s → src/%s', async (from, to) => {
    for (const depth of [0, 2]) {
      const { file, toSrc } = fileAt(from, depth);
      for (const code of uses(`${toSrc}${to}/a/m`)) expect(await ruleIds(code, file), `${file}: ${code}`).toEqual([]);
    }
  });

  it.each(names)('forbids src/%s → bench/', async (from) => {
    for (const depth of [0, 2]) {
      const { file, toSrc } = fileAt(from, depth);
      for (const code of uses(`${toSrc}../bench/gemm-tune`)) {
        expect((await errors(code, file)).map((e) => e.message).join('\n'), `${file}: ${code}`).toContain(`src/${from} → bench/`);
      }
    }
  });

  it.each(names)('src/%s may hold modules named like any layer, or bench', async (from) => {
    // Depth-aware patterns: one `../` too few stays inside the layer.
    const { file } = fileAt(from, 2);
    for (const name of [...names, 'bench']) {
      for (const spec of [`./${name}`, `../${name}/m`, `../../${name}`]) {
        for (const code of uses(spec)) expect(await ruleIds(code, file), `${file}: ${code}`).toEqual([]);
      }
    }
  });

  it.each(forbiddenPackages)('forbids src/%s → %s', async (from, pkg) => {
    const { file } = fileAt(from, 1);
    for (const code of [...uses(pkg), ...uses(`${pkg}/sub`)]) {
      expect((await errors(code, file)).map((e) => e.message).join('\n'), `${file}: ${code}`).toContain(`src/${from} → ${pkg}`);
    }
  });

  it.each(allowedPackages)('allows src/%s → %s', async (from, pkg) => {
    const { file } = fileAt(from, 1);
    for (const code of [...uses(pkg), ...uses(`${pkg}/sub`)]) expect(await ruleIds(code, file), `${file}: ${code}`).toEqual([]);
  });

  it.each(names)('window and document in src/%s follow the table', async (layer) => {
    const { file } = fileAt(layer, 1);
    const expected = LAYERS[layer].dom ? [] : ['no-restricted-globals'];
    expect(await ruleIds('export const w = window.innerWidth;', file)).toEqual(expected);
    expect(await ruleIds("export const d = document.createElement('div');", file)).toEqual(expected);
    expect(await ruleIds('const window = [1, 2];\nexport const n = window.length;', file)).toEqual([]);
  });

  it.each([
    ["import { useState } from 'react';", 'src/engine/model/x.ts'],
    ["import { createRoot } from 'react-dom/client';", 'src/engine/x.ts'],
    ["import { createStore } from 'zustand/vanilla';", 'src/engine/train/x.ts'],
    ["import { LineChart } from 'recharts';", 'src/engine/gpu/x.ts'],
    ["import { App } from '../../ui/App';", 'src/engine/model/x.ts'],
    ["import type { LabState } from '../state/lab';", 'src/engine/x.ts'],
    ["export { launchRun } from '../../../worker/client';", 'src/engine/a/b/x.ts'],
    ["import { allReduceMean } from '../../peers/allreduce';", 'src/engine/train/x.ts'],
    ["import type { PeerGroup } from '../peers/group';", 'src/engine/x.ts'],
    ["import { main } from '../../cli/train';", 'src/engine/model/x.ts'],
    ["import { BenchApp } from '../../bench-page/BenchApp';", 'src/engine/gpu/x.ts'],
    ["import { serve } from '../../server/serve';", 'src/engine/io/x.ts'],
    ["import { SUITES } from '../../../bench/suites';", 'src/engine/kernels/x.ts'],
    ["export * from '../../../../bench/gemm';", 'src/engine/a/b/x.ts'],
    ["import { x } from '../../../src/peers/dp';", 'src/engine/model/x.ts'],
    ["import { DataParallel } from '../parallel/dp/dp';", 'src/ui/x.tsx'],
    ["import { App } from '../../ui/App';", 'src/state/group/x.ts'],
    ["import { useLab } from '../../state/lab';", 'src/parallel/dp/x.ts'],
    ["import { Trainer } from '../../parallel/dp/dp';", 'src/peers/room/x.ts'],
    ["import { launchRun } from '../worker/client';", 'src/peers/x.ts'],
    ["import { LineChart } from 'recharts';", 'src/state/x.ts'],
    ["import { create } from 'zustand';", 'src/cli/x.ts'],
  ])('rejects %s in %s', async (code, file) => {
    expect(await ruleIds(`${code}\nexport const used = 1;\n`, file)).toContain('no-restricted-imports');
  });

  it('allows what the tree does today', async () => {
    expect(await ruleIds("import { s } from '../state';\nexport const t = s;", 'src/engine/optim/sub/x.ts')).toEqual([]);
    expect(await ruleIds("import { p } from './peers';\nimport { b } from '../bench';\nexport const t = [p, b];", 'src/engine/optim/sub/x.ts')).toEqual([]);
    expect(await ruleIds("import { absmaxScale } from '../engine/quant/quantizer';\nexport const a = absmaxScale;", 'src/peers/x.ts')).toEqual([]);
    expect(await ruleIds("import { useState } from 'react';\nexport const u = useState;", 'src/ui/x.tsx')).toEqual([]);
    expect(await ruleIds("import { create } from 'zustand';\nexport const c = create;", 'src/state/x.ts')).toEqual([]);
    expect(await ruleIds("import codec from '../../../../shaders/quant/codec.wgsl?raw';\nexport const c = codec;", 'src/engine/kernels/rope/x.ts')).toEqual([]);
  });
});
