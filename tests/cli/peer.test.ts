/**
 * The headless peer's command line: no PeerServer is one error line naming the URL it tried; bad
 * input is exit 2 before the GPU; --min-members waits for a quorum or gives up after --quorum-timeout;
 * an interrupted --train run continues with --resume to the losses of an uninterrupted one.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installNodeWebRtc } from '../../src/peers/transport/node-webrtc';
import { PeerJsTransport } from '../../src/peers/peerjs/peerjs';
import { createRoomId, parseServerUrl, roomLink } from '../../src/peers/room/room';
import { attachPeerServer, type EmbeddedPeerServer } from '../../src/server/peer-server';
import { readLatestCheckpoint, readVerified } from '../../src/cli/checkpoint-store';
import { bundleForTests, ROOT } from '../helpers/bundle';

const bundled = bundleForTests('src/cli/peer.ts');
let dir: string;
let http: Server;
let signalling: EmbeddedPeerServer;
let origin: string;
let closedPort: number;

/** Starts the CLI; `out()` is its stdout so far, `exited` its exit status. */
function start(...args: string[]) {
  const child = spawn(process.execPath, [bundled(), ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, XDG_RUNTIME_DIR: dir } });
  let out = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (status) => resolve(status)));
  return { child, out: () => out, stderr: () => stderr, exited };
}

/**
 * Runs the CLI to its end (async: the in-process host must keep answering meanwhile); with
 * `interruptWhen`, sends one SIGINT once its stdout matches.
 */
async function peer(...args: (string | { interruptWhen: RegExp })[]): Promise<{ status: number | null; out: string; stderr: string }> {
  const when = args.find((a): a is { interruptWhen: RegExp } => typeof a !== 'string')?.interruptWhen;
  const p = start(...args.filter((a): a is string => typeof a === 'string'));
  let signalled = false;
  if (when) p.child.stdout.on('data', () => void (!signalled && when.test(p.out()) && (signalled = p.child.kill('SIGINT'))));
  const timer = setTimeout(() => p.child.kill('SIGKILL'), 60_000);
  const status = await p.exited;
  clearTimeout(timer);
  return { status, out: p.out(), stderr: p.stderr() };
}

/** Resolves once `cond` holds (polled), or throws naming `what` after `ms`. */
async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  for (const end = Date.now() + ms; !cond();) {
    if (Date.now() > end) throw new Error(`timed out after ${ms / 1000} s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function errorLine(stderr: string): string {
  const lines = stderr.split('\n').filter((l) => l.startsWith('error:'));
  expect(lines, stderr).toHaveLength(1);
  expect(stderr).not.toMatch(/\n\s+at |Unhandled/);
  return lines[0];
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(tmpdir(), 'peer-cli-'));
  installNodeWebRtc();
  http = createServer();
  signalling = attachPeerServer(http);
  http.on('request', (req, res) => signalling.handle(req, res, () => res.writeHead(404).end()));
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  origin = `http://127.0.0.1:${(http.address() as { port: number }).port}`;
  // A port nothing listens on.
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  closedPort = (probe.address() as { port: number }).port;
  await new Promise((resolve) => probe.close(resolve));
});

afterAll(async () => {
  signalling.close();
  http.closeAllConnections();
  await new Promise((resolve) => http.close(resolve));
  fs.rmSync(dir, { recursive: true, force: true });
});

describe('peer CLI', () => {
  it('with no PeerServer: one error line naming the URL it tried, exit 1, no stack trace', async () => {
    const page = `http://127.0.0.1:${closedPort}/`;
    const host = await peer('--host', '--page', page);
    expect(host.status).toBe(1);
    expect(errorLine(host.stderr)).toMatch(new RegExp(`PeerServer at http://127.0.0.1:${closedPort}/peerjs`));
    const joined = await peer('--join', roomLink(page, createRoomId()));
    expect(joined.status).toBe(1);
    expect(errorLine(joined.stderr)).toMatch(new RegExp(`127.0.0.1:${closedPort}/peerjs`));
  });

  it('bad input is exit 2 before anything starts', async () => {
    fs.mkdirSync(path.join(dir, 'used'));
    fs.writeFileSync(path.join(dir, 'used', 'x'), '');
    for (const [args, want] of [
      [['--host', '--min-members', '0'], /--min-members expects an integer >= 1, got '0'/],
      [['--host', '--steps', '-3', '--train'], /--steps expects an integer >= 1, got '-3'/],
      [['--host', '--out', 'x'], /go with --train/],
      [['--host', '--train', '--out', path.join(dir, 'used')], /--out .*used is not empty .*choose a new --out/],
      [['--host', '--ice', 'turn:turn.example.org:3478'], /--ice: .*needs a user name and a credential/],
      [['--host', '--ice', 'stun:a:1', '--ice-relay-only'], /--ice: relay-only ICE needs a TURN server/],
      [['--host', '--train', '--wire', 'int4'], /go with --diloco H/],
      [['--host', '--diloco', '10'], /--diloco goes with --train/],
      [['--host', '--train', '--diloco', '10', '--wire', 'int2'], /--wire must be one of fp32, int8, int4/],
      [['--host', '--train', '--diloco', '10', '--streaming', '3'], /H = 10 is not a multiple of the 3 fragments/],
      [['--host', '--train', '--diloco', '10', '--streaming', '2', '--overlap', '5'], /overlap τ must be an integer in \[0, H\/F = 5\)/],
      [['--host', '--train', '--diloco', '10', '--outer-momentum', '1'], /outer momentum must be in \[0, 1\)/],
      [['--host', '--link', '20:20'], /--link goes with --train/],
      [['--host', '--tune'], /--tune goes with --train/],
      [['--host', '--train', '--link', '0:20'], /--link must be MBPS\[:LATENCY_MS\] with MBPS > 0/],
    ] as const) {
      const r = await peer(...args);
      expect(r.status, r.stderr).toBe(2);
      expect(errorLine(r.stderr)).toMatch(want);
      expect(r.stderr).not.toMatch(/adapter/);
    }
  });

  it('--min-members waits for a quorum, and gives up after --quorum-timeout with one error line', async () => {
    const room = createRoomId();
    const host = await PeerJsTransport.open({ room, server: parseServerUrl(`${origin}/peerjs`), role: 'host', heartbeatMs: 200 });
    try {
      const link = roomLink(`${origin}/`, room);
      const short = await peer('--join', link, '--once', '--min-members', '3', '--quorum-timeout', '1');
      expect(short.status, short.stderr).toBe(1);
      expect(short.out).toMatch(/waiting for 3 members \(2 so far/);
      expect(errorLine(short.stderr)).toMatch(/no quorum: 2 of the 3 members \(--min-members\) within 1 s/);
      const enough = await peer('--join', link, '--once', '--min-members', '2', '--quorum-timeout', '10');
      expect(enough.status, enough.stderr).toBe(0);
      expect(enough.out).toMatch(new RegExp(`${host.id}\\s+host\\s+admitted`));
    } finally {
      host.close();
    }
  }, 120_000);

  // The uninterrupted run is also the check of --train's output (one run fewer: each compiles the model).
  it('--train writes run.json, metrics.jsonl, checkpoints and the export like npm run train (one member, SwiftShader); --resume continues an interrupted run to the end with the losses of an uninterrupted one; a conflicting flag is exit 2', async () => {
    const train = ['--host', '--page', `${origin}/`, '--train', '--min-members', '1', '--cpu'];
    const losses = (out: string) => fs.readFileSync(path.join(out, 'metrics.jsonl'), 'utf8').trim().split('\n')
      .map((l) => JSON.parse(l) as { step: number; loss: number }).map((m) => [m.step, m.loss]);
    const whole = path.join(dir, 'peer-whole');
    // Checkpoints every 2 steps of 5: the last one comes from the end of the run, off the cadence.
    const ref = await peer(...train, '--steps', '5', '--checkpoint-every', '2', '--out', whole);
    expect(ref.status, ref.stderr + ref.out).toBe(0);
    const metrics = fs.readFileSync(path.join(whole, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number; loss?: number; val_loss?: number });
    const lines = metrics.filter((m) => m.val_loss === undefined);
    expect(lines.map((m) => m.step)).toEqual([0, 1, 2, 3, 4]);
    expect(lines.every((m) => Number.isFinite(m.loss))).toBe(true);
    // The run spec's cadence, as every run's: the headless member evaluates after its last step.
    expect(metrics.filter((m) => m.val_loss !== undefined).map((m) => [m.step, Number.isFinite(m.val_loss)])).toEqual([[5, true]]);
    expect(readLatestCheckpoint(whole)!.step).toBe(5);
    expect(readVerified(whole).step).toBe(5);
    expect(JSON.parse(fs.readFileSync(path.join(whole, 'run.json'), 'utf8'))).toMatchObject({
      preset: 'micro', checkpoint_every: 2, spec: { preset: 'micro', strategy: { kind: 'dp', wire: 'int8' }, cadence: { checkpointEvery: 2 } },
    });

    const cut = path.join(dir, 'peer-cut');
    const first = await peer(...train, '--steps', '5', '--checkpoint-every', '1', '--out', cut, { interruptWhen: /train: step 0 / });
    expect(first.status, first.stderr + first.out).toBe(130);
    const at = readLatestCheckpoint(cut)!.step;
    expect(at).toBeGreaterThan(0);
    expect(at).toBeLessThan(5);
    expect(first.stderr).toMatch(new RegExp(`continue with --resume ${cut}`));

    for (const [flag, value] of [['--steps', '9'], ['--mode', 'fp32'], ['--seed', '7'], ['--model', 'tiny']]) {
      const r = await peer(...train, '--resume', cut, flag, value);
      expect(r.status, r.stderr).toBe(2);
      expect(errorLine(r.stderr)).toMatch(new RegExp(`^error: ${flag} ${value} conflicts with the run being resumed`));
      expect(r.stderr).not.toMatch(/adapter|resuming/);
    }
    const used = await peer(...train, '--out', cut);
    expect(used.status).toBe(2);
    expect(errorLine(used.stderr)).toMatch(/pass --resume .* to continue that run/);

    const resumed = await peer(...train, '--resume', cut);
    expect(resumed.status, resumed.stderr + resumed.out).toBe(0);
    expect(resumed.stderr).toMatch(new RegExp(`resuming ${cut} at step ${at} of 5`));
    expect(resumed.out).not.toMatch(new RegExp(`train: step ${at - 1} `));
    expect(losses(cut)).toEqual(losses(whole));
    expect(readVerified(cut).step).toBe(5);
  }, 400_000);
  it('a member process killed (SIGKILL) while the others wait in an exchange: they go on within the peer timeout, no step lost, equal weights', async () => {
    const steps = 6;
    const common = ['--train', '--min-members', '3', '--steps', String(steps), '--mode', 'int8', '--checkpoint-every', '0', '--cpu', '--peer-timeout', '5', '--link', '20:5'];
    const outs = ['kill-a', 'kill-b', 'kill-c'].map((d) => path.join(dir, d));
    const host = start('--host', '--page', `${origin}/`, ...common, '--out', outs[0]);
    const procs = [host];
    try {
      await until(() => /link: (\S+)/.test(host.out()), 60_000, 'the host\'s link');
      const link = /link: (\S+)/.exec(host.out())![1];
      procs.push(...outs.slice(1).map((o) => start('--join', link, ...common, '--out', o)));
      const [a, b, victim] = procs;
      const stepLines = (p: typeof host) => [...p.out().matchAll(/train: step (\d+) rank \d+\/(\d+) .* weights ([0-9a-f]{8})/g)].map((m) => ({ step: Number(m[1]), world: Number(m[2]), hash: m[3] }));
      await until(() => stepLines(victim).some((l) => l.step === 1), 240_000, 'two steps of the group of 3').catch((e: Error) => {
        throw new Error(`${e.message}\n${procs.map((p, i) => `--- member ${i}:\n${p.out()}\n${p.stderr()}`).join('\n')}`);
      });
      // Frozen right after a step, the victim sends nothing of the next one: the others sit in its
      // exchange, waiting for its contribution, when it is killed.
      victim.child.kill('SIGSTOP');
      const frozenAt = Math.max(...stepLines(victim).map((l) => l.step));
      await new Promise((r) => setTimeout(r, 1500));
      victim.child.kill('SIGKILL');
      const killedAt = Date.now();
      await until(() => stepLines(a).some((l) => l.step === frozenAt + 1), 60_000, 'the survivors\' next step');
      const resumedMs = Date.now() - killedAt;
      const [sa, sb] = await Promise.all([a.exited, b.exited]);
      expect(sa, a.stderr()).toBe(0);
      expect(sb, b.stderr()).toBe(0);
      const la = stepLines(a);
      const lb = stepLines(b);
      // Every step exactly once, the ones after the kill with 2 members, the same weights on both.
      expect(la.map((l) => l.step)).toEqual([...Array(steps).keys()]);
      expect(lb.map((l) => l.step)).toEqual([...Array(steps).keys()]);
      expect(la.map((l) => l.hash)).toEqual(lb.map((l) => l.hash));
      const worlds = `${JSON.stringify(la.map((l) => [l.step, l.world]))} / ${JSON.stringify(lb.map((l) => [l.step, l.world]))}\n${a.out().split('\n').filter((l) => l.startsWith('train')).join('\n')}`;
      expect(la.filter((l) => l.step > frozenAt).every((l) => l.world === 2), `frozen after ${frozenAt}: ${worlds}`).toBe(true);
      expect(la.filter((l) => l.step <= frozenAt).every((l) => l.world === 3), `frozen after ${frozenAt}: ${worlds}`).toBe(true);
      expect(resumedMs).toBeLessThan(30_000); // the collective timeout is 600 s
      // The end-of-run evaluation's line (val_loss) is not a step.
      const steps0 = fs.readFileSync(path.join(outs[0], 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l) as { step: number; val_loss?: number })
        .filter((m) => m.val_loss === undefined).map((m) => m.step);
      expect(steps0).toEqual([...Array(steps).keys()]);
      console.log(`killed after step ${frozenAt}; the survivors' next step came ${(resumedMs / 1000).toFixed(1)} s after the kill`);
    } finally {
      for (const p of procs) p.child.kill('SIGKILL');
    }
  }, 420_000);
});
