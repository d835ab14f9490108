/**
 * A measurement, not part of the suite: a large generated text file (E2E_HEAP_MB megabytes) is
 * picked in the page, pre-tokenized into the token cache, and micro trains a few steps on it, while
 * the JS heap of the page and of each of its workers (the data worker, the training worker) is
 * sampled through the DevTools protocol. Run with
 *   E2E_HEAP_MB=1024 node --import tsx tests/e2e/run.ts --only "heap"
 * The peak per thread is logged and written to test-results/e2e/data-heap.json; it fails over
 * E2E_HEAP_LIMIT_MB (default 512) on any thread.
 */
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { BrowserContext, CDPSession, Page } from 'playwright-core';
import { byTestId, textNow, type TestCase } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;


/** Writes `mb` MiB of text: TinyShakespeare over and over, each copy numbered (so it is not one repeated string). */
async function writeCorpus(file: string, mb: number): Promise<void> {
  const base = await readFile('public/data/tinyshakespeare.txt', 'utf8');
  const out = createWriteStream(file);
  let written = 0;
  for (let k = 0; written < mb * 2 ** 20; k++) {
    const part = `\n== copy ${k} ==\n${base}`;
    written += Buffer.byteLength(part);
    if (!out.write(part)) await new Promise((r) => out.once('drain', r));
  }
  await new Promise<void>((r, j) => out.end((e?: Error | null) => (e ? j(e) : r())));
}

/** Samples Runtime.getHeapUsage of the page and of every worker it attaches. */
async function heapSampler(page: Page) {
  const cdp: CDPSession = await page.context().newCDPSession(page);
  const workers = new Map<string, string>(); // sessionId → worker name
  const pending = new Map<number, (v: { usedSize: number; totalSize: number; backingStorageSize?: number }) => void>();
  let nextId = 1;
  cdp.on('Target.attachedToTarget', (e: { sessionId: string; targetInfo: { type: string; title: string; url: string } }) => {
    workers.set(e.sessionId, e.targetInfo.title || e.targetInfo.url);
    void cdp.send('Target.sendMessageToTarget', { sessionId: e.sessionId, message: JSON.stringify({ id: 0, method: 'Runtime.runIfWaitingForDebugger' }) }).catch(() => {});
  });
  cdp.on('Target.detachedFromTarget', (e: { sessionId: string }) => workers.delete(e.sessionId));
  cdp.on('Target.receivedMessageFromTarget', (e: { message: string }) => {
    const m = JSON.parse(e.message) as { id?: number; result?: { usedSize: number; totalSize: number; backingStorageSize?: number } };
    if (m.id !== undefined && m.result) pending.get(m.id)?.(m.result);
  });
  await cdp.send('Target.setAutoAttach', { autoAttach: true, waitForDebuggerOnStart: false, flatten: false });
  const peak = new Map<string, number>();
  const note = (who: string, bytes: number) => peak.set(who, Math.max(peak.get(who) ?? 0, bytes));
  const sample = async () => {
    const main = (await cdp.send('Runtime.getHeapUsage')) as { usedSize: number; backingStorageSize?: number };
    note('page', main.usedSize + (main.backingStorageSize ?? 0));
    await Promise.all([...workers].map(async ([sessionId, name]) => {
      const id = nextId++;
      const got = new Promise<{ usedSize: number; backingStorageSize?: number }>((r) => pending.set(id, r));
      await cdp.send('Target.sendMessageToTarget', { sessionId, message: JSON.stringify({ id, method: 'Runtime.getHeapUsage' }) }).catch(() => {});
      const u = await Promise.race([got, new Promise<null>((r) => setTimeout(() => r(null), 2000))]);
      pending.delete(id);
      if (u) note(`worker ${name}`, u.usedSize + (u.backingStorageSize ?? 0));
    }));
  };
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      await sample().catch(() => {});
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  return { peak, stop: async () => { stop = true; await loop; } };
}

export function dataHeapTests(check: Check): TestCase[] {
  const mb = Number(process.env.E2E_HEAP_MB ?? 0);
  if (!(mb > 0)) return [];
  const limit = Number(process.env.E2E_HEAP_LIMIT_MB ?? 512) * 2 ** 20;
  return [{
    name: `heap: a ${mb} MiB text file pre-tokenizes and trains in the page with every thread's JS heap under ${limit / 2 ** 20} MiB`,
    timeoutMs: 60 * 60_000,
    async fn(ctx, t) {
      const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-heap-'));
      let context: BrowserContext | undefined;
      try {
        const file = path.join(dir, 'big.txt');
        await writeCorpus(file, mb);
        // A profile on disk, as a user's: a fresh context's storage quota is too small for a 1 GiB corpus's tokens.
        context = await ctx.persistentGpuContext(path.join(dir, 'profile'));
        const page = context.pages()[0] ?? (await context.newPage());
        await page.goto(ctx.url);
        await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
        await page.locator(byTestId('preset')).selectOption('micro');
        for (const [id, v] of [['steps', 3], ['batch', 2], ['seq', 16], ['eval-every', 3], ['eval-batches', 1], ['sample-every', 0], ['sample-length', 8]] as const) {
          await page.locator(byTestId(id)).fill(String(v));
        }
        const heap = await heapSampler(page);
        const t0 = Date.now();
        await page.locator(byTestId('dataset-file')).setInputFiles(file);
        const problem = page.locator(byTestId('dataset-problem'));
        // Polled, with the job's phase logged, so a stall says where it stands.
        for (let reported = t0; ;) {
          if ((await page.locator(byTestId('dataset-summary')).count()) > 0 || (await problem.count()) > 0) break;
          check(Date.now() - t0 < 50 * 60_000, 'the preparation did not finish in 50 minutes');
          if (Date.now() - reported > 60_000) {
            reported = Date.now();
            const peaks = Object.fromEntries([...heap.peak].map(([k, v]) => [k, Math.round(v / 2 ** 20)]));
            t.log(`  … ${((Date.now() - t0) / 1000).toFixed(0)} s: ${(await page.locator(byTestId('data-job')).innerText().catch(() => '(no job shown)')).trim()}; heap MiB ${JSON.stringify(peaks)}`);
          }
          await page.waitForTimeout(2000);
        }
        const prepS = (Date.now() - t0) / 1000;
        check((await problem.count()) === 0, `preparation failed: ${await textNow(problem)}`);
        const summary = await page.locator(byTestId('dataset-summary')).innerText();
        t.log(`  prepared in ${prepS.toFixed(1)} s: ${summary}`);
        await page.locator(byTestId('start')).dispatchEvent('click');
        const card = page.locator(byTestId('run')).last();
        await card.waitFor({ timeout: 10_000 });
        for (const deadline = Date.now() + 10 * 60_000; (await card.getAttribute('data-status')) !== 'done';) {
          check(Date.now() < deadline, 'the run did not finish in 10 minutes');
          check((await card.getAttribute('data-status')) !== 'error', `the run failed: ${await textNow(card.locator(byTestId('run-error')))}`);
          await page.waitForTimeout(500);
        }
        await heap.stop();
        const peaks = Object.fromEntries([...heap.peak].map(([k, v]) => [k, Math.round(v / 2 ** 20)]));
        t.log(`  peak JS heap (MiB) per thread: ${JSON.stringify(peaks)}`);
        await writeFile(path.resolve('test-results/e2e/data-heap.json'), JSON.stringify({ mb, prepare_s: prepS, summary, peak_heap_mib: peaks }, null, 2));
        check(heap.peak.size >= 2, `only ${heap.peak.size} threads sampled (no worker heaps)`);
        for (const [who, bytes] of heap.peak) check(bytes < limit, `${who}: peak JS heap ${(bytes / 2 ** 20).toFixed(0)} MiB`);
      } finally {
        await context?.close().catch(() => {});
        await rm(dir, { recursive: true, force: true });
      }
    },
  }];
}
