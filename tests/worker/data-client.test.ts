import { describe, expect, it } from 'vitest';
import { CancelledError, DataWorkerClient } from '../../src/worker/data-client';
import type { FromDataWorker, ToDataWorker } from '../../src/worker/data-protocol';

/** A worker whose replies the test sends; records posts and terminations. */
class FakeWorker {
  posted: ToDataWorker[] = [];
  terminated = false;
  onmessage: ((ev: MessageEvent<FromDataWorker>) => void) | null = null;
  onerror: ((ev: ErrorEvent) => void) | null = null;
  onmessageerror: (() => void) | null = null;
  postMessage(m: ToDataWorker) { this.posted.push(m); }
  terminate() { this.terminated = true; }
  reply(m: FromDataWorker) { this.onmessage?.({ data: m } as MessageEvent<FromDataWorker>); }
}

function setup() {
  const workers: FakeWorker[] = [];
  const client = new DataWorkerClient(() => {
    const w = new FakeWorker();
    workers.push(w);
    return w as unknown as Worker;
  });
  return { client, workers };
}

describe('DataWorkerClient', () => {
  it('routes progress to the job and resolves with its result; a failure rejects with the worker’s words', async () => {
    const { client, workers } = setup();
    const seen: string[] = [];
    const job = client.run({ type: 'prepare', files: [], tokenizer: { kind: 'char' } }, (phase, done, total) => seen.push(`${phase} ${done}/${total}`));
    const id = workers[0].posted[0].id;
    workers[0].reply({ type: 'progress', id, phase: 'tokenizing', done: 1, total: 2 });
    workers[0].reply({ type: 'failed', id: id + 99, message: 'not this job' });
    expect(client.busy).toBe(true);
    workers[0].reply({ type: 'inspected', id, files: [] });
    expect(await job).toEqual({ type: 'inspected', id, files: [] });
    expect(seen).toEqual(['tokenizing 1/2']);
    const bad = client.run({ type: 'inspect', files: [] });
    workers[0].reply({ type: 'failed', id: workers[0].posted[1].id, message: 'x.png: unsupported file type ".png"' });
    await expect(bad).rejects.toThrow('x.png: unsupported file type');
    expect(workers).toHaveLength(1);
  });

  it('cancel terminates the worker at once (BPE training cannot be interrupted), rejects the job, and the next job gets a new worker', async () => {
    const { client, workers } = setup();
    const job = client.run({ type: 'prepare', files: [], tokenizer: { kind: 'bpe', vocabSize: 4096 } });
    client.cancel();
    await expect(job).rejects.toBeInstanceOf(CancelledError);
    expect(workers[0].terminated).toBe(true);
    expect(client.busy).toBe(false);
    const next = client.run({ type: 'inspect', files: [] });
    expect(workers).toHaveLength(2);
    workers[1].reply({ type: 'inspected', id: workers[1].posted[0].id, files: [] });
    await expect(next).resolves.toMatchObject({ type: 'inspected' });
  });

  it('a reply the page cannot read rejects the job instead of leaving it pending', async () => {
    const { client, workers } = setup();
    const job = client.run({ type: 'prepare', files: [], tokenizer: { kind: 'char' } });
    workers[0].onmessageerror?.();
    await expect(job).rejects.toThrow('the data worker sent a message the page could not read');
    expect(client.busy).toBe(false);
  });

  it('a worker that fails to load rejects the job in words', async () => {
    const { client, workers } = setup();
    const job = client.run({ type: 'inspect', files: [] });
    workers[0].onerror?.({ message: '', preventDefault: () => {} } as unknown as ErrorEvent);
    await expect(job).rejects.toThrow(/data worker failed: could not load the worker script/);
  });
});
