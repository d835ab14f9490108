/**
 * A run directory's checkpoints on disk, written so that a kill, a full disk or a read-only mount at
 * any moment leaves either the previous checkpoint or the new one, never a mix:
 *   DIR/checkpoints/step-NNNNNNNN/   one checkpoint's files + manifest.json (sizes, SHA-256), written
 *                                    into a temporary folder, fsynced, then renamed into place;
 *   DIR/checkpoints/latest           the name of the newest committed folder, replaced by rename.
 * The top-level export (model.safetensors, config.json, ... for from_pretrained) is written file by
 * file through temporary names with its own manifest.json last; the resumable state is the folder.
 */
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import path from 'node:path';
import { errnoWords } from './common';

export const MANIFEST = 'manifest.json';
const MANIFEST_FORMAT = 'webgpu-lab-manifest-v1';

export type FileSet = Record<string, Uint8Array | string | undefined>;

interface ManifestEntry {
  name: string;
  bytes: number;
  sha256: string;
}

interface Manifest {
  format: string;
  step: number;
  files: ManifestEntry[];
}

/** A checkpoint that cannot be trusted (truncated, mixed, corrupt); the message names the file. */
export class CheckpointError extends Error {
  override name = 'CheckpointError';
}

/**
 * Stages of a commit, in order; `hooks.at(stage)` runs before each (tests throw there to simulate a
 * kill, or an ENOSPC from the file system).
 */
export type CommitStage = 'write-file' | 'write-manifest' | 'rename-folder' | 'write-latest' | 'rename-latest' | 'prune';

export interface StoreHooks {
  at?: (stage: CommitStage, detail: string) => void;
}

const bytesOf = (c: Uint8Array | string) => (typeof c === 'string' ? Buffer.from(c, 'utf8') : c);
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex');

/** Wraps a file-system error so that it names the file and says what failed, in one line. */
export function fsError(e: unknown, what: string, file: string): Error {
  const err = e as NodeJS.ErrnoException;
  const out = new Error(`${what} ${file}: ${errnoWords(e, err.message)}`);
  (out as NodeJS.ErrnoException).code = err.code;
  return out;
}

function writeDurable(file: string, content: Uint8Array): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(file, 'w');
    fs.writeSync(fd, content);
    fs.fsyncSync(fd);
  } catch (e) {
    throw fsError(e, 'could not write', file);
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

function fsyncDir(dir: string): void {
  try {
    const fd = fs.openSync(dir, 'r');
    try {
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
  } catch {
    // Some file systems refuse fsync on a directory; the renames are still ordered after the file syncs.
  }
}

function manifestOf(step: number, files: FileSet): { manifest: Manifest; contents: [string, Uint8Array][] } {
  const contents = Object.entries(files).filter((e): e is [string, Uint8Array | string] => e[1] !== undefined)
    .map(([name, c]) => [name, bytesOf(c)] as [string, Uint8Array]);
  for (const [name] of contents) {
    if (name === MANIFEST || name.includes('/') || name.startsWith('.')) throw new Error(`checkpoint file name not allowed: ${name}`);
  }
  return { manifest: { format: MANIFEST_FORMAT, step, files: contents.map(([name, b]) => ({ name, bytes: b.length, sha256: sha256(b) })) }, contents };
}

/** Writes files and then their manifest into `dir` (which exists), each durable before the next. */
function writeWithManifest(dir: string, step: number, files: FileSet, hooks: StoreHooks, tmpSuffix: string): void {
  const { manifest, contents } = manifestOf(step, files);
  const renames: [string, string][] = [];
  for (const [name, b] of contents) {
    hooks.at?.('write-file', name);
    const final = path.join(dir, name);
    const tmp = tmpSuffix ? `${final}${tmpSuffix}` : final;
    writeDurable(tmp, b);
    if (tmpSuffix) renames.push([tmp, final]);
  }
  hooks.at?.('write-manifest', MANIFEST);
  const mPath = path.join(dir, MANIFEST);
  const mTmp = tmpSuffix ? `${mPath}${tmpSuffix}` : mPath;
  writeDurable(mTmp, Buffer.from(JSON.stringify(manifest, null, 1) + '\n'));
  if (tmpSuffix) {
    // An old manifest would vouch for files being replaced: it goes first, the new one comes last.
    fs.rmSync(mPath, { force: true });
    for (const [a, b] of renames) fs.renameSync(a, b);
    fs.renameSync(mTmp, mPath);
  }
  fsyncDir(dir);
}

/** Reads and checks the manifest of `dir` and every file it lists; returns the files and step. */
export function readVerified(dir: string): { step: number; files: Record<string, Uint8Array> } {
  const mPath = path.join(dir, MANIFEST);
  let manifest: Manifest;
  try {
    manifest = JSON.parse(fs.readFileSync(mPath, 'utf8')) as Manifest;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new CheckpointError(code === 'ENOENT' ? `${mPath} is missing: the checkpoint in ${dir} is incomplete (or was written by an older version)`
      : `${mPath} is not a readable manifest: ${(e as Error).message}`);
  }
  if (manifest?.format !== MANIFEST_FORMAT || !Array.isArray(manifest.files) || !Number.isSafeInteger(manifest.step)) {
    throw new CheckpointError(`${mPath} is not a ${MANIFEST_FORMAT} manifest`);
  }
  const files: Record<string, Uint8Array> = {};
  for (const f of manifest.files) {
    const p = path.join(dir, String(f.name));
    if (typeof f.name !== 'string' || f.name.includes('/') || f.name.includes('\\')) throw new CheckpointError(`${mPath}: bad file name ${JSON.stringify(f.name)}`);
    let b: Uint8Array;
    try {
      b = fs.readFileSync(p);
    } catch {
      throw new CheckpointError(`${p} is missing: the checkpoint is incomplete`);
    }
    if (b.length !== f.bytes) throw new CheckpointError(`${p} has ${b.length} bytes, the manifest says ${f.bytes}: truncated or from another checkpoint`);
    if (sha256(b) !== f.sha256) throw new CheckpointError(`${p} does not match its checksum in ${MANIFEST}: corrupt or from another checkpoint`);
    files[f.name] = b;
  }
  return { step: manifest.step, files };
}

const CKPT_DIR = 'checkpoints';
const LATEST = 'latest';
const stepName = (step: number) => `step-${String(step).padStart(8, '0')}`;

/**
 * Commits one checkpoint of `runDir` at `step`: the previous one stays readable until the new one
 * is complete and named in `latest`; then the previous folder is removed.
 */
export function commitCheckpoint(runDir: string, step: number, files: FileSet, hooks: StoreHooks = {}): void {
  const root = path.join(runDir, CKPT_DIR);
  fs.mkdirSync(root, { recursive: true });
  const name = stepName(step);
  const tmp = path.join(root, `.${name}.tmp-${process.pid}`);
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.mkdirSync(tmp);
  try {
    writeWithManifest(tmp, step, files, hooks, '');
    hooks.at?.('rename-folder', name);
    const final = path.join(root, name);
    fs.rmSync(final, { recursive: true, force: true });
    fs.renameSync(tmp, final);
    fsyncDir(root);
    const previous = latestName(root);
    hooks.at?.('write-latest', LATEST);
    const lTmp = path.join(root, `.${LATEST}.tmp-${process.pid}`);
    writeDurable(lTmp, Buffer.from(name + '\n'));
    hooks.at?.('rename-latest', LATEST);
    fs.renameSync(lTmp, path.join(root, LATEST));
    fsyncDir(root);
    hooks.at?.('prune', previous ?? '');
    if (previous && previous !== name) fs.rmSync(path.join(root, previous), { recursive: true, force: true });
  } catch (e) {
    // Nothing committed is touched: only this attempt's temporary folder goes.
    fs.rmSync(tmp, { recursive: true, force: true });
    throw e;
  }
}

function latestName(root: string): string | null {
  try {
    const n = fs.readFileSync(path.join(root, LATEST), 'utf8').trim();
    return /^step-\d{8}$/.test(n) ? n : null;
  } catch {
    return null;
  }
}

/** The newest committed checkpoint of `runDir`, verified; null when the run never committed one. */
export function readLatestCheckpoint(runDir: string): { step: number; files: Record<string, Uint8Array>; dir: string } | null {
  const root = path.join(runDir, CKPT_DIR);
  const name = latestName(root);
  if (!name) {
    if (fs.existsSync(path.join(root, LATEST))) throw new CheckpointError(`${path.join(root, LATEST)} does not name a checkpoint folder`);
    return null;
  }
  const dir = path.join(root, name);
  return { ...readVerified(dir), dir };
}

/**
 * Writes the run's top-level export (the Hugging Face directory) through temporary names, the
 * manifest last: a reader that checks the manifest never accepts a half-written export.
 */
export function writeExport(dir: string, step: number, files: FileSet, hooks: StoreHooks = {}): void {
  fs.mkdirSync(dir, { recursive: true });
  writeWithManifest(dir, step, files, hooks, `.tmp-${process.pid}`);
}

/**
 * Before anything is written: `out` must be absent or empty unless the run resumes or overwrites,
 * writable, and hold `needBytes` (two checkpoints' worth: the previous stays until the new is whole).
 * Throws an Error whose message names the directory and what to do.
 */
/** `nonEmpty`: what to tell the user to do about a non-empty --out (each CLI offers its own flags). */
export function checkOutDir(out: string, o: { resume?: boolean; overwrite?: boolean; needBytes: number; nonEmpty?: string }): void {
  let entries: string[] | null = null;
  try {
    if (!fs.statSync(out).isDirectory()) throw new Error(`--out ${out} exists and is not a directory`);
    entries = fs.readdirSync(out);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') throw e instanceof Error && e.message.startsWith('--out') ? e : fsError(e, '--out: cannot read', out);
  }
  if (entries && entries.length > 0 && !o.resume && !o.overwrite) {
    throw new Error(`--out ${out} is not empty (${entries.length} entries); ${o.nonEmpty ?? `pass --resume ${out} to continue that run or --overwrite to replace it`}`);
  }
  // The nearest existing ancestor must accept a new file (a read-only mount fails here, not after training).
  let probeDir = path.resolve(out);
  while (!fs.existsSync(probeDir)) probeDir = path.dirname(probeDir);
  const probe = path.join(probeDir, `.write-test-${process.pid}`);
  try {
    fs.writeFileSync(probe, '');
    fs.rmSync(probe);
  } catch (e) {
    throw fsError(e, '--out: cannot write in', probeDir);
  }
  const st = fs.statfsSync(probeDir);
  const free = st.bavail * st.bsize;
  if (free < o.needBytes) {
    throw new Error(`--out ${out}: ${fmtBytes(free)} free on its disk, the run's checkpoints need ${fmtBytes(o.needBytes)}`);
  }
}

function fmtBytes(n: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}
