/**
 * End-to-end checks of the page's data and tokenizers, run by tests/e2e/run.ts (micro shapes, two
 * steps: SwiftShader compiles every run's pipelines):
 *   - a byte-level BPE tokenizer trained in the page (progress, cancel keeps the previous one), the
 *     memory plan following its vocabulary, micro trained on it with bits per byte shown;
 *   - a .jsonl with a chosen text field trained on; a binary file refused by name, the data kept;
 *   - the Hugging Face fixture checkpoint (bf16, sharded, tokenizer.json) imported by files and
 *     trained a step; a config with rope scaling refused with the key named.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { byTestId, textNow, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;

const FIXTURE = path.resolve('tests/fixtures/hf-llama');

async function openLab(ctx: Ctx, t: TestHelpers): Promise<Page> {
  const page = await t.page(await ctx.gpuBrowser());
  await page.goto(ctx.url);
  await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
  await page.locator(byTestId('preset')).selectOption('micro');
  for (const [id, v] of [['steps', 2], ['batch', 2], ['seq', 16], ['eval-every', 2], ['eval-batches', 1], ['sample-every', 0], ['sample-length', 8]] as const) {
    await page.locator(byTestId(id)).fill(String(v));
  }
  return page;
}

/** Runs `act` and waits for the data panel to settle after it; returns the problem shown (null: none). */
async function dataAfter(page: Page, act: () => Promise<unknown>, timeoutMs = 120_000): Promise<string | null> {
  const panel = page.locator(byTestId('dataset'));
  const before = Number(await panel.getAttribute('data-settled'));
  await act();
  // Interval polling: the default (requestAnimationFrame) stalls while SwiftShader's GPU process is busy.
  await page.waitForFunction(([sel, n]) => Number(document.querySelector(sel as string)?.getAttribute('data-settled')) > (n as number), [byTestId('dataset'), before], { timeout: timeoutMs, polling: 250 })
    .catch(async (e: Error) => {
      const job = await page.locator(byTestId('data-job')).innerText({ timeout: 1000 }).catch(() => '(no job shown)');
      throw new Error(`the data panel did not settle in ${timeoutMs / 1000} s; it shows: ${job.trim()} (${e.message.split('\n')[0]})`);
    });
  const problem = page.locator(byTestId('dataset-problem'));
  return (await problem.count()) ? problem.innerText() : null;
}

const summary = async (page: Page) => {
  const s = page.locator(byTestId('dataset-summary'));
  return { vocab: Number(await s.getAttribute('data-vocab')), tokens: Number(await s.getAttribute('data-tokens')), cached: await s.getAttribute('data-cached'), text: await s.innerText() };
};

/** Starts the form's run and waits until it is done; returns its card. */
async function trainToEnd(page: Page, t: TestHelpers, check: Check, timeoutMs = 6 * 60_000) {
  const before = await page.locator(byTestId('run')).count();
  await page.locator(byTestId('start')).dispatchEvent('click'); // the GPU process may be busy compiling: a DOM click
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="run"]').length > n, before, { timeout: 10_000, polling: 250 });
  const card = page.locator(byTestId('run')).last();
  const deadline = Date.now() + timeoutMs;
  let reported = 0;
  for (;;) {
    const status = await card.getAttribute('data-status');
    if (status === 'done') return card;
    check(status !== 'error' && status !== 'stopped', `the run ended ${status}: ${await textNow(card.locator(byTestId('run-error')))}`);
    check(Date.now() < deadline, `the run did not finish in ${timeoutMs / 1000} s`);
    if (Date.now() - reported > 20_000) {
      reported = Date.now();
      t.log(`  … ${await card.locator(byTestId('run-status')).innerText().catch(() => '?')}`);
    }
    await page.waitForTimeout(500);
  }
}

export function dataUiTests(check: Check): TestCase[] {
  return [
    {
      name: 'data: a BPE tokenizer trained in the page (cancel keeps the last), the plan follows its vocabulary, micro trains on it',
      timeoutMs: 8 * 60_000,
      async fn(ctx, t) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-data-'));
        try {
          const text = (await readFile('public/data/tinyshakespeare.txt', 'utf8')).slice(0, 40_000);
          await writeFile(path.join(dir, 'verse.txt'), text);
          const page = await openLab(ctx, t);
          const plan = async () => Number(await page.locator(byTestId('plan-total')).getAttribute('data-value'));
          check((await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles(path.join(dir, 'verse.txt')))) === null, `the text file was not taken: ${await textNow(page.locator(byTestId('dataset-problem')))}`);
          const chars = await summary(page);
          check(chars.vocab === new Set(text).size, `char vocabulary ${chars.vocab}, want ${new Set(text).size}`);
          const charPlan = await plan();
          await page.locator(byTestId('bpe-vocab')).fill('320');
          check((await dataAfter(page, () => page.locator(byTestId('bpe-train')).click())) === null, 'BPE training failed');
          const bpe = await summary(page);
          check(bpe.vocab === 320 && bpe.tokens < chars.tokens, `BPE: vocabulary ${bpe.vocab}, ${bpe.tokens} tokens (chars: ${chars.tokens})`);
          const bpePlan = await plan();
          check(bpePlan > charPlan, `the memory plan did not grow with the vocabulary: char ${charPlan} B, BPE-320 ${bpePlan} B`);
          t.log(`  ${bpe.text}; plan ${charPlan} → ${bpePlan} B`);
          // A large vocabulary on a larger corpus takes a while: cancelled, the 320-token tokenizer stays. (8,000 merges
          // on TinyShakespeare alone trained in 0.4 s once the page was warm, before the cancel's click landed.)
          const corpus = await readFile('public/data/tinyshakespeare.txt');
          const x4 = Buffer.concat([corpus, corpus, corpus, corpus]);
          check((await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles({ name: 'shakespeare-x4.txt', mimeType: 'text/plain', buffer: x4 }))) === null, 'shakespeare-x4.txt was not taken');
          await page.locator(byTestId('bpe-vocab')).fill('60000');
          const cancelled = await dataAfter(page, async () => {
            await page.locator(byTestId('bpe-train')).click();
            await page.locator(byTestId('data-job')).waitFor({ timeout: 10_000 });
            await page.waitForTimeout(100);
            await page.locator(byTestId('data-cancel')).click();
          }, 10_000);
          check(/cancelled/.test(cancelled ?? ''), `no word that the preparation was cancelled: ${cancelled}`);
          check((await summary(page)).vocab === 320, 'cancelling lost the previous tokenizer');
          check((await page.locator(byTestId('tokenizer')).inputValue()) === 'bpe', 'the tokenizer setting did not go back');
          const card = await trainToEnd(page, t, check);
          check((await card.locator(byTestId('run-tokenizer')).innerText()).includes('bpe:320'), 'the run does not show its tokenizer');
          const bpb = Number(await card.locator(byTestId('val-bpb')).getAttribute('data-value'));
          check(bpb > 0 && bpb < 20, `val bits/byte ${bpb}`);
          const loss = Number(await card.locator(byTestId('loss-first')).getAttribute('data-value'));
          check(Math.abs(loss - Math.log(320)) < 1.5, `first loss ${loss} is far from ln 320`);
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
    {
      name: 'data: a .jsonl with a chosen text field trains; a binary file is refused by name and the loaded data stays',
      timeoutMs: 7 * 60_000,
      async fn(ctx, t) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-data-'));
        try {
          const lines = Array.from({ length: 60 }, (_, i) => JSON.stringify({ id: i, title: `no. ${i}`, body: `Story ${i}: the cat sat on the mat and looked at the moon for a while. `.repeat(3) }));
          await writeFile(path.join(dir, 'stories.jsonl'), lines.join('\n') + '\n');
          const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13, 0x49, 0x48, 0x44, 0x52]);
          await writeFile(path.join(dir, 'picture.png'), png);
          await writeFile(path.join(dir, 'notes.txt'), png);
          const page = await openLab(ctx, t);
          // No "text" field: the field with the most text is taken, the others offered.
          check((await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles(path.join(dir, 'stories.jsonl')))) === null, 'stories.jsonl was not taken');
          check((await page.locator(byTestId('text-field')).inputValue()) === 'body', `text field chosen: ${await page.locator(byTestId('text-field')).inputValue()}`);
          const offered = await page.locator(`${byTestId('text-field')} option`).allTextContents();
          check(offered.includes('body') && offered.includes('title'), `text fields offered: ${offered.join(', ')}`);
          const bodyTokens = (await summary(page)).tokens;
          check((await dataAfter(page, () => page.locator(byTestId('text-field')).selectOption('title'))) === null, 'the title field was not taken');
          check((await summary(page)).tokens < bodyTokens, 'the title field did not change the data');
          // Back to body: from the token cache.
          check((await dataAfter(page, () => page.locator(byTestId('text-field')).selectOption('body'))) === null, 'the body field was not taken');
          const loaded = await summary(page);
          check(loaded.cached === 'true' && loaded.tokens === bodyTokens, `the body field again did not come from the token cache: ${loaded.text}`);
          check(/60 documents/.test(loaded.text), `summary: ${loaded.text}`);
          for (const bad of ['picture.png', 'notes.txt']) {
            const problem = await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles(path.join(dir, bad)));
            check(problem !== null && problem.includes(bad), `${bad} was not refused by name: ${problem}`);
            t.log(`  ${problem}`);
            check((await page.locator(byTestId('dataset-name')).innerText()) === 'stories.jsonl', `${bad} replaced the loaded data`);
            check((await summary(page)).tokens === loaded.tokens, `${bad} changed the prepared data`);
          }
          const card = await trainToEnd(page, t, check);
          check((await card.locator(byTestId('run-data')).innerText()).includes('stories.jsonl'), 'the run does not name its data');
          check(Number(await card.locator(byTestId('val-bpb')).getAttribute('data-value')) > 0, 'no val bits/byte');
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
    {
      name: 'import: the HF fixture checkpoint (bf16, sharded, tokenizer.json) dropped as files generates text and trains a step; rope scaling is refused by key',
      timeoutMs: 7 * 60_000,
      async fn(ctx, t) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-import-'));
        try {
          const model = ['config.json', 'model.safetensors.index.json', 'model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors'].map((f) => path.join(FIXTURE, 'model', f));
          const tok = ['tokenizer.json', 'tokenizer_config.json'].map((f) => path.join(FIXTURE, 'tokenizer', f));
          const cfg = JSON.parse(await readFile(model[0], 'utf8')) as Record<string, unknown>;
          await writeFile(path.join(dir, 'config.json'), JSON.stringify({ ...cfg, rope_scaling: { rope_type: 'linear', factor: 2 } }));
          const page = await openLab(ctx, t);
          const refused = await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles([path.join(dir, 'config.json'), ...model.slice(1), ...tok]));
          check(refused !== null && refused.includes('rope_scaling'), `rope scaling not refused by key: ${refused}`);
          check((await page.locator(byTestId('imported-model')).count()) === 0, 'a refused checkpoint shows as imported');
          check((await dataAfter(page, () => page.locator(byTestId('dataset-file')).setInputFiles([...model, ...tok]))) === null, `the fixture was not imported: ${await textNow(page.locator(byTestId('dataset-problem')))}`);
          check((await page.locator(byTestId('imported-model')).innerText()).includes('vocabulary 320'), 'the imported model is not shown');
          check((await summary(page)).text.includes('tokenizer.json'), 'the bundled text is not tokenized with the imported tokenizer');
          // Generation from the imported model itself, before any training (greedy, a few tokens).
          const gen = page.locator(`${byTestId('generate')}[data-source="import"]`);
          await gen.locator(byTestId('gen-prompt')).fill('Hello');
          await gen.locator(byTestId('gen-temperature')).fill('0');
          await gen.locator(byTestId('gen-max-tokens')).fill('6');
          await gen.locator(byTestId('gen-start')).click();
          const genStatus = gen.locator(byTestId('gen-status'));
          await page.waitForFunction((el) => el?.getAttribute('data-running') === 'false', await genStatus.elementHandle(), { timeout: 3 * 60_000, polling: 250 });
          const genError = gen.locator(byTestId('gen-error'));
          check((await genError.count()) === 0, `generation from the imported model failed: ${await textNow(genError)}`);
          const genText = await gen.locator(byTestId('gen-output')).innerText();
          t.log(`  imported model generated ${JSON.stringify(genText)}; ${await genStatus.innerText()}`);
          // A random model may pick its end-of-text token early; either way the run must have ended by itself.
          check(/reached the token limit|end-of-text token/.test(await genStatus.innerText()), `generation status: ${await genStatus.innerText()}`);
          await page.locator(byTestId('steps')).fill('1');
          await page.locator(byTestId('eval-every')).fill('1');
          const card = await trainToEnd(page, t, check);
          check((await card.locator(byTestId('run-init')).count()) === 1, 'the run does not say it started from the checkpoint');
          const params = Number(await card.locator(byTestId('params')).getAttribute('data-value'));
          const loss = Number(await card.locator(byTestId('loss-first')).getAttribute('data-value'));
          t.log(`  imported run: ${params} params, first loss ${loss}`);
          check(Number.isFinite(loss) && loss > 0, `first loss ${loss}`);
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
  ];
}
