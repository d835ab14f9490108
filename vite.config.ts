/**
 * Vite config for the lab page. WGSL files are imported as strings with `?raw` (native Vite), so
 * the engine's shaders reach the page and the training worker without a plugin.
 */
import react from '@vitejs/plugin-react';
import { defineConfig, type Plugin } from 'vite';

/**
 * The embedded PeerJS signalling server (distributed training between browser tabs) will hang off
 * the dev/preview server here, via `configureServer` / `configurePreviewServer`, so one
 * `npm start` serves both the page and the peer broker. Not implemented yet: a no-op for now.
 */
function peerServer(): Plugin {
  return { name: 'lab-peer-server' };
}

export default defineConfig({
  plugins: [react(), peerServer()],
  // The training worker is an ES module worker (`new Worker(url, { type: 'module' })`).
  worker: { format: 'es' },
  // recharts + React + zod make one ~800 kB chunk; fine for a local lab, so no split for now.
  build: { target: 'es2022', sourcemap: true, chunkSizeWarningLimit: 1024 },
  server: { port: 5173 },
});
