/**
 * The engine's boundary, enforced by ESLint (eslint.config.js): nothing under src/engine imports
 * React, zustand, recharts, src/peers|state|ui|worker|cli|bench-page|server or bench/, or touches
 * window/document. Runs the real config on src/engine, and checks on snippets that the rules are
 * live (so a broken config cannot pass).
 */
import { ESLint } from 'eslint';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '../..');
const eslint = new ESLint({ cwd: root });

function describeMessages(results: ESLint.LintResult[]): string[] {
  return results.flatMap((r) =>
    r.messages
      .filter((m) => m.severity === 2)
      .map((m) => `${path.relative(root, r.filePath)}:${m.line}:${m.column} ${m.ruleId ?? 'fatal'}: ${m.message}`),
  );
}

async function ruleIds(code: string, file: string): Promise<string[]> {
  const [r] = await eslint.lintText(code, { filePath: path.join(root, file) });
  return r.messages.filter((m) => m.severity === 2).map((m) => m.ruleId ?? 'fatal');
}

describe('engine boundaries', () => {
  it('src/engine lints clean (no UI imports, no DOM globals, no other errors)', async () => {
    const results = await eslint.lintFiles(['src/engine']);
    expect(results.length).toBeGreaterThan(0);
    const problems = describeMessages(results);
    const boundary = problems.filter((p) => /no-restricted-(imports|globals)/.test(p));
    expect(boundary, `boundary violations:\n${boundary.join('\n')}`).toEqual([]);
    expect(problems, `lint errors:\n${problems.join('\n')}`).toEqual([]);
  }, 60_000);

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
  ])('rejects %s in %s', async (code, file) => {
    expect(await ruleIds(`${code}\nexport const used = 1;\n`, file)).toContain('no-restricted-imports');
  });

  it('rejects window and document in the engine, allows a local named window', async () => {
    expect(await ruleIds('export const w = window.innerWidth;', 'src/engine/util/x.ts')).toContain('no-restricted-globals');
    expect(await ruleIds("export const d = document.createElement('div');", 'src/engine/util/x.ts')).toContain('no-restricted-globals');
    expect(await ruleIds('const window = [1, 2];\nexport const n = window.length;', 'src/engine/util/x.ts')).toEqual([]);
  });

  it('allows engine-internal modules whose names match a page layer, and page code importing React', async () => {
    expect(await ruleIds("import { s } from '../state';\nexport const t = s;", 'src/engine/optim/sub/x.ts')).toEqual([]);
    expect(await ruleIds("import { p } from './peers';\nimport { b } from '../bench';\nexport const t = [p, b];", 'src/engine/optim/sub/x.ts')).toEqual([]);
    expect(await ruleIds("import { absmaxScale } from '../engine/quant/quantizer';\nexport const a = absmaxScale;", 'src/peers/x.ts')).toEqual([]);
    expect(await ruleIds("import { useState } from 'react';\nexport const u = useState;", 'src/ui/x.tsx')).toEqual([]);
  });
});
