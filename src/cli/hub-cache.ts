/**
 * `--init hf:ID[@REV]`: the model downloaded from the Hugging Face Hub (engine/io/hub) into the user's
 * cache, `$LAB_HUB_CACHE` or `<the lab's cache dir>/hub` (tune-cache.ts's labCacheDir), one folder per
 * model and revision holding the repo's files under their own names, so that it is then imported
 * exactly like `--init DIR`. A file is written as NAME.part and renamed once its size is checked; an
 * interrupted download resumes from the .part; `.complete.json` marks a whole model (the next run makes
 * no request). HF_ENDPOINT and HF_TOKEN are read as the Hugging Face tools read them.
 */
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statfsSync, statSync, writeFileSync, writeSync } from 'node:fs';
import path from 'node:path';
import { fetchHubModel, formatHubBytes, hubFitProblem, HubError, hubRefText, parseHubRef, type HubManifest, type HubRef, type HubStore, type HubWriter } from '../engine/io/hub/hub';
import { UsageError } from './common';
import { labCacheDir } from './tune-cache';

const MARK = '.complete.json';

/** The folder of all downloaded models. */
export function hubCacheRoot(env: NodeJS.ProcessEnv = process.env): string {
  return env.LAB_HUB_CACHE ? path.resolve(env.LAB_HUB_CACHE) : path.join(labCacheDir(env), 'hub');
}

/** One model's folder: models--ORG--NAME/REVISION (the revision's '/' kept apart as '--'). */
export function hubModelDir(ref: HubRef, env: NodeJS.ProcessEnv = process.env): string {
  return path.join(hubCacheRoot(env), `models--${ref.id.replace('/', '--')}`, ref.revision.replace(/\//g, '--'));
}

/** The HubStore of one model folder (see the module comment). */
export class DirHubStore implements HubStore {
  constructor(readonly dir: string) {}

  async complete(): Promise<HubManifest | null> {
    const mark = path.join(this.dir, MARK);
    if (!existsSync(mark)) return null;
    try {
      const m = JSON.parse(readFileSync(mark, 'utf8')) as HubManifest;
      // Whole only while every file is there at its size (a file deleted by hand means download again).
      if (m.files.every((f) => existsSync(path.join(this.dir, f.name)) && statSync(path.join(this.dir, f.name)).size === f.bytes)) return m;
    } catch {
      // An unreadable mark is as good as none.
    }
    return null;
  }

  async partial(file: string): Promise<number> {
    const p = path.join(this.dir, `${file}.part`);
    return existsSync(p) ? statSync(p).size : 0;
  }

  async writer(file: string, offset: number): Promise<HubWriter> {
    mkdirSync(this.dir, { recursive: true });
    const part = path.join(this.dir, `${file}.part`);
    const fd = openSync(part, offset > 0 ? 'a' : 'w');
    let open = true;
    const close = () => {
      if (open) closeSync(fd);
      open = false;
    };
    return {
      write: async (chunk) => {
        for (let at = 0; at < chunk.length;) at += writeSync(fd, chunk, at, chunk.length - at);
      },
      commit: async () => {
        close();
        renameSync(part, path.join(this.dir, file));
      },
      abandon: async (keep) => {
        close();
        if (!keep) rmSync(part, { force: true });
      },
    };
  }

  async finish(manifest: HubManifest): Promise<void> {
    writeFileSync(path.join(this.dir, MARK), JSON.stringify(manifest, null, 1) + '\n');
  }
}

/** Free bytes of the file system that holds `dir` (its nearest existing parent); undefined where statfs fails. */
function freeBytes(dir: string): number | undefined {
  let p = dir;
  while (!existsSync(p) && path.dirname(p) !== p) p = path.dirname(p);
  try {
    const s = statfsSync(p);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}

/**
 * Downloads `hf:ID[@REV]` (without the prefix) into the cache, or finds it there; returns its folder.
 * Every refusal (a bad id, 401/403, 404, not Llama, too big, a corrupt file) is a UsageError naming
 * the option; a download that broke off is a plain Error (exit 1); progress goes to stderr in tenths.
 */
export async function fetchHubInit(spec: string, option = '--init', env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const fail = (e: unknown): never => {
    // A download that broke off (network, truncated, a server error) is a failure (exit 1, the .part kept to resume); the rest is bad input (exit 2).
    if (e instanceof HubError && ['network', 'truncated', 'http', 'cancelled'].includes(e.kind)) throw new Error(`${option} hf:${spec}: ${e.message}`);
    if (e instanceof HubError) throw new UsageError(`${option} hf:${spec}: ${e.message}`);
    throw e;
  };
  let ref: HubRef;
  try {
    ref = parseHubRef(spec);
  } catch (e) {
    return fail(e);
  }
  const dir = hubModelDir(ref, env);
  let shown = -1;
  let file = '';
  try {
    const got = await fetchHubModel(ref, {
      store: new DirHubStore(dir), endpoint: env.HF_ENDPOINT, token: env.HF_TOKEN || undefined,
      tokenHint: `run with HF_TOKEN=hf_... (a token from ${(env.HF_ENDPOINT || 'https://huggingface.co').replace(/\/+$/, '')}/settings/tokens)`,
      check: (plan) => {
        const problem = hubFitProblem(plan, { storageAvailable: freeBytes(dir) });
        if (problem) throw new HubError('too-big', `${problem} (the cache is ${hubCacheRoot(env)}; LAB_HUB_CACHE moves it)`);
        console.error(`hub: ${hubRefText(ref)}: ${plan.files.length} files, ${formatHubBytes(plan.totalBytes)}${plan.heldBytes ? `, resuming with ${formatHubBytes(plan.heldBytes)} held` : ''} -> ${dir}`);
      },
      onProgress: (p) => {
        const tenth = Math.floor((10 * p.done) / Math.max(p.total, 1));
        if (tenth > shown || p.file !== file) console.error(`hub: ${p.file} ${formatHubBytes(p.fileDone)} / ${formatHubBytes(p.fileTotal)} (all: ${Math.round((100 * p.done) / Math.max(p.total, 1))}%)`);
        shown = tenth;
        file = p.file;
      },
    });
    if (got.cached) console.error(`hub: ${hubRefText(ref)} from the cache ${dir}`);
  } catch (e) {
    fail(e);
  }
  return dir;
}
