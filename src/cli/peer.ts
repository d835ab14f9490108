/**
 * npm run peer -- --join <link> | --host: a headless member of a peer group, in Node (WebRTC from
 * @roamhq/wrtc), so that a GPU server without a display can join a browser group and tests and
 * benchmarks can form groups without a browser. It joins (or creates) the room, waits to be admitted,
 * prints the roster, then stays in the group and reports joins, leaves and problems until stopped.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import type { GradWire } from '../engine/scheme/wire';
import type { DilocoConfig } from '../parallel/diloco/diloco';
import type { DpEvent } from '../parallel/dp/dp';
import { DILOCO_ARGS, DILOCO_FLAGS, dilocoArgs } from './diloco-args';
import { createParallelTrainer, memberInit } from '../parallel/factory';
import { describeIce, type IceConfig, parseIce } from '../peers/transport/ice';
import { type LinkLimits, limitTransport } from '../peers/transport/limiter';
import { installNodeWebRtc } from '../peers/transport/node-webrtc';
import { type PeerProblem, PeerJsTransport } from '../peers/peerjs/peerjs';
import { createRoomId, type ParsedRoomLink, PEER_SERVER_PATH, parseRoomLink, parseServerUrl, type PeerServerAddress, roomLink, sameOriginServer } from '../peers/room/room';
import { formatRoster } from '../peers/room/roster';
import { acquireNodeGpu } from '../engine/gpu/node';
import { Runtime } from '../engine/gpu/runtime';
import { PRESET_NAMES, type PresetName } from '../engine/model/config';
import { dataParallelScheme } from '../engine/scheme/presets';
import { runTraining } from '../engine/train/loop';
import { defaultRunSpec, type RunSpec, specWithOptions, stepsOf, trainOptionsOf, cadenceOf, validateRunSpec } from '../engine/run/spec';
import { CharTokenizer } from '../engine/train/tokenizer/tokenizer';
import type { Trainer } from '../engine/train/trainer';
import { paramLayout } from '../engine/model/params';
import { checkOutDir } from './checkpoint-store';
import { followGroup } from './peer-follow';
import { defaultCorpusPath, fail, num, parseCliArgs, presetArg, readJsonObject, UsageError } from './common';
import { INTERRUPTED_EXIT } from './interrupt';
import { groupTuneShare, prepareRunKernels, runTuneCache, runTuning } from './tune-cache';
import { runTuningStatus, type TuneCache } from '../engine/tune';
import { RunDir, runDiskBytes } from './run-dir';
import { resumePoint } from './train-options';

const DEFAULT_PAGE = 'http://localhost:5173/';

const HELP = `usage: npm run peer -- --join LINK [options]
       npm run peer -- --host [options]
  --join LINK          join the room of a link (http://host:5173/?room=...)
  --host               create a room and print its link
  --passphrase X       the room's passphrase (never sent: members prove they know it)
  --server URL         PeerServer, http(s)://host:port/path (default: the link's ?server=, else the
                       link's origin + ${PEER_SERVER_PATH}; with --host: the --page origin + ${PEER_SERVER_PATH})
  --page URL           with --host: the lab page the printed link opens (default ${DEFAULT_PAGE})
  --ice SPEC           ICE servers: [USER:SECRET@]stun:|turn:HOST:PORT[,...] or a JSON array of
                       RTCIceServer (default none: host candidates only, nothing outside contacted)
  --ice-relay-only     relayed candidates only (every link through the TURN server of --ice)
  --timeout S          seconds to wait for admission (default 30)
  --peer-timeout S     drop a peer silent this long (default 10)
  --once               print the roster once admitted and exit (scripts, health checks)
  --follow             follow the group's panel: train whatever run a member starts there (its
                       configuration, Start and Stop), joining a running one late, as a page does;
                       on this machine's GPU (--cpu: SwiftShader). Ctrl-C leaves the group
  --min-members N      wait until the group has N members (this one included) before going on
                       (default 2 with --train, else 1); with --train, the N members present then
                       start together, and a member that finds more than N joins their running group
  --quorum-timeout S   seconds to wait for them (default 120)
  --train              once admitted, train data-parallel with the group (src/parallel/dp/dp.ts) on the
                       bundled corpus; every member must train the same configuration:
    --model P --steps N --seed S   preset (default micro), steps and seed (preset's defaults)
    --mode fp32|int8               gradient exchange (default int8: AGoQ's 8-bit all-reduce)
    --diloco H                     DiLoCo instead (src/parallel/diloco/diloco.ts): H local AdamW steps, then the
                                   pseudo-gradients' all-reduce and a Nesterov outer step
      --wire fp32|int8|int4        the pseudo-gradients on the wire (default int8)
      --outer-lr X --outer-momentum M   the outer optimizer (default 0.7 and 0.9)
      --streaming F                streaming DiLoCo: F layer fragments on a rotation, overlapped
      --overlap T                  with --streaming: inner steps a fragment's exchange may take (default 1)
    --run NAME                     run name shared by the members (default lab)
    --out DIR                      run.json, metrics.jsonl, checkpoints/ and the export, as npm run train
                                   writes them (default runs/peer-<model>-<time>; must be new or empty)
    --resume DIR                   continue this member's run in DIR from its last checkpoint (its options
                                   come from DIR/run.json; flags that differ are refused)
    --checkpoint-every N           commit DIR/checkpoints every N steps (default 100; 0 = only at the end)
    --cpu                          use the SwiftShader CPU adapter even when a GPU is present
    --tune                         first tune the kernel choices this run makes that the tuning cache lacks
                                   on this GPU (npm run tune; every run uses what the cache holds)
    --link MBPS[:MS]               send the training traffic through a link of MBPS MB/s and MS ms one
                                   way (the project's limiter: to measure a group as over a slower network)`;

interface TrainCliOptions {
  preset: PresetName;
  mode: GradWire;
  /** The run spec: options, cadence and strategy (dp over --mode, or --diloco's). */
  spec: RunSpec;
  run: string;
  cpu: boolean;
  out: string;
  /** --link: the training traffic through the limiter, as over a slower network. */
  link?: LinkLimits;
  /** --resume: continue the run in `out` from its last checkpoint. */
  resume: boolean;
  /** --tune: tune what the tuning cache lacks before the model is built (cli/tune-cache.ts). */
  tune?: boolean;
  /** --diloco H and its flags (absent: per-step data parallel). */
  diloco?: DilocoConfig;
}

interface PeerCliOptions {
  room: string;
  server: PeerServerAddress;
  passphrase?: string;
  host: boolean;
  /** The link printed for --host. */
  link?: string;
  admitTimeoutMs: number;
  peerTimeoutMs: number;
  once: boolean;
  minMembers: number;
  quorumTimeoutMs: number;
  train: TrainCliOptions | null;
  ice: IceConfig;
  /** --follow: the group's panel drives this member (peer-follow.ts); with its link when joining. */
  follow: { link: ParsedRoomLink | null; page: string; cpu: boolean } | null;
}

function parseOptions(argv: string[]): PeerCliOptions | null {
  const a = parseCliArgs(argv, {
    join: { type: 'string' }, host: { type: 'boolean' }, passphrase: { type: 'string' }, server: { type: 'string' },
    page: { type: 'string' }, timeout: { type: 'string' }, 'peer-timeout': { type: 'string' }, once: { type: 'boolean' },
    train: { type: 'boolean' }, model: { type: 'string' }, steps: { type: 'string' }, seed: { type: 'string' },
    mode: { type: 'string' }, run: { type: 'string' }, cpu: { type: 'boolean' }, help: { type: 'boolean', short: 'h' },
    'min-members': { type: 'string' }, 'quorum-timeout': { type: 'string' }, out: { type: 'string' }, 'checkpoint-every': { type: 'string' },
    resume: { type: 'string' }, ice: { type: 'string' }, 'ice-relay-only': { type: 'boolean' }, follow: { type: 'boolean' },
    ...DILOCO_ARGS, link: { type: 'string' }, tune: { type: 'boolean' },
  });
  if (a.help) return null;
  if ((a.join === undefined) === !a.host) throw new UsageError('give exactly one of --join LINK or --host (see --help)');
  const admitTimeoutMs = (num('timeout', a.timeout, { min: 0 }) ?? 30) * 1000;
  const peerTimeoutMs = (num('peer-timeout', a['peer-timeout'], { min: 1 }) ?? 10) * 1000;
  let train: TrainCliOptions | null = null;
  if (a.follow && (a.train || a.once)) throw new UsageError('--follow takes its runs from the group; it does not go with --train or --once');
  if (a.follow && (a.model || a.steps || a.seed || a.mode || a.run || a.out || a['checkpoint-every'] || a.resume !== undefined)) {
    throw new UsageError('--follow trains what the group starts: --model, --steps, --seed, --mode, --run, --out, --checkpoint-every and --resume go with --train');
  }
  const dilocoFlags = DILOCO_FLAGS.some((k) => a[k] !== undefined);
  if (dilocoFlags && a.diloco === undefined) throw new UsageError('--wire, --streaming, --overlap, --outer-lr and --outer-momentum go with --diloco H');
  if (a.diloco !== undefined && (!a.train || a.resume !== undefined)) throw new UsageError('--diloco goes with --train, and a DiLoCo run cannot be resumed from the CLI yet');
  if (a.link !== undefined && !a.train) throw new UsageError('--link goes with --train');
  if (a.train && a.resume !== undefined) {
    train = resumeOptions(a, a.resume);
  } else if (a.train) {
    const preset = presetArg(a.model, 'micro');
    const mode = a.mode ?? 'int8';
    if (mode !== 'fp32' && mode !== 'int8') throw new UsageError(`--mode must be fp32 or int8, got '${mode}'`);
    const out = a.out ?? path.join('runs', `peer-${preset}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    const diloco = a.diloco === undefined ? undefined : dilocoArgs(a, 1);
    const spec = peerRunSpec(preset, mode, diloco, {
      steps: num('steps', a.steps, { int: true, min: 1 }), seed: num('seed', a.seed, { int: true, min: 0 }),
      checkpointEvery: num('checkpoint-every', a['checkpoint-every'], { int: true, min: 0 }),
    });
    train = { preset, mode, spec, run: a.run ?? 'lab', cpu: a.cpu ?? false, out, resume: false, diloco };
  } else if (!a.follow && (a.model || a.steps || a.seed || a.mode || a.run || a.cpu || a.out || a['checkpoint-every'] || a.resume !== undefined)) {
    throw new UsageError('--model, --steps, --seed, --mode, --run, --cpu, --out, --checkpoint-every and --resume go with --train');
  }
  if (train && a.link !== undefined) train.link = linkLimits(a.link);
  if (a.tune && !train) throw new UsageError('--tune goes with --train');
  if (train && a.tune) train.tune = true;
  const minMembers = num('min-members', a['min-members'], { int: true, min: 1 }) ?? (train ? 2 : 1);
  const quorumTimeoutMs = (num('quorum-timeout', a['quorum-timeout'], { min: 0 }) ?? 120) * 1000;
  let ice: IceConfig;
  try {
    ice = parseIce(a.ice ?? '', a['ice-relay-only'] ?? false);
  } catch (e) {
    throw new UsageError(`--ice: ${(e as Error).message}`);
  }
  const common = { ice, passphrase: a.passphrase, admitTimeoutMs, peerTimeoutMs, once: a.once ?? false, minMembers, quorumTimeoutMs, train };
  try {
    if (a.join) {
      const link = parseRoomLink(a.join);
      const server = parseServerUrl(a.server ?? link.server ?? sameOriginServer(link.page).url);
      return { ...common, room: link.room, server, host: false, follow: a.follow ? { link, page: link.page, cpu: a.cpu ?? false } : null };
    }
    const page = a.page ?? DEFAULT_PAGE;
    const server = a.server ? parseServerUrl(a.server) : sameOriginServer(page);
    const room = createRoomId();
    // The link names the server only when it is not the page's own embedded one.
    const link = roomLink(page, room, server.url === sameOriginServer(page).url ? undefined : server.url);
    return { ...common, room, server, host: true, link, follow: a.follow ? { link: null, page, cpu: a.cpu ?? false } : null };
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

/**
 * --resume DIR: the options of the peer run in DIR (its run.json); a flag that names another value is
 * refused, as npm run train's --resume does. --checkpoint-every and --cpu may change.
 */
/** --link MBPS[:MS]: this member's egress as a link of MBPS megabytes per second and MS ms one way (src/peers/transport/limiter.ts). */
function linkLimits(spec: string): LinkLimits {
  const m = /^(\d+(?:\.\d+)?)(?::(\d+(?:\.\d+)?))?$/.exec(spec.trim());
  if (!m || !(Number(m[1]) > 0)) throw new UsageError(`--link must be MBPS[:LATENCY_MS] with MBPS > 0 (e.g. 20:20), got '${spec}'`);
  return { bytesPerSecond: Number(m[1]) * 1e6, latencyMs: m[2] === undefined ? 0 : Number(m[2]) };
}

/**
 * The headless member's run spec: the preset's recipe on the bundled corpus's characters, data
 * parallel over --mode's wire (the scheme's grads.wire) or DiLoCo, with the spec's cadence.
 */
function peerRunSpec(preset: PresetName, mode: GradWire, diloco: DilocoConfig | undefined, o: { steps?: number; seed?: number; checkpointEvery?: number }): RunSpec {
  const vocab = CharTokenizer.fromText(readFileSync(defaultCorpusPath(), 'utf8')).vocabSize;
  const defined = <T extends object>(x: T) => Object.fromEntries(Object.entries(x).filter(([, v]) => v !== undefined)) as T;
  try {
    return defaultRunSpec(preset, {
      steps: o.steps, seed: o.seed, model: { vocab_size: vocab }, scheme: dataParallelScheme(mode),
      tokenizer: { kind: 'char', source: 'char', vocabSize: vocab },
      strategy: diloco ? { kind: 'diloco', ...defined({ ...diloco, alpha: undefined }) } : { kind: 'dp', wire: mode },
      cadence: defined({ checkpointEvery: o.checkpointEvery }),
    });
  } catch (e) {
    throw new UsageError((e as Error).message.replace(/\n\s*/g, ' '));
  }
}

function resumeOptions(a: Record<string, string | boolean | undefined>, dir: string): TrainCliOptions {
  const runFile = path.join(dir, 'run.json');
  const run = readJsonObject('--resume', runFile, 'the run.json of a run started by npm run peer -- --train');
  // run.json holds the run spec since it existed; an older one its options' fields.
  let stored: RunSpec | null = null;
  try {
    if (run.spec !== undefined) stored = validateRunSpec(run.spec);
  } catch (e) {
    throw new UsageError(`--resume ${dir}: ${runFile} does not hold a peer run's spec: ${(e as Error).message.replace(/\n\s*/g, ' ')}`);
  }
  if (stored && stored.strategy.kind !== 'dp') throw new UsageError(`--resume ${dir}: a ${stored.strategy.kind} run cannot be resumed from the CLI yet`);
  const optimizer = run.optimizer as { total_steps?: unknown } | undefined;
  const recorded = stored
    ? { model: stored.preset, steps: stepsOf(stored), seed: stored.seed, mode: run.mode, run: run.peer_run }
    : { model: run.preset, steps: optimizer?.total_steps, seed: run.seed, mode: run.mode, run: run.peer_run };
  if (!PRESET_NAMES.includes(recorded.model as PresetName) || (recorded.mode !== 'fp32' && recorded.mode !== 'int8') || typeof recorded.run !== 'string' ||
    !Number.isInteger(recorded.steps) || !Number.isInteger(recorded.seed)) {
    throw new UsageError(`--resume ${dir}: ${runFile} does not hold a peer run's options (preset, mode, peer_run, optimizer.total_steps, seed)`);
  }
  for (const [flag, v] of Object.entries(recorded)) {
    const given = a[flag] as string | undefined;
    if (given !== undefined && (typeof v === 'number' ? Number(given) !== v : given !== v)) {
      throw new UsageError(`--${flag} ${given} conflicts with the run being resumed (${flag} ${String(v)} in ${runFile}); drop it or start a new run`);
    }
  }
  if (a.out !== undefined && path.resolve(a.out as string) !== path.resolve(dir)) throw new UsageError(`--out ${a.out} conflicts with --resume ${dir}: a resumed run writes to its own directory`);
  const every = num('checkpoint-every', a['checkpoint-every'] as string | undefined, { int: true, min: 0 }) ?? run.checkpoint_every;
  const checkpointEvery = typeof every === 'number' && Number.isInteger(every) && every >= 0 ? every : undefined;
  const preset = recorded.model as PresetName;
  const spec = stored
    ? { ...stored, cadence: { ...stored.cadence, ...(checkpointEvery !== undefined ? { checkpointEvery } : {}) } }
    : peerRunSpec(preset, recorded.mode, undefined, { steps: recorded.steps as number, seed: recorded.seed as number, checkpointEvery });
  return { preset, mode: recorded.mode, spec, run: recorded.run, cpu: a.cpu === true, out: dir, resume: true };
}

/** A trainer ready to step: built before joining, because compiling its GPU pipelines blocks the event loop for seconds. */
interface PreparedTraining {
  train: TrainCliOptions;
  rt: Runtime;
  trainer: Trainer;
  totalSteps: number;
  run: RunDir;
  /** Continued from a checkpoint (the loop then writes no end checkpoint when it takes no step). */
  resumed: boolean;
  /** The tuning cache the model was built with: this member's table for the group, and where the group's go. */
  tuneCache: TuneCache;
}

/** Null when the resumed run had already finished (its export is then written again). */
async function prepareTraining(train: TrainCliOptions): Promise<PreparedTraining | null> {
  const text = readFileSync(defaultCorpusPath(), 'utf8');
  const tokenizer = CharTokenizer.fromText(text);
  // --mode is the scheme's gradient wire format (grads.wire), as in the lab's group panel (peerRunSpec).
  const opts = trainOptionsOf(train.spec);
  try {
    checkOutDir(train.out, {
      resume: train.resume, needBytes: runDiskBytes(paramLayout(opts.model).count),
      nonEmpty: `choose a new --out, or pass --resume ${train.out} to continue that run`,
    });
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const point = train.resume ? resumePoint(train.out, opts) : null;
  const run = new RunDir(train.out);
  if (point && point.step >= opts.optimizer.total_steps) {
    run.export(point.step, point.files);
    console.error(`the run in ${train.out} is complete (${point.step} of ${opts.optimizer.total_steps} steps); its export is written`);
    return null;
  }
  const tuneCache = runTuneCache(train.tune === true);
  // As train and tune: the INT8/f16 tensor-core GEMMs need subgroup matrices, which Dawn exposes only behind its unsafe APIs.
  const rt = new Runtime(await acquireNodeGpu({ forceSwiftShader: train.cpu, dawnFlags: ['enable-dawn-features=allow_unsafe_apis'] }));
  const tuned = await prepareRunKernels(rt, opts, tuneCache, train.tune ? { budgetS: 90, preset: train.preset } : null);
  // This member's own trainer; the group's member wraps it once admitted (runGroupWork).
  const trainer = await createParallelTrainer({ strategy: { kind: 'single' }, rt, opts, text, init: { tokenizer, params: point?.params, optimizer: point?.optimizer, ...memberInit(train.spec.strategy) } });
  run.create();
  const tuning = runTuning(runTuningStatus(rt), tuned);
  console.error(`kernels: ${tuning.label}`);
  if (train.resume) {
    console.error(`resuming ${train.out} at step ${trainer.stepIndex} of ${opts.optimizer.total_steps}`);
    run.openMetrics(trainer.stepIndex);
    return { train, rt, trainer, totalSteps: opts.optimizer.total_steps, run, resumed: true, tuneCache };
  }
  // The run spec as the trainer runs it (what --resume reads back); the fields beside it for readers of older runs.
  run.writeRunInfo({ spec: specWithOptions(train.spec, trainer.opts), preset: train.preset, peer_run: train.run, mode: train.mode, model: trainer.opts.model,
    optimizer: trainer.opts.optimizer, batch: opts.batch, seq: opts.seq, seed: opts.seed, checkpoint_every: train.spec.cadence.checkpointEvery,
    tokenizer: tokenizer.toJSON(), tuning, started: new Date().toISOString() });
  run.openMetrics(null);
  return { train, rt, trainer, totalSteps: opts.optimizer.total_steps, run, resumed: false, tuneCache };
}

/**
 * The group's work once this member is admitted: with --train, data-parallel training with the
 * group (src/parallel/dp/dp.ts: DataParallel over this transport) for the configured steps; otherwise it
 * only stays in the group. Resolves when the member should leave: true when `interrupted()` stopped
 * the training between steps (the last completed step is then checkpointed).
 */
export async function runGroupWork(transport: PeerJsTransport, work: PreparedTraining | null, stop: AbortSignal,
  interrupted: () => boolean = () => false, together?: string[]): Promise<boolean> {
  if (!work) {
    await new Promise<void>((resolve) => stop.addEventListener('abort', () => resolve(), { once: true }));
    return false;
  }
  const { train, trainer, rt, run } = work;
  const options = {
    run: train.run,
    onEvent: (e: DpEvent) => console.log(`train: ${e.kind} at step ${e.step} (epoch ${e.epoch}): ${e.message}`),
    members: together,
    // Its kernel tuning to the members on the same GPU model and driver; theirs into the cache for its next run (checked on this GPU before use).
    tuneShare: groupTuneShare(rt, work.tuneCache),
  };
  console.log(together ? `train: starting together with the ${together.length} members of the quorum` : 'train: joining the group (admitted at a step boundary)');
  const net = train.link ? limitTransport(transport, train.link) : transport;
  // Data parallel over --mode (the scheme's grads.wire) or DiLoCo, as the run spec's strategy says.
  const dp = await createParallelTrainer({ strategy: train.spec.strategy, trainer, transport: net, options });
  stop.addEventListener('abort', () => dp.stop(), { once: true });
  try {
    // The spec's cadence, as every run's: the headless member evaluates (its own weights: no collective) and checkpoints.
    await runTraining(dp, cadenceOf(train.spec, { resumed: work.resumed }), {
      onEval: (s, loss) => {
        run.metric({ step: s + 1, val_loss: loss });
        console.log(`train: step ${s + 1} val_loss ${loss.toFixed(4)}`);
      },
      onStep: (st) => {
        const loss = st.groupLoss ?? st.loss;
        run.metric({ step: st.step, loss, own_loss: st.loss, lr: st.lr, grad_norm: st.gradNorm, rank: st.rank, world: st.world, epoch: st.epoch,
          bytes_sent: st.bytesSent, step_ms: st.stepMs });
        console.log(
          `train: step ${st.step} rank ${st.rank}/${st.world} loss ${loss === null ? '-' : loss.toFixed(4)} ` +
            `sent ${st.exchangeBytesSent} B (${(st.wireRatio * 100).toFixed(0)}% of fp32) ${st.stepMs.toFixed(0)} ms` +
            (st.weightsHash === null ? '' : ` weights ${st.weightsHash.toString(16).padStart(8, '0')}`),
        );
      },
      onCheckpoint: (step, files) => {
        if (step >= work.totalSteps) run.finish(step, files);
        else run.checkpoint(step, files);
      },
    }, { stopRequested: () => stop.aborted || interrupted() });
    if (!interrupted() || trainer.stepIndex >= work.totalSteps) return false;
    // Stopped between group steps: the loop checkpointed the last completed one.
    console.error(`interrupted after ${trainer.stepIndex} of ${work.totalSteps} steps; checkpoint in ${path.join(run.dir, 'checkpoints')}; continue with --resume ${run.dir}`);
    return true;
  } finally {
    dp.stop('this member is done');
    dp.destroy();
    trainer.destroy();
    rt.destroy();
  }
}

/** Resolves once the group has `min` members (this one included); rejects after `timeoutMs` naming how many came. */
function whenQuorum(t: PeerJsTransport, min: number, timeoutMs: number): Promise<void> {
  const members = () => t.peers().length + 1;
  if (members() >= min) return Promise.resolve();
  console.log(`peer: waiting for ${min} members (${members()} so far, up to ${timeoutMs / 1000} s)`);
  return new Promise((resolve, reject) => {
    const done = (e: Error | null) => {
      clearTimeout(timer);
      off();
      if (e) reject(e);
      else resolve();
    };
    const off = t.onPeerJoin(() => {
      if (members() >= min) done(null);
    });
    const timer = setTimeout(() => done(new Error(`no quorum: ${members()} of the ${min} members (--min-members) within ${timeoutMs / 1000} s (--quorum-timeout)`)), timeoutMs);
  });
}

/** Prints problems; malformed messages (possibly thousands) are counted, not printed one by one. */
function problemPrinter(): (p: PeerProblem) => void {
  const badByPeer = new Map<string, number>();
  return (p) => {
    if (p.kind !== 'bad-message') return console.error(`peer: ${p.kind}: ${p.message}`);
    const n = (badByPeer.get(p.peer ?? '?') ?? 0) + 1;
    badByPeer.set(p.peer ?? '?', n);
    if (n <= 3 || Number.isInteger(Math.log10(n))) console.error(`peer: ${p.message}${n > 3 ? ` (${n} rejected so far)` : ''}`);
  };
}

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  if (!o) {
    console.log(HELP);
    return;
  }
  const work = o.train ? await prepareTraining(o.train) : null;
  if (o.train && !work) return;
  installNodeWebRtc();
  if (o.follow) {
    const leave = new AbortController();
    process.once('SIGINT', () => leave.abort());
    process.once('SIGTERM', () => leave.abort());
    process.exitCode = await followGroup({
      link: o.follow.link, pageUrl: o.follow.page, passphrase: o.passphrase, server: o.server, ice: o.ice, cpu: o.follow.cpu,
      admitTimeoutMs: o.admitTimeoutMs, signal: leave.signal,
    });
    return;
  }
  let t: PeerJsTransport;
  try {
    t = await PeerJsTransport.open({
      room: o.room,
      passphrase: o.passphrase,
      server: o.server,
      role: o.host ? 'host' : 'peer',
      peerTimeoutMs: o.peerTimeoutMs,
      ice: o.ice,
    });
  } catch (e) {
    throw new Error(`${(e as Error).message} (is a PeerServer running there? \`npm run dev\` serves one beside the lab page; or pass --server URL)`);
  }
  const stop = new AbortController();
  const quit = (code: number) => {
    stop.abort();
    t.close();
    process.exit(code);
  };
  // While training, a first Ctrl-C / SIGTERM stops after the group step in flight and checkpoints it.
  let training = false;
  let signals = 0;
  const onSignal = () => {
    if (!training || ++signals > 1) return quit(training ? INTERRUPTED_EXIT : 0);
    console.error('stopping after the group step in flight and saving a checkpoint (again to quit without it)');
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  t.onProblem(problemPrinter());
  console.log(`peer: ${t.id} on ${o.server.url} (room tag ${t.tag}); ICE: ${describeIce(o.ice)}`);
  if (o.link) console.log(`peer: room created; link: ${o.link}`);
  try {
    await t.whenAdmitted(o.admitTimeoutMs);
  } catch (e) {
    t.close();
    throw e;
  }
  console.log(`peer: admitted (${t.peers().length} peer(s))`);
  try {
    await whenQuorum(t, o.minMembers, o.quorumTimeoutMs);
  } catch (e) {
    t.close();
    throw e;
  }
  console.log(formatRoster(t.roster()));
  if (o.once) return quit(0);
  t.onPeerJoin((p) => console.log(`peer: + ${p} joined\n${formatRoster(t.roster())}`));
  t.onPeerLeave((p) => console.log(`peer: - ${p} left\n${formatRoster(t.roster())}`));
  training = work !== null;
  // Exactly the quorum present: they all start now, together (each asking the others to admit it
  // would wait forever, none being in a group yet); more than it: a group is running, join it.
  const present = [t.id, ...t.peers()].sort();
  const together = o.minMembers > 1 && present.length === o.minMembers ? present : undefined;
  const wasInterrupted = await runGroupWork(t, work, stop.signal, () => signals > 0, together);
  quit(wasInterrupted ? INTERRUPTED_EXIT : 0);
}

main().catch(fail);
