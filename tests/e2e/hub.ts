/**
 * End-to-end check of the data panel's "from the Hub" import, run by tests/e2e/run.ts: a local server
 * in the Hub's layout (tests/helpers/hub-server.ts, serving tests/fixtures/hf-llama) set as the
 * endpoint; the model id fetched, imported as the next run's model under its id; forgotten and
 * fetched again from the browser's cache with no request; an unknown id refused in words. No training
 * (the checkpoint import's run is data-ui.ts's).
 */
import type { Page } from 'playwright-core';
import { fixtureRepo, startHubServer } from '../helpers/hub-server';
import { byTestId, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;

async function openLab(ctx: Ctx, t: TestHelpers): Promise<Page> {
  const page = await t.page(await ctx.gpuBrowser());
  await page.goto(ctx.url);
  await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
  await page.locator(byTestId('preset')).selectOption('micro');
  return page;
}

export function hubTests(check: Check): TestCase[] {
  return [
    {
      name: 'hub: a model id fetched from a Hub-layout server imports as the next run\'s model; again from the cache with no request; an unknown id is refused',
      timeoutMs: 4 * 60_000,
      async fn(ctx, t) {
        const hub = await startHubServer();
        try {
          hub.repos.set('lab/hf-llama', fixtureRepo('hf-llama/model', 'hf-llama/tokenizer'));
          const page = await openLab(ctx, t);
          await page.locator(`${byTestId('hub-import')} summary`).click();
          await page.locator(byTestId('hub-endpoint')).fill(hub.endpoint);
          const fetchModel = async (id: string) => {
            await page.locator(byTestId('hub-id')).fill(id);
            await page.locator(byTestId('hub-fetch')).click();
            // Settled: no job row, and either a problem or the imported model named by the id.
            await page.waitForFunction(([job, problem, imported, want]) => !document.querySelector(job as string)
              && (document.querySelector(problem as string) || document.querySelector(imported as string)?.textContent?.includes(want as string)),
            [byTestId('hub-job'), byTestId('hub-problem'), byTestId('imported-model'), id], { timeout: 120_000, polling: 250 });
            const problem = page.locator(byTestId('hub-problem'));
            return (await problem.count()) ? problem.innerText() : null;
          };
          const first = await fetchModel('lab/hf-llama');
          check(first === null, `the Hub import failed: ${first}`);
          const shown = await page.locator(byTestId('imported-model')).innerText();
          check(shown.includes('lab/hf-llama') && shown.includes('vocabulary 320'), `the imported model is not shown by its id: ${shown}`);
          const requests = hub.log.length;
          check(hub.log.some((l) => l.startsWith('GET') && l.endsWith('model-00001-of-00003.safetensors')), `no shard was downloaded: ${hub.log.join(', ')}`);
          t.log(`  first fetch: ${requests} requests`);
          await page.locator(`${byTestId('imported-model')} button`).click();
          await page.locator(byTestId('imported-model')).waitFor({ state: 'detached', timeout: 60_000 });
          const again = await fetchModel('lab/hf-llama');
          check(again === null, `the cached import failed: ${again}`);
          check(hub.log.length === requests, `the second import made requests: ${hub.log.slice(requests).join(', ')}`);
          const refused = await fetchModel('lab/nope');
          check(refused !== null && refused.includes('lab/nope was not found, or is private') && refused.includes('token field'), `an unknown id was not refused in words: ${refused}`);
        } finally {
          await hub.close();
        }
      },
    },
  ];
}
