/**
 * End-to-end check of LoRA fine-tuning in the page (issue 39 item 4), run by tests/e2e/run.ts: the
 * HF fixture imported on the data panel, a LoRA r4 run beside a full fine-tuning run (micro-sized
 * model, two steps each, one at a time so SwiftShader compiles one run's pipelines at once), the
 * comparison showing both with LoRA's smaller predicted memory, text generated from the LoRA run, its
 * export (base + PEFT adapter files) dropped back on the data panel offering to continue the adapters.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import type { Locator, Page } from 'playwright-core';
import { byTestId, textNow, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;

const FIXTURE = path.resolve('tests/fixtures/hf-llama');

/** Waits until the card's run is done (or fails the test with its error). */
async function runToEnd(page: Page, card: Locator, t: TestHelpers, check: Check, timeoutMs = 4 * 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let reported = Date.now();
  for (;;) {
    const status = await card.getAttribute('data-status');
    if (status === 'done') return;
    check(status !== 'error' && status !== 'stopped', `the run ended ${status}: ${await textNow(card.locator(byTestId('run-error')))}`);
    check(Date.now() < deadline, `the run did not finish in ${timeoutMs / 1000} s`);
    if (Date.now() - reported > 20_000) {
      reported = Date.now();
      t.log(`  … ${await card.locator(byTestId('run-status')).innerText().catch(() => '?')}`);
    }
    await page.waitForTimeout(500);
  }
}

/**
 * Sets a checkbox or radio by a DOM click: Playwright's check() waits for the element to be stable,
 * which needs animation frames, and those stall while SwiftShader compiles the other run's pipelines.
 */
async function setChecked(page: Page, id: string, on: boolean): Promise<void> {
  const box = page.locator(byTestId(id));
  if ((await box.isChecked()) !== on) await box.dispatchEvent('click');
}

export function loraUiTests(check: Check): TestCase[] {
  return [
    {
      name: 'lora: the HF fixture fine-tuned with LoRA r4 beside full fine-tuning, compared (LoRA\'s predicted memory smaller), text generated from the LoRA run, its export re-imported continues the adapters',
      timeoutMs: 6 * 60_000,
      async fn(ctx, t) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-lora-'));
        try {
          await loraVsFull(ctx, t, check, dir);
        } finally {
          await rm(dir, { recursive: true, force: true });
        }
      },
    },
  ];
}

async function loraVsFull(ctx: Ctx, t: TestHelpers, check: Check, dir: string): Promise<void> {
  const page = await t.page(await ctx.gpuBrowser());
  await page.goto(ctx.url);
  await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
  for (const [id, v] of [['steps', 2], ['batch', 2], ['seq', 16], ['eval-every', 2], ['eval-batches', 1], ['sample-every', 0], ['sample-length', 0]] as const) {
    await page.locator(byTestId(id)).fill(String(v));
  }
  await setChecked(page, 'queue-runs', true);
  const model = ['config.json', 'model.safetensors.index.json', 'model-00001-of-00003.safetensors', 'model-00002-of-00003.safetensors', 'model-00003-of-00003.safetensors'].map((f) => path.join(FIXTURE, 'model', f));
  const tok = ['tokenizer.json', 'tokenizer_config.json'].map((f) => path.join(FIXTURE, 'tokenizer', f));
  const settled = Number(await page.locator(byTestId('dataset')).getAttribute('data-settled'));
  await page.locator(byTestId('dataset-file')).setInputFiles([...model, ...tok]);
  await page.waitForFunction(([sel, n]) => Number(document.querySelector(sel as string)?.getAttribute('data-settled')) > (n as number), [byTestId('dataset'), settled], { timeout: 60_000, polling: 250 });
  check((await page.locator(byTestId('imported-model')).count()) === 1, `the fixture was not imported: ${await textNow(page.locator(byTestId('dataset-problem')))}`);
  check((await page.locator(byTestId('fine-tune')).innerText()).includes('Fine-tune'), 'no fine-tune choice for the imported model');

  // Full fine-tuning first.
  const start = page.locator(byTestId('start'));
  check(await start.isEnabled(), `Start is disabled: ${await start.getAttribute('title')}`);
  await start.dispatchEvent('click');
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="run"]').length === 1, null, { timeout: 10_000, polling: 250 });

  // LoRA: refused without targets and with a rank above a layer's side, with the reason shown; then r4 on all.
  await setChecked(page, 'ft-lora', true);
  check((await page.locator(byTestId('lora-rank')).inputValue()) === '16' && (await page.locator(byTestId('lora-alpha')).inputValue()) === '32', 'LoRA defaults are not r16, alpha 32');
  for (const tgt of ['q', 'k', 'v', 'o', 'gate', 'up', 'down']) await setChecked(page, `lora-target-${tgt}`, false);
  const problem = page.locator(byTestId('config-problem'));
  check((await problem.innerText()).includes('LoRA needs at least one target layer') && await start.isDisabled(), `no targets: ${await textNow(problem, '(no problem shown)')}`);
  for (const tgt of ['q', 'k', 'v', 'o', 'gate', 'up', 'down']) await setChecked(page, `lora-target-${tgt}`, true);
  await page.locator(byTestId('lora-rank')).fill('4096');
  check(/LoRA rank 4096 exceeds .* smaller side \d+/.test(await problem.innerText()) && await start.isDisabled(), `rank too large: ${await textNow(problem, '(no problem shown)')}`);
  await page.locator(byTestId('lora-rank')).fill('4');
  check((await page.locator(byTestId('lora-alpha')).inputValue()) === '8', 'alpha does not follow 2·rank');
  check(await start.isEnabled(), `Start is disabled for LoRA r4: ${await start.getAttribute('title')}`);
  await start.dispatchEvent('click');
  // One run at a time: the LoRA run waits in the queue, under its label, until the full run is done.
  await page.locator(byTestId('queued')).waitFor({ timeout: 10_000 });
  check((await page.locator(byTestId('queued')).innerText()).includes('LoRA r4'), `queued: ${await page.locator(byTestId('queued')).innerText()}`);
  await page.waitForFunction(() => document.querySelectorAll('[data-testid="run"]').length === 2, null, { timeout: 4 * 60_000, polling: 500 });

  const cards = page.locator(byTestId('run'));
  const [full, lora] = [cards.nth(0), cards.nth(1)];
  const labels = [await full.locator(byTestId('run-label')).innerText(), await lora.locator(byTestId('run-label')).innerText()];
  const fullIsFirst = !labels[0].includes('LoRA');
  const [fullCard, loraCard] = fullIsFirst ? [full, lora] : [lora, full];
  const loraLabel = labels[fullIsFirst ? 1 : 0];
  check(loraLabel.includes('LoRA r4 · q,k,v,o,gate,up,down') && !labels[fullIsFirst ? 0 : 1].includes('LoRA'), `labels: ${labels.join(' | ')}`);

  // The plan's memory per category, side by side: the frozen base has no grads or moments.
  const ids = { full: (await fullCard.getAttribute('data-run-id'))!, lora: (await loraCard.getAttribute('data-run-id'))! };
  const bar = (id: string) => page.locator(byTestId(`mem-plan-${id}`));
  const seg = async (id: string, c: string) => {
    const s = bar(id).locator(`[data-category="${c}"]`);
    return (await s.count()) ? Number(await s.getAttribute('data-bytes')) : 0; // absent: 0, without the 30 s wait of a read
  };
  const total = async (id: string) => Number(await bar(id).getAttribute('data-total'));
  const [fullTotal, loraTotal] = [await total(ids.full), await total(ids.lora)];
  const [fullOpt, loraOpt] = [await seg(ids.full, 'optimizer'), await seg(ids.lora, 'optimizer')];
  t.log(`  predicted memory: full ${fullTotal} B (optimizer ${fullOpt}), LoRA ${loraTotal} B (optimizer ${loraOpt})`);
  check(loraTotal > 0 && loraTotal < fullTotal && loraOpt < fullOpt, `LoRA's predicted memory is not smaller: ${loraTotal} vs ${fullTotal} B, optimizer ${loraOpt} vs ${fullOpt}`);

  await runToEnd(page, fullCard, t, check);
  await runToEnd(page, loraCard, t, check);
  // Loss side by side: both runs in the comparison's loss chart.
  check(Number(await page.locator(byTestId('loss-vs-step')).getAttribute('data-runs')) === 2, 'the loss comparison does not show both runs');
  const loss = Number(await loraCard.locator(byTestId('loss-first')).getAttribute('data-value'));
  check(Number.isFinite(loss) && loss > 0, `LoRA run's first loss ${loss}`);
  check((await loraCard.locator(byTestId('export-merged')).count()) === 1 && (await fullCard.locator(byTestId('export-merged')).count()) === 0, 'the merged-model export is not offered for the LoRA run only');

  // Generation from the LoRA run's checkpoint (base + adapters).
  const gen = loraCard.locator(byTestId('generate'));
  await gen.locator(byTestId('gen-prompt')).fill('Hello');
  await gen.locator(byTestId('gen-temperature')).fill('0');
  await gen.locator(byTestId('gen-max-tokens')).fill('6');
  await gen.locator(byTestId('gen-start')).dispatchEvent('click');
  const genStatus = gen.locator(byTestId('gen-status'));
  await page.waitForFunction((el) => el?.getAttribute('data-running') === 'false', await genStatus.elementHandle(), { timeout: 2 * 60_000, polling: 250 });
  const genError = gen.locator(byTestId('gen-error'));
  check((await genError.count()) === 0, `generation from the LoRA run failed: ${await textNow(genError)}`);
  t.log(`  LoRA run generated ${JSON.stringify(await gen.locator(byTestId('gen-output')).innerText())}; ${await genStatus.innerText()}`);
  check(/reached the token limit|end-of-text token/.test(await genStatus.innerText()), `generation status: ${await genStatus.innerText()}`);

  // The LoRA run's export (frozen base + PEFT adapter files) dropped back on the data panel: it
  // offers to continue the adapters under their LoRA, or to train the merged model.
  const [download] = await Promise.all([page.waitForEvent('download', { timeout: 30_000 }), loraCard.locator(byTestId('export-checkpoint')).dispatchEvent('click')]);
  const zip = path.join(dir, 'lora-export.zip');
  await download.saveAs(zip);
  const zipped = await readFile(zip);
  check(['adapter_config.json', 'adapter_model.safetensors', 'model.safetensors', 'tokenizer.json'].every((f) => zipped.includes(Buffer.from(f))), 'the LoRA export lacks the adapter, base or tokenizer files');
  await setChecked(page, 'ft-full', true);
  const before = Number(await page.locator(byTestId('dataset')).getAttribute('data-settled'));
  await page.locator(byTestId('dataset-file')).setInputFiles(zip);
  await page.waitForFunction(([sel, n]) => Number(document.querySelector(sel as string)?.getAttribute('data-settled')) > (n as number), [byTestId('dataset'), before], { timeout: 60_000, polling: 250 });
  const offer = page.locator(byTestId('imported-adapters'));
  await offer.waitFor({ timeout: 10_000 });
  check((await offer.innerText()).includes('LoRA r4 · q,k,v,o,gate,up,down') && (await offer.getAttribute('data-choice')) === 'merged', `the re-imported export's adapters: ${await offer.innerText()}`);
  await page.locator(byTestId('continue-adapters')).dispatchEvent('click');
  check((await offer.getAttribute('data-choice')) === 'continue' && (await page.locator(byTestId('lora-rank')).inputValue()) === '4', 'continuing the adapters did not pick their LoRA');
  check(await start.isEnabled(), `Start is disabled for continuing the adapters: ${await start.getAttribute('title')}`);
}
