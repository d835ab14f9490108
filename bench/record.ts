/**
 * The compact record a doc cites for a measured figure (docs/records/<name>.json, a few KB): the
 * command, the commit, the GPU, the date, our figures and the baseline of the same call. Raw logs,
 * per-step metrics and dumps stay out of the tree (runs/, git-ignored); docs/records/README.md says
 * how records are made and cited.
 *
 * As a library: `writeRecord(file, { command, figures, baseline })` (the tuners' and probes'
 * `--record FILE`). As a command, after a device call, from a `bench --json` file and the
 * `torch_baseline.py --json` file of the same call:
 *
 *   node scripts/run-node.mjs bench/record.ts --ours ours.json [--baseline torch.json]
 *        [--out docs/records/NAME.json] [--commit HASH] [--what TEXT]
 *
 * Each of our rows becomes `figures[name]` ("value unit, ms (timer)", with ours/theirs where a
 * baseline row has the same key, as `bench report` matches them); each baseline row
 * `baseline["name [key]"]`. The commit defaults to BENCH_COMMIT, else `git rev-parse --short HEAD`.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { parseArgs } from 'node:util';

export interface CompactRecord {
  command: string | string[];
  commit: string;
  gpu: string;
  date: string;
  figures: Record<string, unknown>;
  baseline: Record<string, unknown> | null;
  what?: string;
}

interface AdapterLike { vendor?: string; device?: string; description?: string }
interface Row { name?: string; key?: string; unit?: string; value?: number; ms?: number; method?: string }
interface BenchFile { command?: string; date?: string; adapter?: AdapterLike; source?: string; device?: string; rows?: Row[] }

/** The commit measured: BENCH_COMMIT (set it on the GPU machine, which has no git), else HEAD here. */
export function currentCommit(): string {
  if (process.env.BENCH_COMMIT) return process.env.BENCH_COMMIT;
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
  } catch {
    return 'unknown';
  }
}

/** "NVIDIA H200, driver 580.159.04 (Dawn adapter nvidia-h200)" from Dawn's adapter info. */
export function gpuOf(adapter: AdapterLike | undefined): string {
  if (!adapter) return 'unknown';
  const driver = /(\d+\.\d+\.\d+)/.exec(adapter.description ?? '')?.[1];
  const name = adapter.device ? adapter.device.split('-').map((w) => w.toUpperCase()).join(' ') : adapter.description?.split(':')[0] || adapter.vendor || 'GPU';
  return name + (driver ? `, driver ${driver}` : '');
}

/** Round to 5 significant digits (integers from 1000 up): the record keeps figures, not noise. */
export function roundFigure(x: number): number {
  if (!Number.isFinite(x) || x === 0) return x;
  const r = Number(x.toPrecision(5));
  return Math.abs(r) >= 1000 ? Math.round(r) : r;
}

function rowText(r: Row): string {
  let s = `${roundFigure(r.value ?? NaN)} ${r.unit ?? ''}`.trim();
  if (r.ms !== undefined) s += `, ${roundFigure(r.ms)} ms`;
  if (r.method) s += ` (${r.method})`;
  return s;
}

/** The record of one `bench --json` file and, if given, the baseline file of the same call. */
export function recordFromBench(ours: BenchFile, theirs?: BenchFile, opts: { commit?: string; what?: string } = {}): CompactRecord {
  const base = new Map<string, Row>();
  for (const r of theirs?.rows ?? []) if (r.key && !base.has(r.key)) base.set(r.key, r);
  const figures: Record<string, string> = {};
  for (const r of ours.rows ?? []) {
    if (r.value === undefined) continue;
    const b = r.key ? base.get(r.key) : undefined;
    figures[r.name ?? r.key ?? `row ${Object.keys(figures).length}`] = rowText(r)
      + (b?.value ? `; ours/theirs ${roundFigure(r.value / b.value)} vs ${b.name}` : '');
  }
  const baseline: Record<string, string> = {};
  for (const r of theirs?.rows ?? []) if (r.value !== undefined) baseline[`${r.name} [${r.key}]`] = rowText(r);
  const local = (c: string) => c.replace(/(--(?:json|from|input|baseline) )\S*\//g, '$1');
  const command = [ours.command ? `bench ${local(ours.command).replace(/^bench /, '')}` : 'bench'];
  if (theirs?.command) command.push(`python3 ${local(theirs.command)}`);
  return {
    ...(opts.what ? { what: opts.what } : {}),
    command,
    commit: opts.commit ?? currentCommit(),
    gpu: gpuOf(ours.adapter) + (theirs?.source ? `; baseline: ${theirs.source} on ${theirs.device ?? 'the same GPU'}` : ''),
    date: ours.date ?? new Date().toISOString(),
    figures,
    baseline: theirs ? baseline : null,
  };
}

/** Write one compact record (pretty JSON, one file); missing fields are filled in. */
export function writeRecord(file: string, rec: Partial<CompactRecord> & Pick<CompactRecord, 'command' | 'figures'>): CompactRecord {
  const full: CompactRecord = {
    ...(rec.what ? { what: rec.what } : {}),
    command: rec.command,
    commit: rec.commit ?? currentCommit(),
    gpu: rec.gpu ?? 'unknown',
    date: rec.date ?? new Date().toISOString(),
    figures: rec.figures,
    baseline: rec.baseline ?? null,
  };
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, JSON.stringify(full, null, 1) + '\n');
  return full;
}

/** The command line of this process as it was typed (tool name, then its arguments). */
export function commandLine(tool: string): string {
  return [tool, ...process.argv.slice(2)].join(' ');
}

// Run as a command (directly, or through scripts/run-node.mjs, which sets argv[1] to the entry).
if (/(^|[\\/])record\.(ts|mjs)$/.test(process.argv[1] ?? '')) {
  const a = parseArgs({ options: {
    ours: { type: 'string' }, baseline: { type: 'string' }, out: { type: 'string' }, commit: { type: 'string' }, what: { type: 'string' },
  } }).values;
  if (!a.ours) {
    console.error('usage: record.ts --ours ours.json [--baseline torch.json] [--out docs/records/NAME.json] [--commit HASH] [--what TEXT]');
    process.exit(2);
  }
  const read = (f: string) => JSON.parse(readFileSync(f, 'utf8')) as BenchFile;
  const rec = recordFromBench(read(a.ours), a.baseline ? read(a.baseline) : undefined, { commit: a.commit, what: a.what });
  if (a.out) writeRecord(a.out, rec);
  else console.log(JSON.stringify(rec, null, 1));
}
