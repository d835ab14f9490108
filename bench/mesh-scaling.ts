/**
 * The full mesh against group size (bench/mesh-sim.ts): one DiLoCo outer exchange — the
 * verified all-reduce of a pseudo-gradient the size of a preset's parameters — among N in-process
 * members, every uplink behind the limiter. No GPU: the pseudo-gradients are random. A table on
 * stderr, one JSON object on stdout.
 *
 *   node scripts/run-node.mjs bench/mesh-scaling.ts --sizes 2,4,8,16,32,64 --model micro --wire int8 --mbps 20 --latency 20
 *
 * Options: --sizes N,N,… (default 2,4,8,16,32,64) --model P (default micro) or --floats N (the
 * vector's length instead) --wire fp32|int8|int4 (default int8) --mbps MB/s per member uplink
 * (default 20) --latency ms one-way (default 20) --deadline-s S per size (default 120: a size
 * not done by then is reported as timed out and the larger ones skipped) --grace ms (the
 * all-reduce's relay grace, default its own) --seed N.
 */
import { cpus } from 'node:os';
import { fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { countParams, PRESETS } from '../src/engine/model/config';
import { WIRE_FORMATS, type WireFormat } from '../src/engine/scheme/wire';
import { benchMesh, type MeshRow } from './mesh-sim';

const fmt = (x: number | undefined, d = 0) => (x === undefined ? '-' : x.toFixed(d));

function line(r: MeshRow): string {
  const bytes = r.bytesSentMin === r.bytesSentMax ? fmt(r.bytesSentMax) : `${fmt(r.bytesSentMin)}–${fmt(r.bytesSentMax)}`;
  return [
    String(r.members).padStart(4), String(r.links).padStart(6), bytes.padStart(12), String(r.formulaBytes).padStart(12),
    fmt(r.uplinkMs, 1).padStart(9), fmt(r.wallMs, 0).padStart(9), fmt(r.memberCryptoMs, 1).padStart(10), fmt(r.memberCodecMs, 1).padStart(9), fmt(r.separateMs, 0).padStart(11),
    `  ${r.status}${r.reason ? `: ${r.reason}` : ''}${r.notices ? ` (${r.notices} members with notices)` : ''}`,
  ].join(' ');
}

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    sizes: { type: 'string' }, model: { type: 'string' }, floats: { type: 'string' }, wire: { type: 'string' },
    mbps: { type: 'string' }, latency: { type: 'string' }, 'deadline-s': { type: 'string' }, grace: { type: 'string' }, seed: { type: 'string' },
  });
  const sizes = (a.sizes ?? '2,4,8,16,32,64').split(',').map((s) => num('sizes', s.trim(), { int: true, min: 2 }) ?? 0);
  if (a.model !== undefined && a.floats !== undefined) throw new UsageError('--model and --floats: give one');
  const preset = presetArg(a.model, 'micro');
  const floats = num('floats', a.floats, { int: true, min: 1 }) ?? countParams(PRESETS[preset]);
  const wire = a.wire ?? 'int8';
  if (!(WIRE_FORMATS as readonly string[]).includes(wire)) throw new UsageError(`--wire must be one of ${WIRE_FORMATS.join(', ')}`);
  const mbps = num('mbps', a.mbps, { min: 0 }) ?? 20;
  if (mbps <= 0) throw new UsageError('--mbps must be > 0');
  const link = { bytesPerSecond: mbps * 1e6, latencyMs: num('latency', a.latency, { min: 0 }) ?? 20 };
  const deadlineMs = 1000 * (num('deadline-s', a['deadline-s'], { min: 0 }) ?? 120);
  if (deadlineMs <= 0) throw new UsageError('--deadline-s must be > 0');
  const graceMs = num('grace', a.grace, { min: 0 });
  const seed = num('seed', a.seed, { int: true, min: 0 }) ?? 1;

  console.error(`${a.floats !== undefined ? 'vector' : preset} ${floats} floats, ${wire} wire, ${mbps} MB/s and ${link.latencyMs} ms per member uplink, ${deadlineMs / 1000} s per size`);
  console.error('   N  links  B sent/member    formula  uplink ms   wall ms  crypto ms  codec ms  separate ms');
  const result = await benchMesh({ sizes, floats, wire: wire as WireFormat, link, deadlineMs, graceMs, seed, onRow: (r) => console.error(line(r)) });
  console.log(JSON.stringify({
    command: ['mesh_scaling', ...process.argv.slice(2)].join(' '),
    date: new Date().toISOString(),
    host: { cpus: cpus().length, node: process.version },
    model: a.floats !== undefined ? null : preset, seed,
    note: 'all members share one JS thread: wallMs holds every member\'s host work in turn; memberCryptoMs / memberCodecMs are one member\'s, timed alone; uplinkMs is formulaBytes at the uplink rate; separateMs (not measured) = uplinkMs + 2 latencies + one member\'s host work: the exchange were each member on its own machine',
    ...result,
  }, null, 2));
  process.exit(0);
}

main().catch(fail);
