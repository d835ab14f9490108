/**
 * End-to-end test of the benchmark page (bench.html): reached from the lab's header, it shows the
 * SwiftShader adapter, runs the quick gemm + qgemm + codec suites in its worker (the same
 * src/lab/suites.ts functions as `npm run bench`), streams rows with positive finite figures into
 * the table and the GEMM chart, fills the ratio column from a baseline file
 * (fixtures/bench-baseline.json: one key the quick run measures, one it does not), downloads the
 * CLI's JSON shape, and stops a second run on request. Run by tests/e2e/run.ts
 * (`npm run test:e2e -- --only "bench page"` runs it alone).
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { byTestId, type Ctx, type TestCase, type TestHelpers } from './harness';
import { accessibility } from './lab-ui';

type Check = (cond: unknown, message: string) => asserts cond;

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'bench-baseline.json');
const SUITES = ['gemm', 'qgemm', 'codec'];

interface RowView {
  suite: string;
  key: string;
  value: number;
  ratio: string;
}

async function rowsOf(page: Page): Promise<RowView[]> {
  return page.locator(byTestId('bench-row')).evaluateAll((els) =>
    els.map((e) => ({ suite: e.getAttribute('data-suite') ?? '', key: e.getAttribute('data-key') ?? '', value: Number(e.getAttribute('data-value')), ratio: e.getAttribute('data-ratio') ?? '' })),
  );
}

export function benchTests(check: Check): TestCase[] {
  /** Polls the run's phase until it leaves 'running', logging progress every 15 s. */
  async function waitForPhase(page: Page, t: TestHelpers, timeoutMs: number): Promise<string> {
    const status = page.locator(byTestId('bench-status'));
    const deadline = Date.now() + timeoutMs;
    let lastLog = Date.now();
    for (;;) {
      const phase = (await status.getAttribute('data-phase')) ?? '';
      if (phase !== 'running') return phase;
      if (Date.now() > deadline) throw new Error(`bench run not finished within ${timeoutMs / 1000} s`);
      if (Date.now() - lastLog > 15_000) {
        lastLog = Date.now();
        t.log(`  … ${(await status.innerText().catch(() => '')).replace(/\s+/g, ' ')}; ${await page.locator(byTestId('bench-row')).count()} rows`);
      }
      await page.waitForTimeout(300);
    }
  }

  return [
    {
      name: 'bench page: quick gemm + qgemm + codec on SwiftShader, baseline ratio, JSON download, Stop, 390 px and dark',
      timeoutMs: 4 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const t0 = Date.now();
        const page = await t.page(await ctx.gpuBrowser());

        // Reached from the lab's header.
        await page.goto(ctx.url);
        await page.locator(byTestId('bench-link')).click();
        await page.locator(byTestId('bench-page')).waitFor({ timeout: 30_000 });
        check(new URL(page.url()).pathname.endsWith('/bench.html'), `the Benchmarks link led to ${page.url()}`);
        check(new URL((await page.locator(byTestId('lab-link')).getAttribute('href')) ?? '', page.url()).href === ctx.url, 'no link back to the lab');

        // The adapter and its features, before any run.
        const adapter = page.locator(byTestId('adapter'));
        await adapter.waitFor({ timeout: 30_000 });
        check((await adapter.getAttribute('data-architecture')) === 'swiftshader', `adapter: ${await adapter.innerText()}`);
        for (const f of ['subgroups', 'timestampQuery', 'shaderF16', 'subgroupMatrix']) {
          check(['true', 'false'].includes((await page.locator(byTestId(`feature-${f}`)).getAttribute('data-on')) ?? ''), `feature ${f} not shown`);
        }
        t.log(`  ${(await adapter.innerText()).replace(/\s+/g, ' ')}`);

        // Quick gemm + qgemm + codec, fewer reps.
        for (const s of ['step', 'allreduce', 'generate']) await page.locator(byTestId(`suite-${s}`)).uncheck();
        await page.locator(byTestId('size')).selectOption('quick');
        await page.locator(byTestId('reps')).fill('2');
        await page.locator(byTestId('warmup')).fill('1');
        check((await page.locator(byTestId('download-json')).isDisabled()), 'Download enabled before any row');
        const tRun = Date.now();
        await page.locator(byTestId('run')).click();
        await page.locator(byTestId('bench-row')).first().waitFor({ timeout: 60_000 });
        const phase = await waitForPhase(page, t, 120_000);
        const errors = await page.locator('[data-testid^="error-"], [data-testid="bench-error"]').allInnerTexts();
        check(phase === 'done', `run ended ${phase}: ${errors.join('; ')}`);
        t.log(`  quick run: ${((Date.now() - tRun) / 1000).toFixed(1)} s`);
        for (const s of SUITES) {
          const state = await page.locator(byTestId(`status-${s}`)).getAttribute('data-state');
          check(state === 'done', `suite ${s} is ${state}: ${errors.join('; ')}`);
        }
        const rows = await rowsOf(page);
        for (const s of SUITES) check(rows.some((r) => r.suite === s), `no ${s} rows`);
        const bad = rows.filter((r) => !(Number.isFinite(r.value) && r.value > 0));
        check(bad.length === 0, `rows without a positive finite value: ${JSON.stringify(bad)}`);
        check(rows.every((r) => r.ratio === ''), 'a ratio before any baseline was loaded');
        const points = Number(await page.locator(byTestId('gemm-chart')).getAttribute('data-points'));
        check(points === 3, `GEMM chart has ${points} points (expected the quick squares 32, 64, 128)`);
        check((await page.locator(`${byTestId('gemm-chart')} svg .recharts-line`).count()) === 1, 'GEMM chart draws no line');

        // The baseline fills the ratio of the one matching key.
        await page.locator(byTestId('baseline-input')).setInputFiles(FIXTURE);
        await page.locator(byTestId('ratio')).first().waitFor({ timeout: 10_000 });
        const merged = await rowsOf(page);
        const withRatio = merged.filter((r) => r.ratio !== '');
        check(withRatio.length === 1 && withRatio[0].key === 'gemm/64x64x64/NN', `ratios on ${JSON.stringify(withRatio)}`);
        const ratio = Number(withRatio[0].ratio);
        check(Math.abs(ratio - withRatio[0].value / 2) < 1e-9 * ratio, `ratio ${ratio} is not ours/2 for ours = ${withRatio[0].value}`);
        check((await page.locator(byTestId('baseline-status')).getAttribute('data-matched')) === '1', 'baseline status does not say 1 matched');
        check((await page.locator(`${byTestId('gemm-chart')} svg .recharts-line`).count()) === 2, 'GEMM chart draws no baseline line');
        await t.screenshot(page, 'bench-page');
        // Every codec row says its time and its timer (no "–").
        const codecCells = await page.locator(`${byTestId('bench-row')}[data-suite="codec"]`).evaluateAll((els) => els.map((e) => [e.children[3].textContent, e.children[4].textContent, e.children[1].textContent]));
        const blank = codecCells.filter(([ms, timer]) => ms === '–' || timer === '–');
        check(blank.length === 0, `codec rows without time or timer: ${blank.map((c) => c[2]).join(', ')}`);
        // Phones and dark mode: nothing wider than the screen; no serious axe finding.
        for (const scheme of ['light', 'dark'] as const) {
          await page.emulateMedia({ colorScheme: scheme });
          for (const width of [1400, 390]) {
            await page.setViewportSize({ width, height: 844 });
            await page.waitForTimeout(200);
            const wide = Number(await page.evaluate('document.documentElement.scrollWidth'));
            check(wide <= width, `bench.html at ${width} px ${scheme} is ${wide} px wide`);
            await t.screenshot(page, `bench-${width}-${scheme}`);
          }
          await accessibility(page, t, check, `bench page, ${scheme}`);
        }
        await page.emulateMedia({ colorScheme: 'light' });
        await page.setViewportSize({ width: 1200, height: 900 });

        // The download: the CLI's JSON shape, with every row of the table and the merged ratio.
        const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 10_000 }), page.locator(byTestId('download-json')).click()]);
        const file = await dl.path();
        const json = JSON.parse(await readFile(file, 'utf8')) as {
          command: string; date: string; adapter: { architecture: string }; features: Record<string, boolean>; dawnFeatures: string[];
          rows: { suite: string; key?: string; value: number; unit: string; show: boolean; ratio?: number }[]; baseline: { matched: number; source: string };
        };
        check(json.command === 'bench-page gemm,qgemm,codec --quick --reps 2 --warmup 1', `command: ${json.command}`);
        check(!Number.isNaN(Date.parse(json.date)), `date: ${json.date}`);
        check(json.adapter.architecture === 'swiftshader' && typeof json.features.timestampQuery === 'boolean' && Array.isArray(json.dawnFeatures), 'adapter/features missing from the JSON');
        check(json.rows.filter((r) => r.show).length === rows.length, `JSON has ${json.rows.filter((r) => r.show).length} shown rows, the table ${rows.length}`);
        check(json.rows.every((r) => SUITES.includes(r.suite) && Number.isFinite(r.value) && r.value > 0 && r.unit), 'a JSON row of another suite or without a positive value');
        check(json.baseline.matched === 1 && json.rows.find((r) => r.key === 'gemm/64x64x64/NN')?.ratio === ratio, `JSON baseline: ${JSON.stringify(json.baseline)}`);

        // Stop: a second run ends at once, its unfinished suites marked stopped, the page still usable.
        await page.locator(byTestId('suite-qgemm')).uncheck();
        await page.locator(byTestId('suite-codec')).uncheck();
        await page.locator(byTestId('size')).selectOption('full');
        await page.locator(byTestId('run')).click();
        await page.locator(byTestId('stop')).click();
        check((await waitForPhase(page, t, 10_000)) === 'stopped', 'Stop did not end the run');
        check((await page.locator(byTestId('status-gemm')).getAttribute('data-state')) === 'stopped', 'gemm not marked stopped');
        check(await page.locator(byTestId('run')).isEnabled(), 'Run is not available again after Stop');
        t.log(`  total ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      },
    },
  ];
}
