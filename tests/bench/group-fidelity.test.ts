// bench/group-fidelity.ts is carried to the GPU machine for one device call: on SwiftShader with
// micro and a few steps it runs every part (the lone runs, the group, the projection) on the real
// corpus, so a slip in its figures or its JSON fails here rather than there.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { bundleForTests, ROOT } from '../helpers/bundle';

const bundled = bundleForTests('bench/group-fidelity.ts');

function run(...args: string[]) {
  const r = spawnSync(process.execPath, [bundled(), ...args], { cwd: ROOT, encoding: 'utf8', timeout: 120_000 });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

interface Point { step: number; tokens: number; valLoss: number }
interface GroupPoint extends Point { outerStep: number; exposedMs: number; meanExposedMs: number; waitMs: number; wallMs: number; exchangeBytes: number }
interface Lone { batch: number; tokens: number; curve: Point[]; finalValLoss: number; best: Point; stepMs: number }
interface Out {
  command: string; adapter: Record<string, string>; batch: number; seq: number; steps: number; corpus: { files: { path: string }[]; tokens: number; vocab: number };
  diloco: { innerSteps: number; wire: string }; link: unknown;
  lone: Lone; targetLoss: number; memberStepMs: number;
  rows: {
    members: number; bigBatch: Lone; fidelityRatio: number; fidelityWithin2pct: boolean;
    group: {
      members: number; tokens: number; outerSteps: number; curve: GroupPoint[]; finalValLoss: number; best: GroupPoint; exposedMsPerRound: number;
      sharedInnerMs: number; reachOuterStep: number | null; reachStep: number | null;
    };
    projection: { groupMs: number | null; loneMs: number; speedup: number | null; loneFirstReachStep: number; speedupVsFirstReach: number | null; target: number; meets: boolean };
  }[];
}

const S = 8;
const H = 2;
const E = 2;

function checkCurve(run: { curve: Point[]; best: Point }, tokensPerStep: number, every: number): void {
  const { curve } = run;
  expect(run.best.valLoss).toBe(Math.min(...curve.map((p) => p.valLoss)));
  expect(curve).toContainEqual(run.best);
  expect(curve.map((p) => p.step)).toEqual(Array.from({ length: S / every }, (_, i) => (i + 1) * every));
  for (const p of curve) {
    expect(p.tokens).toBe(p.step * tokensPerStep);
    expect(Number.isFinite(p.valLoss) && p.valLoss > 0).toBe(true);
  }
  // Eight steps on TinyShakespeare from a random init lower the validation loss.
  expect(curve[curve.length - 1].valLoss).toBeLessThan(curve[0].valLoss);
}

describe('bench/group-fidelity.ts on SwiftShader', () => {
  it('micro, 8 steps, H = 2, 2 members: every run and figure, consistent with each other', () => {
    const r = run('--cpu', '--model', 'micro', '--steps', String(S), '--diloco', String(H), '--eval-every', String(E),
      '--eval-batches', '2', '--members', '2', '--time-steps', '2');
    expect(r.stderr).not.toMatch(/^error/m);
    expect(r.status).toBe(0);
    const o = JSON.parse(r.stdout) as Out;
    expect(o.command).toBe(`group_fidelity --cpu --model micro --steps ${S} --diloco ${H} --eval-every ${E} --eval-batches 2 --members 2 --time-steps 2`);
    expect(o.adapter.architecture).toBe('swiftshader');
    expect(o.corpus.files.map((f) => f.path)).toEqual([expect.stringMatching(/public\/data\/tinyshakespeare\.txt$/)]);
    expect(o.corpus.vocab).toBe(65);
    expect(o.diloco).toMatchObject({ innerSteps: H, wire: 'int8' });
    expect(o.link).toBeNull();
    const B = o.batch;
    const T = o.seq;
    expect(o.lone.batch).toBe(B);
    checkCurve(o.lone, B * T, E);
    expect(o.targetLoss).toBe(o.lone.finalValLoss);
    expect(o.lone.finalValLoss).toBe(o.lone.curve[o.lone.curve.length - 1].valLoss);
    for (const ms of [o.lone.stepMs, o.memberStepMs]) expect(Number.isFinite(ms) && ms > 0).toBe(true);

    expect(o.rows.map((x) => x.members)).toEqual([2]);
    const [row] = o.rows;
    const N = row.members;
    const { bigBatch: big, group: g, projection: p } = row;
    expect(big.batch).toBe(N * B);
    checkCurve(big, N * B * T, E);
    // Equal total tokens: the group's N members of B rows and the lone N·B run.
    expect(g.tokens).toBe(S * N * B * T);
    expect(big.tokens).toBe(g.tokens);
    expect(g.outerSteps).toBe(S / H);
    expect(g.curve.map((x) => x.outerStep)).toEqual([1, 2, 3, 4]);
    checkCurve(g, N * B * T, H);
    expect(g.finalValLoss).toBe(g.curve[g.curve.length - 1].valLoss);
    for (const x of g.curve) {
      // Blocked on the network is part of the time outside inner steps, for every member.
      expect(x.waitMs).toBeGreaterThanOrEqual(0);
      expect(x.exposedMs).toBeGreaterThanOrEqual(x.waitMs);
      expect(x.meanExposedMs).toBeGreaterThanOrEqual(x.exposedMs);
      expect(x.wallMs).toBeGreaterThan(x.exposedMs);
      expect(x.exchangeBytes).toBeGreaterThan(0);
    }
    expect(Number.isFinite(g.exposedMsPerRound) && Number.isFinite(g.sharedInnerMs)).toBe(true);
    const reach = g.curve.find((x) => x.valLoss <= o.targetLoss);
    expect(g.reachOuterStep).toBe(reach?.outerStep ?? null);
    expect(g.reachStep).toBe(reach?.step ?? null);

    expect(row.fidelityRatio).toBeCloseTo(g.finalValLoss / big.finalValLoss, 12);
    expect(row.fidelityWithin2pct).toBe(row.fidelityRatio <= 1.02);
    expect(p.loneMs).toBeCloseTo(S * o.lone.stepMs, 6);
    expect(p.target).toBeCloseTo(0.8 * N, 12);
    expect(p.loneFirstReachStep).toBe(o.lone.curve.find((x) => x.valLoss <= o.targetLoss)!.step);
    if (g.reachOuterStep === null) {
      expect(p.groupMs).toBeNull();
      expect(p.meets).toBe(false);
    } else {
      expect(p.groupMs!).toBeCloseTo(g.reachOuterStep * (H * o.memberStepMs + g.exposedMsPerRound), 6);
      expect(p.speedup!).toBeCloseTo(p.loneMs / p.groupMs!, 9);
      expect(p.meets).toBe(p.speedup! >= p.target);
    }
  }, 120_000);

  it('refuses steps that are not whole outer steps, a bad group size and a missing corpus, before touching the GPU', () => {
    const a = run('--cpu', '--model', 'micro', '--steps', '7', '--diloco', '2');
    expect(a.status).toBe(2);
    expect(a.stderr).toMatch(/error: --steps 7 must be a multiple of --diloco 2/);
    const b = run('--cpu', '--members', '1,2');
    expect(b.status).toBe(2);
    expect(b.stderr).toMatch(/error: --members expects .* in \[2, 8\], got '1,2'/);
    const c = run('--cpu', '--data', 'no-such-corpus.txt');
    expect(c.status).toBe(2);
    expect(c.stderr).toMatch(/error: --data no-such-corpus.txt: no such file/);
  });
});
