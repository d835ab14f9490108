/** Shared bits of the Node command-line tools: errors that exit cleanly, file helpers, the default corpus. */
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** A user error: printed as one line, exit code 2, no stack trace. */
export class UsageError extends Error {}

export function fail(e: unknown): never {
  if (e instanceof UsageError) {
    console.error(`error: ${e.message}`);
    process.exit(2);
  }
  const msg = e instanceof Error ? e.message : String(e);
  console.error(`error: ${msg}`);
  if (process.env.LAB_DEBUG && e instanceof Error) console.error(e.stack);
  process.exit(1);
}

export function num(name: string, v: string | undefined, opts: { int?: boolean; min?: number } = {}): number | undefined {
  if (v === undefined) return undefined;
  const x = Number(v);
  if (!Number.isFinite(x) || (opts.int && !Number.isInteger(x)) || (opts.min !== undefined && x < opts.min)) {
    throw new UsageError(`--${name} expects ${opts.int ? 'an integer' : 'a number'}${opts.min !== undefined ? ` >= ${opts.min}` : ''}, got '${v}'`);
  }
  return x;
}

/** The bundled TinyShakespeare corpus, found from the working directory or from this file's location. */
export function defaultCorpusPath(): string {
  const rel = path.join('public', 'data', 'tinyshakespeare.txt');
  const here = path.dirname(fileURLToPath(import.meta.url));
  for (const base of [process.cwd(), path.resolve(here, '..', '..'), path.resolve(here, '..'), here]) {
    const p = path.join(base, rel);
    if (existsSync(p)) return p;
  }
  throw new UsageError(`the bundled corpus ${rel} was not found; pass --data FILE`);
}
