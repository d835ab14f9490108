/** Group runs export like single runs: CSV per step, JSON with the run. */
import { describe, expect, it } from 'vitest';
import { type GroupRun, groupRunCsv, groupRunJson } from '../../src/state/group/group';

const run = {
  id: 'g1', label: '#1 DP · micro', config: { steps: 2 }, startedBy: 'a', members: ['a', 'b'], joinedLate: false, status: 'done', phase: 'done',
  points: [
    { step: 0, loss: 4.1, world: 2, wireBytes: 10, fp32WireBytes: 40, bytesSent: 12, bytesReceived: 13, commMs: 1, computeMs: 2, stepMs: 3, elapsedMs: 3, tokens: 256, hash: 0xdeadbeef },
    { step: 1, loss: null, world: 2, wireBytes: 10, fp32WireBytes: 40, bytesSent: 12, bytesReceived: 13, commMs: 1, computeMs: 2, stepMs: 3, elapsedMs: 6.5, tokens: 256, hash: null },
  ],
  caughtUpAt: null, error: null,
} as unknown as GroupRun;

describe('group run export', () => {
  it('writes one CSV row per step and JSON with hex hashes', () => {
    const csv = groupRunCsv(run).trim().split('\n');
    expect(csv[0]).toBe('step,loss,world,wireBytes,fp32WireBytes,bytesSent,bytesReceived,commMs,computeMs,stepMs,elapsedMs,tokens,hash');
    expect(csv[1]).toBe('0,4.1,2,10,40,12,13,1,2,3,3,256,deadbeef');
    expect(csv[2]).toBe('1,,2,10,40,12,13,1,2,3,6.5,256,');
    const json = JSON.parse(groupRunJson(run)) as { label: string; points: { hash: string | null }[] };
    expect(json.label).toBe(run.label);
    expect(json.points.map((p) => p.hash)).toEqual(['deadbeef', null]);
  });
});
