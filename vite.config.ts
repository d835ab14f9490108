/**
 * Vite config for the lab page. WGSL files are imported as strings with `?raw` (native Vite), so
 * the engine's shaders reach the page and the training worker without a plugin.
 */
import type { Server as HttpServer } from 'node:http';
import { fileURLToPath } from 'node:url';
import react from '@vitejs/plugin-react';
import { type Connect, defineConfig, type Plugin } from 'vite';
import { labConfigFromEnv, labConfigHandler, turnIssuer } from './src/server/lab-config';
import { attachPeerServer } from './src/server/peer-server';

/**
 * The embedded PeerJS signalling server (peer groups between tabs and machines) on the dev and
 * preview servers, at /peerjs on the page's origin (src/server/peer-server.ts; `npm start` embeds the
 * same one). Its middleware goes first, ahead of Vite's page fallback.
 */
function peerServer(): Plugin {
  const attach = (httpServer: unknown, middlewares: Connect.Server) => {
    if (!httpServer) return; // middleware mode: the embedding server owns the sockets
    const config = labConfigFromEnv();
    const peers = attachPeerServer(httpServer as HttpServer, { turn: turnIssuer(config) });
    middlewares.use(peers.handle);
    middlewares.use(labConfigHandler(config));
    (httpServer as HttpServer).on('close', () => peers.close());
  };
  return {
    name: 'lab-peer-server',
    configureServer: (server) => attach(server.httpServer, server.middlewares),
    configurePreviewServer: (server) => attach(server.httpServer, server.middlewares),
  };
}

export default defineConfig({
  plugins: [react(), peerServer()],
  // The training worker is an ES module worker (`new Worker(url, { type: 'module' })`).
  worker: { format: 'es' },
  // recharts + React + zod make one ~800 kB chunk; fine for a local lab, so no split for now.
  build: {
    target: 'es2022',
    sourcemap: true,
    chunkSizeWarningLimit: 1024,
    // Two pages: the lab, and the benchmark page (the suites of `npm run bench` on the browser's GPU).
    rolldownOptions: { input: { main: fileURLToPath(new URL('./index.html', import.meta.url)), bench: fileURLToPath(new URL('./bench.html', import.meta.url)) } },
  },
  server: { port: 5173 },
});
