/**
 * The e2e harness behind tests/e2e/run.ts: serves the page (vite build + preview, or the dev server
 * with --dev), launches Debian's Chromium with or without WebGPU, runs the selected tests one by one
 * (PASS/FAIL lines, screenshots, console logs, test-results/e2e/summary.json) and closes the server
 * and the browsers on every exit path (success, failure, watchdog timeout, SIGINT/SIGTERM).
 */
import { mkdir, rm, writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser, type BrowserContext, type Locator, type Page } from 'playwright-core';
import { build, createServer, preview } from 'vite';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const OUT = path.join(ROOT, 'test-results', 'e2e');
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const args = process.argv.slice(2);
const useDev = args.includes('--dev');
const headed = args.includes('--headed');
const only = args.includes('--only') ? args[args.indexOf('--only') + 1] : undefined;
/** Whole-run watchdog: SwiftShader is slow, but a hang must still end the run. */
const WATCHDOG_MS = Number(process.env.E2E_WATCHDOG_MS ?? 45 * 60_000);

const COMMON_FLAGS = [
  '--no-sandbox',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-dev-shm-usage',
  // Keep timers and rAF running in a headless/background page: training is driven by messages.
  '--disable-background-timer-throttling',
  '--disable-renderer-backgrounding',
];
/**
 * Verified on Chromium 156 headless with no GPU: `--enable-unsafe-webgpu` alone yields a
 * SwiftShader adapter (vendor "google", architecture "swiftshader"); Vulkan + SwiftShader ANGLE
 * are named explicitly so the choice does not depend on the machine. Without the flag, Linux
 * Chromium exposes navigator.gpu but returns no adapter: that is the "WebGPU disabled" browser.
 */
const WEBGPU_FLAGS = ['--enable-unsafe-webgpu', '--enable-features=Vulkan', '--use-angle=swiftshader', '--use-webgpu-adapter=swiftshader',
  // As the Node tests' SwiftShader device (src/engine/gpu/node.ts): Dawn's Vulkan path to zero workgroup
  // memory makes SwiftShader compile each tiled pipeline in seconds; Dawn's shader-side zeroing stays.
  '--disable-dawn-features=use_vulkan_zero_initialize_workgroup_memory_extension'];

export interface Ctx {
  url: string;
  gpuBrowser(): Promise<Browser>;
  plainBrowser(): Promise<Browser>;
  /** A WebGPU browser of its own (its own GPU process, so pages compile in parallel); closed at the end. */
  newGpuBrowser(): Promise<Browser>;
  /** A WebGPU browser whose profile (IndexedDB included) lives in `dir`, so it survives closing the browser. */
  persistentGpuContext(dir: string): Promise<BrowserContext>;
}

export interface TestCase {
  name: string;
  timeoutMs: number;
  fn(ctx: Ctx, t: TestHelpers): Promise<void>;
}

export interface TestHelpers {
  /** A fresh page in a fresh context of `browser`; console and page errors are logged for the report. */
  page(browser: Browser, init?: (c: BrowserContext) => Promise<unknown>): Promise<Page>;
  screenshot(page: Page, name: string): Promise<void>;
  /** Where this test's output file `name`.png goes (screenshots of one element). */
  path(name: string): string;
  log(line: string): void;
}

/** The CSS selector of an element's data-testid. */
export const byTestId = (id: string) => `[data-testid="${id}"]`;

/**
 * The text of what `loc` matches now, or `fallback` if nothing does, without waiting. For details in
 * failure messages and optional elements: innerText() on an absent element waits Playwright's 30 s
 * default first (and a check's message is built even when the check passes).
 */
export async function textNow(loc: Locator, fallback = ''): Promise<string> {
  const texts = await loc.allInnerTexts().catch(() => [] as string[]);
  return texts.length ? texts.join(' | ') : fallback;
}

export class AssertionError extends Error {}
export function check(cond: unknown, message: string): asserts cond {
  if (!cond) throw new AssertionError(message);
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout>;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${Math.round(ms / 1000)} s`)), ms);
    }),
  ]);
}

// ---------------------------------------------------------------------------------------------
// Resources, closed on every exit path.
const cleanups: (() => Promise<unknown>)[] = [];
let cleaning: Promise<void> | null = null;
function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const fn of cleanups.reverse()) {
      await withTimeout(fn(), 10_000, 'cleanup').catch((e) => console.error(`cleanup: ${(e as Error).message}`));
    }
  })();
  return cleaning;
}

async function startServer(): Promise<string> {
  const port = await freePort();
  const host = '127.0.0.1';
  if (useDev) {
    const server = await createServer({ root: ROOT, logLevel: 'warn', server: { port, strictPort: true, host } });
    await server.listen();
    cleanups.push(() => server.close());
  } else {
    const outDir = path.join(ROOT, '.cache', 'e2e-dist');
    const t0 = Date.now();
    await build({ root: ROOT, logLevel: 'warn', build: { outDir, emptyOutDir: true, sourcemap: true } });
    console.log(`e2e: built the page in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const server = await preview({ root: ROOT, logLevel: 'warn', build: { outDir }, preview: { port, strictPort: true, host } });
    cleanups.push(() => new Promise<void>((resolve) => server.httpServer.close(() => resolve())));
  }
  return `http://${host}:${port}/`;
}

function launchBrowser(flags: string[]): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM, headless: !headed, args: [...COMMON_FLAGS, ...flags], timeout: 60_000 }).then((browser) => {
    cleanups.push(() => browser.close());
    return browser;
  });
}

async function launchPersistent(dir: string, flags: string[]): Promise<BrowserContext> {
  const context = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM, headless: !headed, args: [...COMMON_FLAGS, ...flags], timeout: 60_000, viewport: { width: 1200, height: 900 },
  });
  cleanups.push(() => context.close());
  return context;
}

function lazyBrowser(flags: string[]): () => Promise<Browser> {
  let b: Promise<Browser> | null = null;
  return () => (b ??= launchBrowser(flags));
}

// ---------------------------------------------------------------------------------------------
async function main(tests: TestCase[]): Promise<number> {
  await rm(OUT, { recursive: true, force: true });
  await mkdir(OUT, { recursive: true });
  const url = await startServer();
  console.log(`e2e: serving ${url} (${useDev ? 'vite dev server' : 'vite build + preview'})`);
  const ctx: Ctx = { url, gpuBrowser: lazyBrowser(WEBGPU_FLAGS), plainBrowser: lazyBrowser([]), newGpuBrowser: () => launchBrowser(WEBGPU_FLAGS),
    persistentGpuContext: (dir) => launchPersistent(dir, WEBGPU_FLAGS) };
  const selected = tests.filter((tc) => !only || new RegExp(only, 'i').test(tc.name));
  const results: { name: string; ok: boolean; seconds: number; error?: string }[] = [];

  for (const [i, tc] of selected.entries()) {
    const slug = `${String(i + 1).padStart(2, '0')}-${tc.name.replace(/[^a-z0-9]+/gi, '-').replace(/^-|-$/g, '').toLowerCase().slice(0, 60)}`;
    const consoleLines: string[] = [];
    const pages: Page[] = [];
    const contexts: BrowserContext[] = [];
    const helpers: TestHelpers = {
      async page(browser, init) {
        const c = await browser.newContext({ viewport: { width: 1200, height: 900 } });
        contexts.push(c);
        if (init) await init(c);
        const p = await c.newPage();
        pages.push(p);
        p.on('console', (m) => consoleLines.push(`[${m.type()}] ${m.text()}`));
        p.on('pageerror', (e) => consoleLines.push(`[pageerror] ${e.message}`));
        // Dedicated workers' console messages arrive here too (Chromium), so no per-worker listener.
        return p;
      },
      async screenshot(page, name) {
        await page.screenshot({ path: helpers.path(name), fullPage: true, timeout: 20_000 });
      },
      path: (name) => path.join(OUT, `${slug}-${name}.png`),
      // E2E_ELAPSED=1 prefixes each line with the seconds since the test began (where its time goes).
      log: (line) => console.log(process.env.E2E_ELAPSED ? `[${((Date.now() - t0) / 1000).toFixed(1)} s] ${line}` : line),
    };
    const t0 = Date.now();
    let error: string | undefined;
    try {
      await withTimeout(tc.fn(ctx, helpers), tc.timeoutMs, 'test');
    } catch (e) {
      error = e instanceof AssertionError ? e.message : (e as Error).stack ?? String(e);
      for (const p of pages) await helpers.screenshot(p, 'failure').catch(() => {});
    }
    for (const c of contexts) await c.close().catch(() => {});
    await writeFile(path.join(OUT, `${slug}.console.log`), consoleLines.join('\n') + '\n');
    const seconds = (Date.now() - t0) / 1000;
    results.push({ name: tc.name, ok: !error, seconds, error });
    console.log(`${error ? 'FAIL' : 'PASS'} ${tc.name} (${seconds.toFixed(1)} s)`);
    if (error) {
      console.log(`     ${error.split('\n').join('\n     ')}`);
      const tail = consoleLines.slice(-15);
      if (tail.length) console.log(`     browser console (last ${tail.length}):\n       ${tail.join('\n       ')}`);
    }
  }

  const passed = results.filter((r) => r.ok).length;
  const failed = results.length - passed;
  await writeFile(path.join(OUT, 'summary.json'), JSON.stringify({ passed, failed, tests: results }, null, 2) + '\n');
  console.log(`e2e: ${passed} passed, ${failed} failed`);
  return failed === 0 && results.length > 0 ? 0 : 1;
}

/** Runs `tests` (those whose name matches --only) and exits the process with 0 if all passed, else 1. */
export async function runSuite(tests: TestCase[]): Promise<never> {
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      console.error(`e2e: ${sig}, cleaning up`);
      void cleanup().finally(() => process.exit(130));
    });
  }
  const watchdog = setTimeout(() => {
    console.error(`e2e: watchdog: the whole run took over ${WATCHDOG_MS / 1000} s, aborting`);
    console.log('e2e: 0 passed, 1 failed');
    void cleanup().finally(() => process.exit(1));
  }, WATCHDOG_MS);

  let code = 1;
  try {
    code = await main(tests);
  } catch (e) {
    console.error(`e2e: setup failed: ${(e as Error).stack ?? e}`);
    await writeFile(path.join(OUT, 'summary.json'), JSON.stringify({ passed: 0, failed: 1, setupError: String(e) }) + '\n').catch(() => {});
    console.log('e2e: 0 passed, 1 failed');
  } finally {
    clearTimeout(watchdog);
    await cleanup();
  }
  process.exit(code);
}
