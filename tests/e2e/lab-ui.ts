/**
 * End-to-end checks of the lab page for a first-time user, run by tests/e2e/run.ts:
 *   - a run is never lost: a browser (with a profile kept on disk) is closed 0–3 s after runs'
 *     last steps; opened again, each run is done with its final checkpoint stored, or interrupted
 *     with a stored checkpoint it can resume from; never live, never without one.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import type { Ctx, TestCase, TestHelpers } from './run';

type Check = (cond: unknown, message: string) => asserts cond;

const byTestId = (id: string) => `[data-testid="${id}"]`;

/** The run's record and whether a checkpoint is stored, read from the page's IndexedDB. */
function storedRun(page: Page, id: string): Promise<{ status?: string; checkpointStep?: number | null; hasCheckpoint: boolean }> {
  // A string, not a function: tsx's transform would leave helper calls (__name) the page lacks.
  return page.evaluate(`new Promise((resolve, reject) => {
    const r = indexedDB.open('webgpu-lab');
    r.onerror = () => reject(r.error);
    r.onsuccess = () => {
      const db = r.result;
      const tx = db.transaction(['runs', 'checkpoints']);
      const run = tx.objectStore('runs').get(${JSON.stringify(id)});
      const cp = tx.objectStore('checkpoints').getKey(${JSON.stringify(id)});
      tx.oncomplete = () => {
        db.close();
        resolve({ status: run.result?.status, checkpointStep: run.result?.checkpointStep, hasCheckpoint: cp.result !== undefined });
      };
    };
  })`);
}

export function labUiTests(check: Check): TestCase[] {
  return [
    {
      // Three runs of 3, 4 and 5 steps start together; the browser closes as the longest reports its
      // last step, when the others are a few steps (seconds on SwiftShader, with an evaluation and a
      // checkpoint per step) past theirs.
      name: 'a browser closed 0–3 s after the last steps finds each run done with its final checkpoint, or resumable',
      timeoutMs: 6 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-profile-'));
        const lengths = [3, 4, 5];
        try {
          let context = await ctx.persistentGpuContext(dir);
          let page = context.pages()[0] ?? (await context.newPage());
          await page.goto(ctx.url);
          await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
          const fill = (id: string, v: number) => page.locator(byTestId(id)).fill(String(v));
          await page.locator(byTestId('preset')).selectOption('micro');
          await fill('batch', 2);
          await fill('seq', 16);
          await fill('eval-every', 1);
          await fill('eval-batches', 1);
          await fill('sample-every', 0);
          await fill('sample-length', 16);
          const ids: string[] = [];
          for (const steps of lengths) {
            await fill('steps', steps);
            await page.locator(byTestId('start')).dispatchEvent('click');
            await page.waitForFunction((n) => document.querySelectorAll('[data-testid="run"]').length > n, ids.length, { timeout: 10_000 });
            ids.push((await page.locator(byTestId('run')).last().getAttribute('data-run-id'))!);
          }
          const lastStepAt = new Map<string, number>();
          const deadline = Date.now() + 4 * 60_000;
          while (lastStepAt.size < ids.length) {
            check(Date.now() < deadline, `only ${lastStepAt.size} of the runs reached their last step in 4 minutes`);
            for (const [i, id] of ids.entries()) {
              const card = page.locator(`${byTestId('run')}[data-run-id="${id}"]`);
              if (!lastStepAt.has(id) && (await card.locator(byTestId('step')).getAttribute('data-value')) === String(lengths[i])) lastStepAt.set(id, Date.now());
              check((await card.getAttribute('data-status')) !== 'error', `run ${id} failed: ${await card.locator(byTestId('run-error')).innerText().catch(() => '')}`);
            }
            await page.waitForTimeout(50);
          }
          const closedAt = Date.now();
          await context.close();

          context = await ctx.persistentGpuContext(dir);
          page = context.pages()[0] ?? (await context.newPage());
          await page.goto(ctx.url);
          await page.locator(byTestId('runs')).waitFor({ timeout: 30_000 });
          for (const [i, id] of ids.entries()) {
            const when = `${lengths[i]}-step run closed ${closedAt - lastStepAt.get(id)!} ms after its last step`;
            const card = page.locator(`${byTestId('run')}[data-run-id="${id}"]`);
            const status = await card.getAttribute('data-status');
            const step = await card.getAttribute('data-checkpoint-step');
            const stored = await storedRun(page, id);
            t.log(`  ${when}: shown ${status} (checkpoint ${step || 'none'}); stored ${stored.status}, checkpoint ${stored.checkpointStep ?? 'none'}`);
            check(stored.hasCheckpoint, `${when}: no checkpoint stored`);
            if (status === 'done') {
              check(step === String(lengths[i]) && stored.checkpointStep === lengths[i], `${when}: done, but its checkpoint is of step ${step}`);
            } else {
              check(status === 'interrupted', `${when}: came back ${status}`);
              check(Number(step) > 0 && Number(step) < lengths[i], `${when}: interrupted with checkpoint ${step}`);
              check((await card.locator(byTestId('resume')).count()) === 1, `${when}: interrupted with no Resume`);
            }
          }
          await context.close();
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
  ];
}
