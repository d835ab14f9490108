/**
 * The data worker: prepares training data into the browser's token cache and reads checkpoints
 * dropped into the page, so tokenizing a large corpus or training a BPE tokenizer never blocks
 * the page (see data-protocol.ts).
 */
/// <reference lib="webworker" />
import { importModel } from './checkpoint-files';
import type { FromDataWorker, ToDataWorker } from './data-protocol';
import { inspectFile, prepareData } from './prepare';
import { OpfsTokenCache } from './token-cache';

const scope = self as unknown as DedicatedWorkerGlobalScope;
const post = (m: FromDataWorker) => scope.postMessage(m);

scope.onmessage = async (ev: MessageEvent<ToDataWorker>) => {
  const m = ev.data;
  try {
    if (m.type === 'inspect') post({ type: 'inspected', id: m.id, files: await Promise.all(m.files.map(inspectFile)) });
    else if (m.type === 'import') post({ type: 'imported', id: m.id, model: await importModel(m.files) });
    else {
      let last = 0;
      const data = await prepareData(m.files, { field: m.field, tokenizer: m.tokenizer }, new OpfsTokenCache(), (phase, done, total) => {
        const now = performance.now();
        if (now - last < 100 && done < total) return;
        last = now;
        post({ type: 'progress', id: m.id, phase, done, total });
      });
      post({ type: 'prepared', id: m.id, data });
    }
  } catch (e) {
    post({ type: 'failed', id: m.id, message: e instanceof Error ? e.message : String(e) });
  }
};
