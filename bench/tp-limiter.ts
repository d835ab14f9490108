/**
 * Tensor-parallel time per step over emulated slow links, fp32 against TACO exchange at the four
 * Megatron all-reduces of every layer (src/parallel/tp/group.ts): t in-process ranks on a loopback hub, each
 * endpoint behind a LimitedTransport (its own egress bandwidth and one-way latency). Prints one
 * JSON object (command, date, adapter, link, rows) on stdout, progress on stderr.
 *
 *   node scripts/run-node.mjs bench/tp-limiter.ts --model tiny --degrees 2,4 --mbps 20 --latency 20
 *
 * Options: --model P (default tiny) --codecs fp32,taco --degrees 2,4 --steps N (default 4) --warmup N
 * (default 1) --mbps MB/s per rank uplink (default 20) --latency ms one-way (default 20)
 * --batch B --seq T --cpu. As in dp_limiter: the ranks share one device, so compute takes turns
 * and a rank's commSeconds includes waiting for the others' segments; compare codecs at equal t.
 */
import { fail, num, parseCliArgs, presetArg, UsageError } from '../src/cli/common';
import { PeerGroup } from '../src/peers/collectives/group';
import { limitTransport } from '../src/peers/transport/limiter';
import { LoopbackHub } from '../src/peers/transport/loopback';
import { createTpTrainer } from '../src/parallel/tp/group';
import { acquireNodeGpu } from '../src/engine/gpu/node';
import { median } from '../src/engine/gpu/timer';
import { Runtime } from '../src/engine/gpu/runtime';
import { parseScheme } from '../src/engine/scheme/scheme';
import { defaultTrainOptions } from '../src/engine/train/options';
import { CharTokenizer } from '../src/engine/train/tokenizer/tokenizer';
import { syntheticText } from '../src/lab/step';

/** An integer or number option ≥ min (UsageError, exit 2, otherwise). */
function opt(name: string, v: string | undefined, def: number, min: number, int = true): number {
  return num(name, v, { int, min }) ?? def;
}

async function main(): Promise<void> {
  const a = parseCliArgs(process.argv.slice(2), {
    model: { type: 'string' }, codecs: { type: 'string' }, degrees: { type: 'string' }, steps: { type: 'string' },
    warmup: { type: 'string' }, mbps: { type: 'string' }, latency: { type: 'string' }, batch: { type: 'string' },
    seq: { type: 'string' }, cpu: { type: 'boolean' },
  });
  const preset = presetArg(a.model, 'tiny');
  const codecs = (a.codecs ?? 'fp32,taco').split(',').map((s) => s.trim());
  if (!codecs.every((c) => c === 'fp32' || c === 'taco')) throw new UsageError(`--codecs takes fp32 and/or taco, got '${a.codecs}'`);
  const degrees = (a.degrees ?? '2,4').split(',').map((s) => opt('degrees', s.trim(), 0, 2));
  const steps = opt('steps', a.steps, 4, 1);
  const warmup = opt('warmup', a.warmup, 1, 0);
  const mbps = opt('mbps', a.mbps, 20, 0, false);
  if (mbps <= 0) throw new UsageError('--mbps must be > 0');
  const latencyMs = opt('latency', a.latency, 20, 0, false);
  const batch = a.batch === undefined ? undefined : opt('batch', a.batch, 0, 1);
  const seq = a.seq === undefined ? undefined : opt('seq', a.seq, 0, 1);
  const text = syntheticText(batch ?? 64, seq ?? 512);
  const tokenizer = CharTokenizer.fromText(text);
  const gpu = await acquireNodeGpu({ forceSwiftShader: a.cpu });
  const rt = new Runtime(gpu);
  const link = { bytesPerSecond: mbps * 1e6, latencyMs };
  const rows: { degree: number; codec: string; msPerStep: number; commMs: number; bytesSentPerRank: number; lossLast: number; samplesMs: number[] }[] = [];
  for (const t of degrees) {
    for (const codec of codecs) {
      const scheme = parseScheme({ name: `tp${t}-${codec}`, tp: { degree: t, codec, group: 128 } });
      const opts = defaultTrainOptions(preset, { batch, seq, steps: 1000, evalEvery: 0, scheme, model: { vocab_size: tokenizer.vocabSize } });
      const { transports } = LoopbackHub.group(t);
      const groups = transports.map((tr) => new PeerGroup(limitTransport(tr, link), { runId: 11, timeoutMs: 600_000 }));
      const ranks = await Promise.all(groups.map((g) => createTpTrainer(rt, g, opts, text, { tokenizer })));
      const wall: number[] = [];
      const comm: number[] = [];
      const sent: number[] = [];
      let loss = NaN;
      for (let i = 0; i < warmup + steps; i++) {
        const t0 = performance.now();
        const m = await Promise.all(ranks.map((r) => r.trainStep()));
        if (i < warmup) continue;
        wall.push(performance.now() - t0);
        comm.push(1000 * m[0].comm.commSeconds);
        sent.push(m[0].comm.bytesSent);
        loss = m[0].loss;
      }
      for (const r of ranks) r.destroy();
      for (const tr of transports) tr.close();
      const row = { degree: t, codec, msPerStep: median(wall), commMs: median(comm), bytesSentPerRank: median(sent), lossLast: loss, samplesMs: wall };
      console.error(`  TP ${t} ${codec}: ${row.msPerStep.toFixed(1)} ms/step (rank 0 comm ${row.commMs.toFixed(1)} ms), ${(row.bytesSentPerRank / 1e6).toFixed(3)} MB sent per rank`);
      rows.push(row);
    }
  }
  const speedup = rows.filter((r) => r.codec === 'taco').map((q) => {
    const f = rows.find((r) => r.codec === 'fp32' && r.degree === q.degree);
    return f ? { degree: q.degree, fp32MsPerStep: f.msPerStep, tacoMsPerStep: q.msPerStep, speedup: f.msPerStep / q.msPerStep, bytesRatio: q.bytesSentPerRank / f.bytesSentPerRank } : null;
  }).filter(Boolean);
  console.log(JSON.stringify({
    command: ['tp_limiter', ...process.argv.slice(2)].join(' '), date: new Date().toISOString(), adapter: gpu.adapterInfo,
    model: preset, link, steps, warmup,
    note: 'all ranks share one device: msPerStep includes every rank\'s GPU work in turn; compare codecs at equal degree',
    rows, speedup,
  }, null, 2));
  rt.destroy();
  process.exit(0);
}

main().catch(fail);
