/**
 * The lab as a place one works in (issue 37), in one page and two micro runs, driven by the keyboard
 * where a user would use it: every control (file pickers included) reached by Tab and opened by Enter; too-short data
 * refused before Start, as is a misspelt custom-config key; Start brings the new run into view with the focus on it; the phases named as
 * they come (compiling with a count that rises, training, evaluating, saving); the export (one zip
 * of the Hugging Face folder) dropped back on the data panel as the next run's starting point, whose
 * first evaluation equals the exporter's last (same weights, same validation batches); the layout at
 * 1400×900 and 390×844, light and dark, with 0 serious axe findings in both.
 */
import { readFile } from 'node:fs/promises';
import { unzipSync } from 'fflate';
import type { Page } from 'playwright-core';
import { byTestId, textNow, type Ctx, type TestCase, type TestHelpers } from './harness';
import { accessibility } from './lab-ui';

type Check = (cond: unknown, message: string) => asserts cond;

const focusedTestId = (page: Page) => page.evaluate(() => document.activeElement?.getAttribute('data-testid') ?? document.activeElement?.tagName ?? '');

/** Presses Tab until an element with one of `ids` has the focus; returns the presses, or -1. */
async function tabTo(page: Page, ids: string[], max: number): Promise<number> {
  for (let n = 1; n <= max; n++) {
    await page.keyboard.press('Tab');
    if (ids.includes(await focusedTestId(page))) return n;
  }
  return -1;
}

/**
 * Opens a file picker from its button by the keyboard (Tab-reachable button focused, Enter) and
 * gives it `files`. What the keyboard must do is checked in the page: Enter clicks the button, which
 * clicks its hidden <input type=file> while the key's user activation holds (what makes a browser
 * show its file dialog). The files then go to that input: headless Chromium shows (and Playwright
 * intercepts) the dialog of a keyboard-made click only some of the time, a click's always.
 */
async function pickByKeyboard(page: Page, button: string, files: Parameters<import('playwright-core').FileChooser['setFiles']>[0]): Promise<void> {
  const input = page.locator(byTestId(button)).locator('xpath=following-sibling::input[@type="file"][1]');
  await page.locator(byTestId(button)).focus();
  const focused = await focusedTestId(page);
  if (focused !== button) throw new Error(`${button} did not take the focus (${focused} has it)`);
  const clicks = await page.evaluate(() => (window as unknown as { __fileClicks: string[] }).__fileClicks.length);
  await page.keyboard.press('Enter');
  const id = await input.getAttribute('data-testid');
  await page.waitForFunction(([n, want]) => (window as unknown as { __fileClicks: string[] }).__fileClicks.slice(n as number).includes(`${want as string} active`), [clicks, id], { timeout: 10_000, polling: 100 })
    .catch(async () => { throw new Error(`Enter on ${button} did not open its file input with user activation: ${await page.evaluate(() => (window as unknown as { __fileClicks: string[] }).__fileClicks.join(', '))}`); });
  await input.setInputFiles(files);
}

/** Waits for the data panel to settle after an action started now. */
async function settled(page: Page, before: string | null): Promise<void> {
  await page.waitForFunction((b) => {
    const el = document.querySelector('[data-testid="dataset"]');
    return el?.getAttribute('data-settled') !== b && !document.querySelector('[data-testid="data-job"]');
  }, before, { timeout: 120_000, polling: 250 });
}

/** Drops files on the data panel through its picker, by the keyboard. */
async function dropByKeyboard(page: Page, files: Parameters<typeof pickByKeyboard>[2]): Promise<void> {
  const before = await page.locator(byTestId('dataset')).getAttribute('data-settled');
  await pickByKeyboard(page, 'dataset-file-button', files);
  await settled(page, before);
}

const num = async (page: Page, card: string, id: string) => Number(await page.locator(`${card} ${byTestId(id)}`).getAttribute('data-value'));

/** Waits for the run to end; returns its final status. */
async function waitDone(page: Page, card: string, t: TestHelpers, ms: number): Promise<string> {
  const deadline = Date.now() + ms;
  let last = 0;
  for (;;) {
    const s = await page.locator(card).getAttribute('data-status');
    if (s === 'done' || s === 'stopped' || s === 'error') return s;
    if (Date.now() > deadline) throw new Error(`run not done in ${ms / 1000} s`);
    if (Date.now() - last > 15_000) {
      last = Date.now();
      t.log(`  … ${await page.locator(`${card} ${byTestId('run-status')}`).innerText().catch(() => '?')}`);
    }
    await page.waitForTimeout(300);
  }
}

/** Starts the form's run by the keyboard (Start focused, Enter); returns the new card's selector. */
async function startByKeyboard(page: Page): Promise<string> {
  const before = await page.locator(byTestId('run')).count();
  await page.locator(byTestId('start')).focus();
  await page.keyboard.press('Enter');
  await page.waitForFunction((n) => document.querySelectorAll('[data-testid="run"]').length > n, before, { timeout: 10_000, polling: 100 });
  const id = await page.locator(byTestId('run')).last().getAttribute('data-run-id');
  return `${byTestId('run')}[data-run-id="${id}"]`;
}

/** Where the new card is, and whether it has the focus. */
async function inView(page: Page, card: string): Promise<{ top: number; bottom: number; height: number; focused: boolean; scrollY: number }> {
  return page.locator(card).evaluate((el) => {
    const r = el.getBoundingClientRect();
    return { top: Math.round(r.top), bottom: Math.round(r.bottom), height: window.innerHeight, focused: document.activeElement === el, scrollY: Math.round(window.scrollY) };
  });
}

export function workplaceTests(check: Check): TestCase[] {
  return [
    {
      name: 'workplace: keyboard-only flow, too-short data refused, the new run in view, phases named, export re-imported with equal loss, 1400/390 light/dark, axe',
      timeoutMs: 15 * 60_000,
      async fn(ctx: Ctx, t: TestHelpers) {
        const page = await t.page(await ctx.gpuBrowser(), (c) => c.addInitScript(() => {
          // Clicks on file inputs, and whether the user's key or click still counted (see pickByKeyboard).
          const files = window as unknown as { __fileClicks: string[] };
          files.__fileClicks = [];
          const click = HTMLInputElement.prototype.click;
          HTMLInputElement.prototype.click = function (this: HTMLInputElement) {
            if (this.type === 'file') files.__fileClicks.push(`${this.getAttribute('data-testid')} ${navigator.userActivation.isActive ? 'active' : 'inactive'}`);
            return click.call(this);
          };
          // Every status a run shows, in order (a poll could miss short phases).
          const w = window as unknown as { __statuses: string[] };
          w.__statuses = [];
          new MutationObserver(() => {
            for (const el of document.querySelectorAll('[data-testid="run-status"]')) {
              const s = el.textContent ?? '';
              if (!w.__statuses.includes(s)) w.__statuses.push(s);
            }
          }).observe(document, { subtree: true, childList: true, characterData: true });
        }));
        await page.setViewportSize({ width: 1400, height: 900 });
        await page.goto(ctx.url);
        await page.locator(byTestId('webgpu-ok')).waitFor({ timeout: 30_000 });

        // Every file picker is reached by Tab (a real button in front of the hidden input).
        const pickers = ['dataset-file-button', 'dataset-folder-button', 'tokenizer-file-button', 'scheme-import-button'];
        const reached = new Set<string>();
        for (let n = 0; n < 400 && reached.size < pickers.length; n++) {
          await page.keyboard.press('Tab');
          const id = await focusedTestId(page);
          if (pickers.includes(id)) reached.add(id);
        }
        check(reached.size === pickers.length, `Tab never reached ${pickers.filter((p) => !reached.has(p)).join(', ')}`);

        // Data too short for one sequence: Start is refused, with the reason, before any compiling.
        await dropByKeyboard(page, { name: 'tiny.txt', mimeType: 'text/plain', buffer: Buffer.from('hello world') });
        check(await page.locator(byTestId('start')).isDisabled(), 'Start is enabled for an 11-character text');
        const why = await page.locator(byTestId('config-problem')).innerText();
        check(/too short.*needs 33/.test(why), `reason for the refusal: ${why}`);
        t.log(`  11 characters: ${why}`);

        // A misspelt key of a custom model config is refused with the nearest valid key (the CLI's check).
        await page.locator(byTestId('custom-model')).check();
        await page.locator(byTestId('custom-model-json')).fill('{"hiden_size": 64}');
        const typo = await page.locator(byTestId('custom-model-problem')).innerText();
        check(typo.includes("did you mean 'hidden_size'") && (await page.locator(byTestId('start')).isDisabled()), `custom config typo: ${typo}`);
        await page.locator(byTestId('custom-model')).uncheck();

        // One more quantized cell can grow the workspace: said beside the total, not only in the collapsed notes.
        await page.locator(byTestId('scheme-preset')).selectOption('agoq');
        const note = await textNow(page.locator(byTestId('plan-workspace-note')));
        check(/Workspace is .* above fp32/.test(note), `no workspace note for agoq: ${note}`);
        t.log(`  agoq: ${note}`);
        // The two predicted-memory bars never read the same.
        const barLabels = [await page.locator(`${byTestId('plan-bar')} .mem-bar-label`).innerText(), await page.locator(`${byTestId('plan-bar-fp32')} .mem-bar-label`).innerText()];
        check(barLabels[0] === 'this scheme (agoq)' && barLabels[1] === 'fp32 baseline', `predicted-memory bar labels: ${barLabels.join(' | ')}`);
        await page.locator(byTestId('scheme-preset')).selectOption('fp32');
        check((await page.locator(byTestId('plan-workspace-note')).count()) === 0, 'a workspace note for fp32');

        // The scheme goes out and back by the keyboard: Export JSON, then Import JSON through its picker.
        await page.locator(byTestId('scheme-export')).focus();
        const exported = page.waitForEvent('download', { timeout: 10_000 });
        await page.keyboard.press('Enter');
        const schemeJson = JSON.parse(await readFile((await (await exported).path())!, 'utf8')) as { name: string };
        await pickByKeyboard(page, 'scheme-import-button', { name: 'kbd.json', mimeType: 'application/json', buffer: Buffer.from(JSON.stringify({ ...schemeJson, name: 'kbd-fp32' })) });
        await page.waitForFunction(() => (document.querySelector('[data-testid="scheme-name"]') as HTMLInputElement | null)?.value === 'kbd-fp32', null, { timeout: 10_000 });

        // A slice of the bundled text as the data of both runs (prepared once; the import keeps it).
        const text = (await readFile('public/data/tinyshakespeare.txt', 'utf8')).slice(0, 60_000);
        await dropByKeyboard(page, { name: 'shakespeare.txt', mimeType: 'text/plain', buffer: Buffer.from(text) });
        check((await page.locator(byTestId('config-problem')).count()) === 0, 'a problem stays after a long enough text');
        await page.locator(byTestId('preset')).selectOption('micro');
        for (const [id, v] of [['steps', 3], ['batch', 2], ['seq', 16], ['seed', 7], ['eval-every', 3], ['eval-batches', 1], ['sample-length', 0]] as const) {
          await page.locator(byTestId(id)).fill(String(v));
        }

        // Start by the keyboard: the card comes into view with the focus; its Stop is a few Tabs away.
        const a = await startByKeyboard(page);
        await page.waitForTimeout(300);
        const atStart = await inView(page, a);
        t.log(`  1400×900 after Start: card top ${atStart.top} px (scrolled ${atStart.scrollY} px), focused ${atStart.focused}`);
        check(atStart.focused, 'the new run\'s card does not have the focus');
        check(atStart.top >= 0 && atStart.top < atStart.height - 100, `the new card is not in view: top ${atStart.top} px of ${atStart.height}`);
        const startBox = await page.locator(byTestId('start')).boundingBox();
        check(startBox && startBox.y >= 0 && startBox.y < 900, `Start is out of view beside the new run (y ${startBox?.y})`);
        const compareTop = await page.locator(byTestId('compare')).evaluate((el) => Math.round(el.getBoundingClientRect().top + window.scrollY));
        check(compareTop < 900, `the comparison starts ${compareTop} px down the page (below the first screen)`);
        const tabs = await tabTo(page, ['stop', 'pause'], 8);
        check(tabs > 0, 'Tab from the new card does not reach its Stop/Pause within 8 presses');
        t.log(`  comparison at ${compareTop} px; Stop/Pause ${tabs} Tab(s) from the card`);

        check((await waitDone(page, a, t, 7 * 60_000)) === 'done', `run A failed: ${await textNow(page.locator(`${a} ${byTestId('run-error')}`))}`);
        // Screenshots only once a run is done: while one compiles, the GPU process that composites the page is busy.
        await t.screenshot(page, 'run-a-1400-light');
        const statuses = await page.evaluate(() => (window as unknown as { __statuses: string[] }).__statuses);
        const counts = statuses.map((s) => /compiling (\d+) GPU pipelines, (\d+) ready/.exec(s)).filter((m) => m !== null).map((m) => Number(m![2]));
        t.log(`  statuses: ${statuses.filter((s) => !/compiling/.test(s)).join(' | ')}`);
        t.log(`  pipelines ready, as shown: ${counts.join(', ')}`);
        check(counts.length >= 2 && counts.at(-1)! > counts[0], `compilation did not count up: ${counts.join(', ')}`);
        for (const p of [/training: step 1 \/ 3 in flight/, /final evaluation/, /saving the checkpoint/]) {
          check(statuses.some((s) => p.test(s)), `no status ${p}: ${statuses.join(' | ')}`);
        }
        const valA = await num(page, a, 'val-loss');
        const lastA = await num(page, a, 'loss-value');

        // Export by the keyboard: one zip holding the run's Hugging Face folder, no run prefix.
        await page.locator(`${a} ${byTestId('export-checkpoint')}`).focus();
        const dl = page.waitForEvent('download', { timeout: 20_000 });
        await page.keyboard.press('Enter');
        const download = await dl;
        const zipPath = (await download.path())!;
        const entries = Object.keys(unzipSync(new Uint8Array(await readFile(zipPath))));
        const folder = entries[0].split('/')[0];
        const names = entries.map((n) => n.slice(folder.length + 1)).sort();
        t.log(`  export ${download.suggestedFilename()}: ${folder}/{${names.join(', ')}}`);
        check(download.suggestedFilename() === `${folder}.zip`, `archive ${download.suggestedFilename()} holds ${folder}/`);
        check(JSON.stringify(names) === JSON.stringify(['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json']), `export files: ${names.join(', ')}`);

        // Dropped back through the data panel's picker (by the keyboard) it is the next run's starting point.
        await dropByKeyboard(page, { name: download.suggestedFilename(), mimeType: 'application/zip', buffer: await readFile(zipPath) });
        const problem = await textNow(page.locator(byTestId('dataset-problem')));
        check(problem === '', `the export was not imported: ${problem}`);
        check((await page.locator(byTestId('imported-model')).count()) === 1, 'no imported model shown');
        // A learning rate too small to move any fp32 weight: its first evaluation is of the exported weights.
        await page.locator(byTestId('lr')).fill('1e-12');
        for (const [id, v] of [['steps', 1], ['eval-every', 1]] as const) await page.locator(byTestId(id)).fill(String(v));

        // The second run starts at 390×844: the settings fold away and the run is in view.
        await page.setViewportSize({ width: 390, height: 844 });
        await page.emulateMedia({ colorScheme: 'dark' });
        const b = await startByKeyboard(page);
        await page.waitForTimeout(300);
        const phone = await inView(page, b);
        t.log(`  390×844 after Start: card top ${phone.top} px (scrolled ${phone.scrollY} px), focused ${phone.focused}`);
        check(phone.focused && phone.top >= 0 && phone.top < 844 - 100, `390×844: the new run is not in view with the focus (top ${phone.top}, focused ${phone.focused})`);
        check(await page.locator(byTestId('setup-summary')).isVisible(), 'the settings did not fold away on the phone');
        check((await waitDone(page, b, t, 7 * 60_000)) === 'done', `run B failed: ${await textNow(page.locator(`${b} ${byTestId('run-error')}`))}`);
        await t.screenshot(page, 'run-b-390-dark');
        const valB = await num(page, b, 'val-loss');
        const firstB = await num(page, b, 'loss-first');
        const firstA = await num(page, a, 'loss-first');
        t.log(`  exporter: first loss ${firstA.toFixed(6)}, last ${lastA.toFixed(6)}, final val ${valA.toFixed(7)}; re-imported: first loss ${firstB.toFixed(6)}, val ${valB.toFixed(7)}`);
        check(Math.abs(valB - valA) < 1e-5, `the re-imported model's validation loss ${valB} differs from the exporter's ${valA}`);
        check(firstB < firstA - 0.1, `the re-imported run starts at loss ${firstB}, like a fresh model (${firstA})`);
        // Two runs one after the other did not share the GPU.
        check((await page.locator(byTestId('shared-gpu-note')).count()) === 0, 'a shared-GPU note for runs that ran one after the other');

        // The comparison by the keyboard: a baseline picked with the arrow keys.
        await page.locator(byTestId('compare-baseline')).focus();
        await page.keyboard.press('ArrowDown');
        check((await page.locator(byTestId('loss-vs-step')).getAttribute('data-baseline')) !== '', 'the keyboard did not pick a baseline');
        await page.keyboard.press('ArrowUp');

        // Layout and accessibility, light and dark, wide and phone (the settings open again, so axe sees them too).
        await page.locator(byTestId('setup-toggle')).press('Enter');
        check(await page.locator(byTestId('start')).isVisible(), 'the settings did not open again from their bar');
        for (const scheme of ['light', 'dark'] as const) {
          await page.emulateMedia({ colorScheme: scheme });
          for (const [width, height] of [[1400, 900], [390, 844]] as const) {
            await page.setViewportSize({ width, height });
            // Charts keep their old width until their resize observers run: poll, do not sample once.
            let wide = Infinity;
            for (let k = 0; k < 20 && wide > width; k++) {
              await page.waitForTimeout(250);
              wide = Number(await page.evaluate('document.documentElement.scrollWidth'));
            }
            check(wide <= width, `${width} px ${scheme}: the page is ${wide} px wide`);
            await t.screenshot(page, `runs-${width}-${scheme}`);
          }
          await accessibility(page, t, check, `two runs, ${scheme}`);
        }
      },
    },
  ];
}
