import { describe, expect, it } from 'vitest';
import { createLabStore } from '../../src/state/lab';
import { RunController } from '../../src/state/runner';
import { GenerateClient } from '../../src/worker/generate-client';
import { DEFAULT_GENERATE_PARAMS, type FromGenerate, ToGenerateSchema } from '../../src/worker/generate-protocol';
import { DEFAULT_RUN_CONFIG, type FromWorker } from '../../src/worker/protocol';

/** Stands in for a module Worker: records posted messages, lets the test emit events. */
class FakeWorker {
  posted: unknown[] = [];
  terminated = false;
  onmessage: ((ev: MessageEvent) => void) | null = null;
  onerror: ((ev: ErrorEvent) => void) | null = null;
  onmessageerror: (() => void) | null = null;
  postMessage(m: unknown) {
    this.posted.push(m);
  }
  terminate() {
    this.terminated = true;
  }
  emit(msg: unknown) {
    this.onmessage?.({ data: msg } as MessageEvent);
  }
}

describe('generation client', () => {
  it('sends valid generate and stop messages, routes events by id, fails pending requests when the worker dies', () => {
    const w = new FakeWorker();
    let made = 0;
    const client = new GenerateClient(() => (made++, w as unknown as Worker));
    const a: FromGenerate[] = [];
    const b: FromGenerate[] = [];
    const ga = client.generate('r@2', { 'config.json': '{}' }, DEFAULT_GENERATE_PARAMS, (m) => a.push(m));
    client.generate('r@2', { 'config.json': '{}' }, { ...DEFAULT_GENERATE_PARAMS, seed: 4 }, (m) => b.push(m));
    expect(made).toBe(1);
    for (const m of w.posted) expect(ToGenerateSchema.safeParse(m).success).toBe(true);
    const [first, second] = w.posted as { id: number; key: string }[];
    expect(first).toMatchObject({ type: 'generate', key: 'r@2' });
    w.emit({ type: 'text', id: first.id, text: 'hi', tokens: 1, tokensPerS: null });
    w.emit({ type: 'done', id: first.id, tokens: 1, tokensPerS: null, prefillMs: 1, reason: 'max_tokens', ctx: 32 });
    expect(a.map((m) => m.type)).toEqual(['text', 'done']);
    expect(b).toEqual([]);
    ga.stop();
    expect(w.posted.at(-1)).toEqual({ type: 'stop', id: first.id });
    w.onerror?.({ message: 'boom', preventDefault() {} } as ErrorEvent);
    expect(b).toEqual([{ type: 'error', id: second.id, message: 'generation worker failed: boom' }]);
    expect(w.terminated).toBe(true);
  });

  it('RunController.generate: no checkpoint is an error event; with one, the checkpoint goes to the worker keyed by run and step', async () => {
    const store = createLabStore();
    const train = new FakeWorker();
    const gen = new FakeWorker();
    const runs = new RunController(store, { corpusUrl: '/x', createWorker: () => train as unknown as Worker, createGenerateWorker: () => gen as unknown as Worker });
    const id = runs.start(DEFAULT_RUN_CONFIG)!;
    const events: FromGenerate[] = [];
    expect(await runs.generate(id, DEFAULT_GENERATE_PARAMS, (m) => events.push(m))).toBeNull();
    expect(events).toEqual([{ type: 'error', id: -1, message: 'this run has no checkpoint yet' }]);
    const files = { 'config.json': '{"a":1}' };
    train.emit({ type: 'checkpoint', runId: id, step: 3, files } satisfies FromWorker);
    await new Promise((r) => setTimeout(r, 0));
    const h = await runs.generate(id, DEFAULT_GENERATE_PARAMS, () => {});
    expect(h).not.toBeNull();
    expect(gen.posted[0]).toMatchObject({ type: 'generate', key: `${id}@3`, files, params: DEFAULT_GENERATE_PARAMS });
    runs.disposeAll();
    expect(gen.terminated).toBe(true);
  });
});
