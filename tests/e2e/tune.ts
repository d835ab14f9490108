/**
 * End-to-end: "Tune this GPU" on the bench page tunes the kernel choices of the lab's micro run at
 * the lab form's batch and sequence length in the page (SwiftShader), keeps them in IndexedDB, and a
 * micro run on the lab page with its default settings then says all its kernels are tuned. One
 * browser session (the pages share the origin's IndexedDB). Run by tests/e2e/run.ts
 * (`npm run test:e2e -- --only "tune"`).
 */
import { byTestId, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;

export function tuneTests(check: Check): TestCase[] {
  return [{
    name: 'tune: "Tune this GPU" (micro) in the bench page, then a micro run reports its kernels tuned',
    timeoutMs: 20 * 60_000,
    async fn(ctx: Ctx, t: TestHelpers) {
      const page = await t.page(await ctx.gpuBrowser());
      await page.goto(new URL('bench.html', ctx.url).href);
      await page.locator(byTestId('bench-page')).waitFor({ timeout: 30_000 });
      await page.locator(byTestId('tune-model')).selectOption('micro');
      // The panel tunes the shapes a lab run trains: the lab form's defaults (engine/tune/lab-run.ts).
      const shape = [await page.locator(byTestId('tune-batch')).inputValue(), await page.locator(byTestId('tune-seq')).inputValue()];
      check(shape.join('x') === '8x32', `the tune panel's batch x seq: ${shape.join('x')}, the lab form's defaults are 8x32`);
      await page.locator(byTestId('tune-budget')).fill('600');
      const t0 = Date.now();
      // The GPU process is busy compiling while it tunes: DOM clicks (see run.ts).
      await page.locator(byTestId('tune-start')).dispatchEvent('click');
      const status = page.locator(byTestId('tune-status'));
      let last = 0;
      while (!(await page.locator(byTestId('tune-start')).isVisible())) {
        if (Date.now() - last > 15_000) {
          last = Date.now();
          t.log(`  … ${(await status.innerText().catch(() => '')).replace(/\s+/g, ' ')}`);
        }
        check(Date.now() - t0 < 10 * 60_000, 'the tune did not finish within 10 minutes');
        await page.waitForTimeout(500);
      }
      const done = await status.innerText();
      t.log(`  tune: ${done} (${((Date.now() - t0) / 1000).toFixed(0)} s in the page)`);
      check(/micro at batch 8 × seq 32: tuned: \d+ new/.test(done) && !/not finished|cancelled/.test(done), `tune ended as: ${done}`);

      await page.goto(ctx.url);
      await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
      await page.locator(byTestId('preset')).selectOption('micro');
      // Batch and sequence length stay the form's defaults: the shapes the panel tuned.
      for (const [id, v] of [['steps', 2], ['eval-every', 0], ['sample-length', 0]] as const) await page.locator(byTestId(id)).fill(String(v));
      await page.locator(byTestId('start')).dispatchEvent('click');
      const tuning = page.locator(byTestId('run')).last().locator(byTestId('run-tuning'));
      await tuning.waitFor({ timeout: 8 * 60_000 });
      const label = await tuning.innerText();
      check((await tuning.getAttribute('data-status')) === 'tuned', `the run's kernels: ${label}`);
      await t.screenshot(page, 'tuned-run');
    },
  }];
}
