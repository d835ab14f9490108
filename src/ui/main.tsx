/**
 * Page entry: one store, one run controller, runs restored from IndexedDB and saved as they change,
 * WebGPU probed once, React on top. Storage failing (private mode, quota) only costs persistence.
 */
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { createLabStore } from '../state/lab';
import { IdbRepo, openDb } from '../state/idb';
import { persistRuns, requestPersistentStorage, restoreRuns, type RunRepo } from '../state/persist';
import { runQueue } from '../state/queue';
import { persistSettings } from '../state/settings';
import { DataController } from '../state/data-prep';
import { RunController } from '../state/runner';
import { DataWorkerClient } from '../worker/data-client';
import { App } from './App';
import { LabContext } from './context';
import './lab.css';
import { detectWebGpu } from './webgpu';

const store = createLabStore();
const report = (m: string) => store.getState().reportAppError(m);
// Lab settings (the comparison's baseline, one run at a time); reading localStorage throws where storage is blocked.
persistSettings(store, (() => {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
})(), report);

window.addEventListener('error', (e) => report(`Uncaught error: ${e.message}`));
window.addEventListener('unhandledrejection', (e) => {
  const r = e.reason as unknown;
  report(`Unhandled rejection: ${r instanceof Error ? r.message : String(r)}`);
});

let repo: RunRepo | null = null;
try {
  repo = new IdbRepo(await openDb());
  await restoreRuns(store, repo);
} catch (e) {
  repo = null;
  report(`Runs will not survive a reload: this browser's storage (IndexedDB) is unavailable (${(e as Error).message}).`);
}
const persister = repo ? persistRuns(store, repo, report) : null;

const corpusUrl = new URL(`${import.meta.env.BASE_URL}data/tinyshakespeare.txt`, location.href).href;
const data = new DataController(store, new DataWorkerClient(), async () => {
  const res = await fetch(corpusUrl);
  if (!res.ok) throw new Error(`could not load the bundled text ${corpusUrl}: HTTP ${res.status}`);
  return new File([await res.blob()], 'tinyshakespeare.txt');
});
const runs = new RunController(store, { corpusUrl }, repo, (config) => data.initFiles(config));
runQueue(store, runs);
// Checkpoints and final states are committed as they come (RunJournal); what is left is the latest
// metrics, written at once when the page is hidden or goes away (the transactions then complete
// even though the page cannot wait for them).
const flushAll = () => Promise.all([persister?.flush(), runs.journal.settled()]);
window.addEventListener('pagehide', (e) => {
  void flushAll();
  if (!e.persisted) runs.disposeAll();
});
document.addEventListener('visibilitychange', () => {
  if (document.visibilityState === 'hidden') void flushAll();
});
// Without this the browser may evict the runs under storage pressure.
if (repo) void requestPersistentStorage();

void detectWebGpu().then((gpu) => store.getState().setGpu(gpu));

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <LabContext.Provider value={{ store, runs, data }}>
      <App />
    </LabContext.Provider>
  </StrictMode>,
);
