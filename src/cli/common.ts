/** Shared bits of the Node command-line tools: errors that exit cleanly, file helpers, the default corpus. */
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { suggestKey } from '../engine/util/keys';

/** A user error: printed as one line, exit code 2, no stack trace. */
export class UsageError extends Error {}

/** A message as one line: the lines of a multi-line one (zod issues, lists of problems) joined by '; '. */
export function oneLine(msg: string): string {
  return msg.split('\n').map((l) => l.trim()).filter(Boolean).join('; ').replace(/:;/g, ':');
}

export function fail(e: unknown): never {
  if (e instanceof UsageError) {
    console.error(`error: ${oneLine(e.message)}`);
    process.exit(2);
  }
  const msg = e instanceof Error ? e.message : String(e);
  console.error(`error: ${oneLine(msg)}`);
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

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * parseArgs with the tools' error contract: a negative number after a string option is its value
 * (`--steps -1` is `--steps=-1`, so the range check can say what is expected), and a parse error is
 * one UsageError line naming the option (with the nearest known one for a misspelling).
 */
export function parseCliArgs<O extends Options>(argv: string[], options: O) {
  const args: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].startsWith('--') ? argv[i].slice(2) : null;
    if (name && options[name]?.type === 'string' && /^-[\d.]/.test(argv[i + 1] ?? '')) args.push(`${argv[i]}=${argv[++i]}`);
    else args.push(argv[i]);
  }
  try {
    return parseArgs({ args, options, strict: true, allowPositionals: false }).values;
  } catch (e) {
    const err = e as NodeJS.ErrnoException;
    const opt = /'(-[^' ]+)/.exec(err.message)?.[1] ?? '';
    const names = Object.keys(options);
    if (err.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION') throw new UsageError(`unknown option '${opt}'${suggestKey(opt.replace(/^-+/, ''), names).replace(/'(?=[a-z])/, "'--")}; see --help`);
    if (err.code === 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL') throw new UsageError(`unexpected argument ${/'([^']*)'/.exec(err.message)?.[0] ?? ''}: every value follows its option (see --help)`);
    if (err.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
      const name = opt.replace(/^-+/, '').replace(/ .*/, '');
      throw new UsageError(options[name]?.type === 'boolean' ? `--${name} takes no value` : `--${name} expects a value`);
    }
    throw new UsageError(oneLine(err.message));
  }
}

/** --model's value (a preset name), or `fallback` when it is not given. */
export function presetArg(v: string | undefined, fallback: PresetName): PresetName {
  if (v === undefined) return fallback;
  if (!(PRESET_NAMES as readonly string[]).includes(v)) throw new UsageError(`--model must be one of ${PRESET_NAMES.join(', ')}, got '${v}'`);
  return v as PresetName;
}

/** A file-system error in words a user reads (the errno code when there are none). */
export function errnoWords(e: unknown, fallback = 'cannot read'): string {
  const err = e as NodeJS.ErrnoException;
  switch (err?.code) {
    case 'ENOENT': return 'no such file';
    case 'EISDIR': return 'is a directory';
    case 'EACCES': case 'EPERM': return 'permission denied';
    case 'ENOSPC': return 'the disk is full';
    case 'EROFS': return 'the file system is read-only';
    default: return err?.code ?? fallback;
  }
}

/**
 * A user-named text file (JSON, training text), read as UTF-8; a missing file, a directory or
 * binary content (NUL bytes, invalid UTF-8) is a UsageError naming the option, never echoing bytes.
 */
export function readTextFile(option: string, file: string, what: string): string {
  let b: Buffer;
  try {
    b = readFileSync(file);
  } catch (e) {
    throw new UsageError(`${option} ${file}: ${errnoWords(e)} (expected ${what})`);
  }
  let text: string | null = null;
  if (!b.includes(0)) {
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(b);
    } catch {
      text = null;
    }
  }
  if (text === null) throw new UsageError(`${option} ${file} is not a text file (binary content); expected ${what}`);
  return text;
}

/** A user-named JSON file holding an object; errors name the option and the file. */
export function readJsonObject(option: string, file: string, what: string): Record<string, unknown> {
  const text = readTextFile(option, file, what);
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new UsageError(`${option} ${file} is not valid JSON (${(e as Error).message.split('\n')[0].slice(0, 120)}); expected ${what}`);
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new UsageError(`${option} ${file} holds no JSON object; expected ${what}`);
  return v as Record<string, unknown>;
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
