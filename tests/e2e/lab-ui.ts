/**
 * End-to-end checks of the lab page for a first-time user, run by tests/e2e/run.ts:
 *   - a run is never lost: a browser (with a profile kept on disk) is closed 0 and 2.5 s after a
 *     run's last step; opened again, the run is done with its final checkpoint stored, or
 *     interrupted with a stored checkpoint it can resume from; never live, never without one;
 *   - the first page (no training): predictions that say when they apply (stale, "custom", the
 *     description, the pre-flight check against the adapter's limits), errors with examples, no
 *     horizontal scroll at 390 px, dark mode, an axe check, screenshots at 1400/390 px light/dark;
 *   - `compareChecks`, run by the lab test on its three finished runs (no extra training): the
 *     baseline difference, smoothing, brush, legends, the shared-GPU note, renames, bulk removal;
 *   - `generationChecks`, run by the lab test on its restored fp32 run: streamed text, a seed, Stop.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { AxeBuilder } from '@axe-core/playwright';
import type { Locator, Page } from 'playwright-core';
import { byTestId, textNow, type Ctx, type TestCase, type TestHelpers } from './harness';

type Check = (cond: unknown, message: string) => asserts cond;


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

/** Screenshots at 1400 and 390 px, light and dark; at 390 px nothing may be wider than the screen. */
export async function layoutShots(page: Page, t: TestHelpers, check: Check, name: string): Promise<void> {
  for (const scheme of ['light', 'dark'] as const) {
    await page.emulateMedia({ colorScheme: scheme });
    for (const width of [1400, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.waitForTimeout(300); // charts re-measure their container
      const wide = await page.evaluate('document.documentElement.scrollWidth');
      check(Number(wide) <= width, `${name}, ${width} px ${scheme}: the page is ${wide} px wide (horizontal scroll)`);
      await t.screenshot(page, `${name}-${width}-${scheme}`);
    }
  }
  await page.emulateMedia({ colorScheme: 'light' });
  await page.setViewportSize({ width: 1200, height: 900 });
}

/** axe-core on the page as it stands: no serious or critical violation. */
export async function accessibility(page: Page, t: TestHelpers, check: Check, when: string): Promise<void> {
  const r = await new AxeBuilder({ page }).analyze();
  const bad = r.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  for (const v of r.violations) t.log(`  axe (${when}): ${v.impact} ${v.id} × ${v.nodes.length}: ${v.nodes.slice(0, 2).map((n) => n.target.join(' ')).join(' | ')}`);
  check(bad.length === 0, `${when}: ${bad.length} serious accessibility violations: ${bad.map((v) => `${v.id} (${v.nodes.length})`).join(', ')}`);
}

/**
 * The comparison's baseline (issue 35) on the lab test's runs (ids[0] fp32, then two schemes of the
 * same problem): SwiftShader has no shader-f16, so auto is fp32; f16 offers to start its run, says what
 * an f16 run is on this device, and the choice survives a reload.
 */
async function baselineChecks(page: Page, check: Check, ids: string[]): Promise<void> {
  const table = page.locator(byTestId('baseline-table'));
  check((await table.getAttribute('data-kind')) === 'fp32', `auto baseline on SwiftShader: ${await table.getAttribute('data-kind')}`);
  check((await table.locator('thead').innerText()).includes('vs fp32'), 'the table does not say its baseline');
  const rows = table.locator(byTestId('baseline-row'));
  const bases = await rows.evaluateAll((rs) => rs.map((r) => [r.getAttribute('data-run-id'), r.getAttribute('data-base-id'), r.getAttribute('data-memory-pct')]));
  check(bases.length === ids.length - 1 && bases.every(([, b]) => b === ids[0]), `rows against the fp32 run: ${JSON.stringify(bases)}`);
  const agoqMem = Number(bases.find(([r]) => r === ids[1])?.[2]);
  check(agoqMem < 0, `agoq's memory vs fp32: ${agoqMem} %`);
  // Each run against its own baseline: the fp32 run has none of its own, so two curves' runs.
  const chart = page.locator(byTestId('loss-vs-step'));
  await page.locator(byTestId('compare-baseline')).selectOption('@baseline');
  check((await chart.getAttribute('data-runs')) === String(ids.length - 1), `per-run baseline view shows ${await chart.getAttribute('data-runs')} runs`);
  check((await chart.locator('figcaption').innerText()).includes('fp32 baseline'), 'the per-run view does not name its baseline');
  await page.locator(byTestId('compare-baseline')).selectOption('');
  await page.locator(byTestId('baseline-choice')).selectOption('f16');
  check((await table.getAttribute('data-kind')) === 'f16', 'the table did not follow the f16 choice');
  check((await page.locator(byTestId('baseline-twin-note')).innerText()).includes('no shader-f16'), 'no note that f16 runs fp32 here');
  check((await page.locator(byTestId('start-baseline')).count()) === 1, 'not one offer to start the f16 run the three runs share');
  await page.waitForTimeout(300);
  await page.reload();
  await page.locator(byTestId('baseline-table')).waitFor({ timeout: 30_000 });
  check((await page.locator(byTestId('baseline-choice')).inputValue()) === 'f16', 'the baseline choice did not survive a reload');
  await page.locator(byTestId('baseline-choice')).selectOption('auto');
}

/**
 * Generation from a finished run's checkpoint (run by the lab test on its fp32 run after the reload,
 * so no run is trained for it): the text is announced, a seed repeats it, Stop ends a long one.
 */
export async function generationChecks(page: Page, t: TestHelpers, check: Check, card: Locator): Promise<void> {
  await card.locator(byTestId('gen-start')).waitFor({ timeout: 60_000 });
  const out = card.locator(byTestId('gen-output'));
  check((await out.getAttribute('aria-live')) === 'polite', 'the generated text is not announced (aria-live)');
  await card.locator(byTestId('gen-prompt')).fill('ROMEO:');
  await card.locator(byTestId('gen-temperature')).fill('0.8');
  await card.locator(byTestId('gen-top-k')).fill('10');
  await card.locator(byTestId('gen-max-tokens')).fill('12');
  await card.locator(byTestId('gen-seed')).fill('5');
  const status = card.locator(byTestId('gen-status'));
  const generate = async () => {
    await card.locator(byTestId('gen-start')).click();
    await page.waitForFunction((el) => el?.getAttribute('data-running') === 'false', await status.elementHandle(), { timeout: 2 * 60_000, polling: 250 });
    const err = card.locator(byTestId('gen-error'));
    check((await err.count()) === 0, `generation failed: ${await textNow(err)}`);
    return { text: await out.innerText(), status: await status.innerText() };
  };
  const a = await generate();
  t.log(`  generated ${JSON.stringify(a.text)}; ${a.status}`);
  check(a.text.length > 0, 'no text was generated');
  check(/12 tokens · [\d.]+ tokens\/s · reached the token limit/.test(a.status), `status after generating: ${a.status}`);
  check((await generate()).text === a.text, 'the same seed generated different text');
  // Stop: a long generation ends early, saying so.
  await card.locator(byTestId('gen-max-tokens')).fill('10000');
  await card.locator(byTestId('gen-start')).click();
  await page.waitForFunction((el) => (el?.textContent ?? '').length > 0, await out.elementHandle(), { timeout: 60_000, polling: 250 });
  await card.locator(byTestId('gen-stop')).dispatchEvent('click'); // disabled already if the context ended it
  await page.waitForFunction((el) => el?.getAttribute('data-running') === 'false', await status.elementHandle(), { timeout: 60_000, polling: 250 });
  const stopped = await status.innerText();
  check(/stopped( at the context length)?/.test(stopped), `status after Stop: ${stopped}`);
  await accessibility(page, t, check, 'generation panel');
}

/** On the lab test's finished runs: the comparison views and run management. */
export async function compareChecks(page: Page, t: TestHelpers, check: Check, ids: string[]): Promise<void> {
  const chart = page.locator(byTestId('loss-vs-step'));
  const labels = await page.locator(byTestId('run-label')).allInnerTexts();
  check(new Set(labels).size === labels.length, `two runs share a label: ${labels.join(' | ')}`);
  await page.locator(byTestId('compare-baseline')).selectOption(ids[0]);
  check((await chart.getAttribute('data-baseline')) === ids[0], 'the baseline view did not follow the choice');
  check((await chart.locator('figcaption').innerText()).includes('difference from'), 'no "difference from" caption');
  check((await chart.locator('svg path.recharts-curve').count()) >= 3, 'no difference curves drawn');
  await page.locator(byTestId('compare-diff-mode')).selectOption('percent');
  check((await chart.locator('figcaption').innerText()).includes('%'), 'the % view is not said');
  const ticks = await chart.locator('.recharts-yAxis-tick-labels .recharts-cartesian-axis-tick-value').allTextContents();
  check(ticks.some((x) => x.endsWith('%')), `y ticks of the % view: ${ticks.join(' ')}`);
  // A range input takes keys, not fill(): ten steps of 0.05.
  for (let i = 0; i < 10; i++) await page.locator(byTestId('compare-smoothing')).press('ArrowRight');
  check((await page.locator(byTestId('compare-smoothing')).inputValue()) === '0.5', 'smoothing did not follow the slider');
  check((await chart.locator('.recharts-brush').count()) === 1, 'no brush (x zoom) under loss vs step');
  for (const id of ['loss-vs-step', 'loss-vs-time', 'tokens-chart']) {
    check((await page.locator(`${byTestId(id)} .recharts-legend-wrapper`).count()) === 1, `no legend on ${id}`);
  }
  const note = page.locator(byTestId('shared-gpu-note'));
  check((await note.count()) === 1 && (await note.getAttribute('data-runs')) === String(ids.length), 'no note that the runs shared the GPU');
  await page.locator(byTestId('compare')).screenshot({ path: t.path('compare-baseline'), timeout: 20_000 });
  await layoutShots(page, t, check, 'runs');
  await accessibility(page, t, check, 'three finished runs');
  await page.locator(byTestId('compare-baseline')).selectOption('');
  await baselineChecks(page, check, ids);

  // Rename: the new name shows; taking a name in use gets a suffix.
  const rename = async (id: string, name: string) => {
    const card = page.locator(`${byTestId('run')}[data-run-id="${id}"]`);
    await card.locator(byTestId('run-label')).click();
    await card.locator(byTestId('run-label-input')).fill(name);
    await card.locator(byTestId('run-label-input')).press('Enter');
    return card.locator(byTestId('run-label')).innerText();
  };
  check((await rename(ids[1], 'my run')) === 'my run', 'rename did not take');
  check((await rename(ids[2], 'my run')) === 'my run #2', 'a rename to a name in use was not made unique');
  // Bulk removal: one selected, then the rest by Clear history.
  await page.locator(`${byTestId('run')}[data-run-id="${ids[0]}"] ${byTestId('run-select')}`).check();
  await page.locator(byTestId('remove-selected')).click();
  await page.locator(byTestId('confirm-remove')).click();
  check((await page.locator(byTestId('run')).count()) === ids.length - 1, 'Remove selected did not remove the run');
  await page.locator(byTestId('clear-history')).click();
  await page.locator(byTestId('confirm-remove')).click();
  check((await page.locator(byTestId('run')).count()) === 0, 'Clear history left runs');
  await page.waitForTimeout(1500); // deletions are saved at most every second
  await page.reload();
  await page.locator(byTestId('no-run')).waitFor({ timeout: 30_000 });
}

export function labUiTests(check: Check): TestCase[] {
  const STEPS = 3;
  return [
    {
      name: 'first page: predictions say when they apply, errors teach, phone and dark layouts, accessibility',
      timeoutMs: 2 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const page = await t.page(await ctx.gpuBrowser());
        await page.goto(ctx.url);
        await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });
        await layoutShots(page, t, check, 'first-page');
        await accessibility(page, t, check, 'first page');
        const text = (id: string) => page.locator(byTestId(id)).innerText();
        // The description follows edits.
        await page.locator(byTestId('scheme-preset')).selectOption('agoq');
        const presetText = await text('scheme-description');
        await page.locator(byTestId('cell-0-swiglu')).selectOption('int4');
        const edited = await text('scheme-description');
        check(edited.startsWith('Edited from agoq') && edited !== presetText, `description after an edit: ${edited}`);
        // Compute formats beside storage: int8 computes every GEMM in INT8, on the path this adapter
        // would run (SwiftShader has no subgroup matrices: dot4); the plan follows a compute edit.
        const value = (id: string) => page.locator(byTestId(id)).inputValue();
        const planTotal = async () => Number(await page.locator(byTestId('plan-total')).getAttribute('data-value'));
        await page.locator(byTestId('scheme-preset')).selectOption('int8');
        for (const f of ['forward', 'dx', 'dw']) check((await value(`compute-all-${f}`)) === 'int8', `int8's ${f} compute reads ${await value(`compute-all-${f}`)}`);
        check((await value('compute-1-dw_block')) === 'all', 'int8\'s dW block is not "all"');
        const tensorCores = (await page.locator(byTestId('gemm-device')).getAttribute('data-tensor-cores')) === 'true';
        const want = tensorCores ? 'int8-tensor-core' : 'int8-dot4';
        for (const l of ['all', 0, 1]) check((await text(`gemm-path-${l}`)) === want, `GEMM path of layer ${l}: ${await text(`gemm-path-${l}`)}, expected ${want}`);
        t.log(`  int8 GEMM path on this adapter: ${want}`);
        const int8Plan = await planTotal();
        await page.locator(byTestId('compute-all-dw')).selectOption('fp32');
        check((await text('gemm-path-0')) === `${want} / ${want} / fp32`, `SwitchBack-style path: ${await text('gemm-path-0')}`);
        check(await page.locator(byTestId('compute-all-dw_block')).isDisabled(), 'the dW block is editable with an fp32 dW');
        check((await planTotal()) < int8Plan, `the plan did not drop dW's INT8 operand buffers: ${await planTotal()} vs ${int8Plan} B`);
        // A combination the engine refuses: its message, and Start refused with it.
        await page.locator(byTestId('compute-all-dx')).selectOption('fp32');
        await page.locator(byTestId('compute-0-grad_rounding')).selectOption('stochastic');
        const computeProblem = await text('scheme-compute-problem');
        check(/^scheme 'int8-custom': compute formats this model cannot run:\s+layer 0 compute: grad_rounding 'stochastic'/.test(computeProblem), `compute problem: ${computeProblem}`);
        check(await page.locator(byTestId('start')).isDisabled(), 'Start is enabled for compute formats the model cannot run');
        check((await text('config-problem')).includes('grad_rounding \'stochastic\''), `the form does not say why: ${await text('config-problem')}`);
        check((await text('gemm-path-0')) === '—' && (await text('gemm-path-all')) === '—', 'a refused scheme still shows GEMM paths');
        await accessibility(page, t, check, 'scheme editor with a compute problem');
        await page.locator(byTestId('scheme-editor')).screenshot({ path: t.path('scheme-compute-problem'), timeout: 20_000 });
        await page.locator(byTestId('compute-0-grad_rounding')).selectOption('nearest');
        check((await page.locator(byTestId('scheme-compute-problem')).count()) === 0 && (await page.locator(byTestId('start')).isEnabled()), 'the compute problem stays after the fix');
        // Every scheme column explains itself.
        for (const th of await page.locator('[data-testid^="col-"]').all()) check(((await th.getAttribute('title')) ?? '').includes(':'), 'a scheme column has no tooltip');
        // Scheme JSON in the grid's short form is refused with the accepted form.
        await page.locator('.scheme-json summary').click();
        await page.locator(byTestId('scheme-json')).fill(JSON.stringify({ name: 'x', layer: { saved: { norm_input: 'int4' } } }));
        await page.locator(byTestId('scheme-apply')).click();
        check(/norm_input: expected an object.*e\.g\. \{"format":"int4"/.test(await text('scheme-error')), `scheme error: ${await text('scheme-error')}`);
        // A custom config: the dropdown says "custom"; invalid JSON marks the plan stale and teaches.
        await page.locator(byTestId('custom-model')).check();
        check((await page.locator(byTestId('preset')).inputValue()) === '', 'the model dropdown does not show "custom"');
        check((await page.locator(`${byTestId('preset')} option:checked`).innerText()).startsWith('custom'), 'the dropdown does not read "custom"');
        const json = page.locator(byTestId('custom-model-json'));
        const valid = await json.inputValue();
        await json.fill(valid.replace(/"hidden_size": \d+/, '"hidden_size": "wide"'));
        check((await page.locator(byTestId('memory-plan')).getAttribute('data-stale')) === 'true', 'the plan is not marked stale');
        check((await text('custom-model-problem')).includes('e.g.'), `custom config error gives no example: ${await text('custom-model-problem')}`);
        check(await page.locator(byTestId('start')).isDisabled(), 'Start is enabled with an invalid custom config');
        // 96 layers × 8192 wide: the pre-flight check disables Start and says which buffer.
        const cfg = JSON.parse(valid) as Record<string, number>;
        await json.fill(JSON.stringify({ ...cfg, hidden_size: 8192, intermediate_size: 22016, num_hidden_layers: 96, num_attention_heads: 64, num_key_value_heads: 64 }));
        check((await page.locator(byTestId('memory-plan')).getAttribute('data-stale')) === 'false', 'the plan stays stale after a valid config');
        const pre = page.locator(byTestId('preflight-problem'));
        check((await pre.count()) === 1 && /maxBufferSize|maxStorageBufferBindingSize/.test(await pre.innerText()), 'no pre-flight problem for a 1 TiB plan');
        check(await page.locator(byTestId('start')).isDisabled(), 'Start is enabled for a plan the adapter cannot hold');
        t.log(`  ${await pre.innerText()}`);
        await t.screenshot(page, 'preflight');
        await page.locator(byTestId('preset')).selectOption('micro');
        check((await page.locator(byTestId('custom-model')).isChecked()) === false, 'picking a preset kept the custom config');
        check(await page.locator(byTestId('start')).isEnabled(), 'Start stays disabled after going back to micro');
      },
    },
    {
      // One run per browser session (each fresh page compiles its pipelines: minutes on SwiftShader);
      // an evaluation and a checkpoint per step, so the last step is followed by seconds of work.
      name: 'a browser closed 0, 1.2 and 3 s after the last step finds the run done with its final checkpoint, or resumable',
      timeoutMs: 10 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const dir = await mkdtemp(path.join(os.tmpdir(), 'lab-profile-'));
        const moments = [0, 1200, 3000];
        let previous: { id: string; moment: number } | null = null;
        let compileSeen: string | null = null;
        const startStatuses = new Set<string>();
        try {
          for (let k = 0; k <= moments.length; k++) {
            const context = await ctx.persistentGpuContext(dir);
            // Every status the page renders, not only those a poll happens to see: a compile that
            // hits the profile's shader cache shows its count for a few milliseconds.
            await context.addInitScript(() => {
              const w = window as unknown as { __statuses: string[] };
              w.__statuses = [];
              new MutationObserver(() => {
                for (const el of document.querySelectorAll('[data-testid="run-status"]')) {
                  const s = el.textContent ?? '';
                  if (w.__statuses.at(-1) !== s) w.__statuses.push(s);
                }
              }).observe(document, { subtree: true, childList: true, characterData: true });
            });
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
              check(compileSeen, `the status never said how many pipelines were compiling; it said: ${[...startStatuses].join(' | ')}`);
              t.log(`  seen: ${compileSeen}`);
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
            // A checkpoint after every step: a close right after the last one finds an earlier step's to resume from.
            await fill('checkpoint-every', 1);
            const before = await page.locator(byTestId('run')).count();
            await page.locator(byTestId('start')).dispatchEvent('click');
            await page.waitForFunction((n) => document.querySelectorAll('[data-testid="run"]').length > n, before, { timeout: 10_000, polling: 250 });
            const card = page.locator(byTestId('run')).last();
            const id = (await card.getAttribute('data-run-id'))!;
            const deadline = Date.now() + 3 * 60_000;
            while ((await card.locator(byTestId('step')).getAttribute('data-value')) !== String(STEPS)) {
              check(Date.now() < deadline, 'the run did not reach its last step in 3 minutes');
              // textNow: innerText() on the absent run-error would wait 30 s a poll, so the close would not follow the last step.
              check((await card.getAttribute('data-status')) !== 'error', `the run failed: ${await textNow(card.locator(byTestId('run-error')))}`);
              await page.waitForTimeout(50);
            }
            const statuses = await page.evaluate(() => (window as unknown as { __statuses: string[] }).__statuses);
            compileSeen ??= statuses.find((s) => /compiling \d+ GPU pipelines/.test(s)) ?? null;
            for (const s of statuses) if (/^starting/.test(s)) startStatuses.add(s);
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
