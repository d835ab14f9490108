/**
 * The embedded PeerServer and the `npm start` server: same-origin signalling at /peerjs, peer listing,
 * other websocket upgrades left to their owners (Vite's HMR), and static files that never leave dist/.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { WebSocket, WebSocketServer } from 'ws';
import { attachPeerServer } from '../../src/server/peer-server';
import { memberId } from '../../src/peers/room/room';
import { resolveStatic } from '../../src/server/static';
import { newKeyPair } from '../../src/peers/room/identity';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const dist = mkdtempSync(path.join(tmpdir(), 'lab-dist-'));
mkdirSync(path.join(dist, 'assets'));
writeFileSync(path.join(dist, 'index.html'), '<!doctype html><title>lab</title>');
writeFileSync(path.join(dist, 'assets', 'app-1234.js'), 'console.log(1)');

afterAll(() => rmSync(dist, { recursive: true, force: true }));

/** GET without URL normalisation (so '..' reaches the server as sent). */
function get(port: number, rawPath: string): Promise<{ status: number; body: string; type: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: rawPath }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, type: String(res.headers['content-type'] ?? '') }));
    });
    req.on('error', reject);
    req.end();
  });
}

function wsOpens(url: string, protocol?: string): Promise<boolean> {
  return new Promise((resolve) => {
    const ws = new WebSocket(url, protocol);
    ws.on('open', () => {
      ws.close();
      resolve(true);
    });
    ws.on('error', () => resolve(false));
  });
}

describe('embedded PeerServer', () => {
  it('answers at /peerjs with peer listing on, and leaves other upgrades and paths alone', async () => {
    const http = createServer();
    const peers = attachPeerServer(http);
    // Someone else's websocket endpoint on the same server, as Vite's HMR is.
    const other = new WebSocketServer({ noServer: true });
    http.on('upgrade', (req, socket, head) => {
      if (req.url === '/hmr') other.handleUpgrade(req, socket, head, (ws) => ws.close());
    });
    http.on('request', (req, res) => peers.handle(req, res, () => res.writeHead(418).end('not mine')));
    await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
    const port = (http.address() as { port: number }).port;
    try {
      expect(JSON.parse((await get(port, '/peerjs')).body)).toMatchObject({ name: 'PeerJS Server' });
      expect((await get(port, '/peerjs/peerjs/id')).body).toMatch(/^[0-9a-f-]{36}$/);
      expect((await get(port, '/peerjs/peerjs/peers')).status).toBe(401); // no global listing
      expect(JSON.parse((await get(port, `/peerjs/peerjs/rooms/${'a'.repeat(32)}`)).body)).toEqual([]);
      expect((await get(port, '/peerjsx')).status).toBe(418);
      expect((await get(port, '/')).status).toBe(418);
      expect(await wsOpens(`ws://127.0.0.1:${port}/hmr`)).toBe(true);
      // A signalling client with a member id registers; other ids are refused.
      expect(await wsOpens(`ws://127.0.0.1:${port}/peerjs/peerjs?key=peerjs&id=${memberId('a'.repeat(32), newKeyPair().publicKey)}&token=t1`)).toBe(true);
      expect(await wsOpens(`ws://127.0.0.1:${port}/peerjs/peerjs?key=peerjs&id=abc&token=t1`)).toBe(false);
    } finally {
      peers.close();
      other.close();
      http.closeAllConnections();
      await new Promise((r) => http.close(r));
    }
  });
});

describe('npm start server', () => {
  it('static files never resolve outside the directory', () => {
    expect(resolveStatic(dist, '/')).toBe(path.join(dist, 'index.html'));
    expect(resolveStatic(dist, '/assets/app-1234.js?v=1')).toBe(path.join(dist, 'assets', 'app-1234.js'));
    for (const p of ['/../package.json', '/..%2fpackage.json', '/assets/../../x', '/%2e%2e/%2e%2e/etc/passwd', '/a%00b', '/%E0%A4%A']) {
      expect(resolveStatic(dist, p)).toBeNull();
    }
  });

  it('serves dist/ and the PeerServer from one process', async () => {
    const child = spawn(process.execPath, ['scripts/run-node.mjs', 'src/server/serve.ts', '--port', '0', '--host', '127.0.0.1', '--dir', dist], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    try {
      let out = '';
      const port = await new Promise<number>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no address printed:\n${out}`)), 20_000);
        const onData = (d: Buffer) => {
          out += d.toString();
          const m = /http:\/\/localhost:(\d+)\//.exec(out);
          if (m) {
            clearTimeout(timer);
            resolve(Number(m[1]));
          }
        };
        child.stdout!.on('data', onData);
        child.stderr!.on('data', onData);
      });
      const index = await get(port, '/');
      expect(index).toMatchObject({ status: 200, type: 'text/html; charset=utf-8' });
      expect(index.body).toContain('<title>lab</title>');
      expect((await get(port, '/?room=abcdefghijklmnopqrstuvwxyz')).body).toContain('<title>lab</title>');
      expect(await get(port, '/assets/app-1234.js')).toMatchObject({ status: 200, body: 'console.log(1)' });
      expect((await get(port, '/missing.js')).status).toBe(404);
      expect((await get(port, '/../package.json')).body).not.toContain('webgpu-quant-lab');
      expect((await get(port, '/peerjs/peerjs/peers')).status).toBe(401);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
