/** Page entry: one store, one run controller, WebGPU probed once, React on top. */
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { createLabStore } from './state/lab';
import { RunController } from './state/runner';
import { App } from './ui/App';
import { LabContext } from './ui/context';
import './ui/lab.css';
import { detectWebGpu } from './ui/webgpu';

const store = createLabStore();
const runs = new RunController(store, {
  corpusUrl: new URL(`${import.meta.env.BASE_URL}data/tinyshakespeare.txt`, location.href).href,
});

window.addEventListener('error', (e) => store.getState().reportAppError(`Uncaught error: ${e.message}`));
window.addEventListener('unhandledrejection', (e) => {
  const r = e.reason as unknown;
  store.getState().reportAppError(`Unhandled rejection: ${r instanceof Error ? r.message : String(r)}`);
});
window.addEventListener('beforeunload', () => runs.disposeAll());

void detectWebGpu().then((gpu) => store.getState().setGpu(gpu));

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <LabContext.Provider value={{ store, runs }}>
      <App />
    </LabContext.Provider>
  </StrictMode>,
);
