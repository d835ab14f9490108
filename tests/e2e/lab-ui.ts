/**
 * End-to-end checks of the lab page for a first-time user, run by tests/e2e/run.ts:
 *   - a run is never lost: a browser (with a profile kept on disk) is closed 0 and 2.5 s after a
 *     run's last step; opened again, the run is done with its final checkpoint stored, or
 *     interrupted with a stored checkpoint it can resume from; never live, never without one.
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
  const STEPS = 3;
  return [
    {
      // One run per browser session (each fresh page compiles its pipelines: minutes on SwiftShader);
      // an evaluation and a checkpoint per step, so the last step is followed by seconds of work.
      name: 'a browser closed 0 and 2.5 s after the last step finds the run done with its final checkpoint, or resumable',
      timeoutMs: 7 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-profile-'));
        const moments = [0, 2500];
        let previous: { id: string; moment: number } | null = null;
        try {
          for (let k = 0; k <= moments.length; k++) {
            const context = await ctx.persistentGpuContext(dir);
            const page = context.pages()[0] ?? (await context.newPage());
            await page.goto(ctx.url);
            await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
            if (previous) {
              const when = `closed ${previous.moment} ms after the last step`;
              const card = page.locator(`${byTestId('run')}[data-run-id="${previous.id}"]`);
              await card.waitFor({ timeout: 30_000 });
              const status = await card.getAttribute('data-status');
              const step = await card.getAttribute('data-checkpoint-step');
              const stored = await storedRun(page, previous.id);
              t.log(`  ${when}: shown ${status} (checkpoint ${step || 'none'}); stored ${stored.status}, checkpoint ${stored.checkpointStep ?? 'none'}`);
              check(stored.hasCheckpoint, `${when}: no checkpoint stored`);
              if (status === 'done') {
                check(step === String(STEPS) && stored.checkpointStep === STEPS, `${when}: done, but its checkpoint is of step ${step}`);
              } else {
                check(status === 'interrupted', `${when}: the run came back ${status}`);
                check(Number(step) > 0 && Number(step) < STEPS, `${when}: interrupted with checkpoint ${step}`);
                check((await card.locator(byTestId('resume')).count()) === 1, `${when}: interrupted with no Resume`);
              }
            }
            if (k === moments.length) {
              await context.close();
              break;
            }
            const fill = (id: string, v: number) => page.locator(byTestId(id)).fill(String(v));
            await page.locator(byTestId('preset')).selectOption('micro');
            await fill('steps', STEPS);
            await fill('batch', 2);
            await fill('seq', 16);
            await fill('eval-every', 1);
            await fill('eval-batches', 1);
            await fill('sample-every', 0);
            await fill('sample-length', 16);
            const before = await page.locator(byTestId('run')).count();
            await page.locator(byTestId('start')).dispatchEvent('click');
            await page.waitForFunction((n) => document.querySelectorAll('[data-testid="run"]').length > n, before, { timeout: 10_000 });
            const card = page.locator(byTestId('run')).last();
            const id = (await card.getAttribute('data-run-id'))!;
            const deadline = Date.now() + 3 * 60_000;
            while ((await card.locator(byTestId('step')).getAttribute('data-value')) !== String(STEPS)) {
              check(Date.now() < deadline, 'the run did not reach its last step in 3 minutes');
              check((await card.getAttribute('data-status')) !== 'error', `the run failed: ${await card.locator(byTestId('run-error')).innerText().catch(() => '')}`);
              await page.waitForTimeout(50);
            }
            if (moments[k] > 0) await page.waitForTimeout(moments[k]);
            await context.close();
            previous = { id, moment: moments[k] };
          }
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
  ];
}
