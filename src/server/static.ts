/**
 * Serves a built single-page app from a directory with plain node:http: files by path (never outside
 * the directory), index.html for the root and for extension-less paths, 404 otherwise.
 */
import { createReadStream, existsSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import path from 'node:path';

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json',
  '.map': 'application/json',
  '.txt': 'text/plain; charset=utf-8',
  '.wgsl': 'text/plain; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.wasm': 'application/wasm',
  '.npy': 'application/octet-stream',
  '.safetensors': 'application/octet-stream',
};

/** The file under `root` that a request path names, or null (outside root, missing, not a file). */
export function resolveStatic(root: string, urlPath: string): string | null {
  let rel: string;
  try {
    rel = decodeURIComponent(urlPath.split('?')[0]);
  } catch {
    return null;
  }
  if (rel.includes('\0')) return null;
  // Normalising as an absolute posix path first removes every '..' that would climb above root.
  const file = path.resolve(root, `.${path.posix.normalize(`/${rel}`)}`);
  if (file !== root && !file.startsWith(root + path.sep)) return null;
  const candidate = existsSync(file) && statSync(file).isDirectory() ? path.join(file, 'index.html') : file;
  return existsSync(candidate) && statSync(candidate).isFile() ? candidate : null;
}

function sendFile(res: ServerResponse, file: string, head: boolean): void {
  res.writeHead(200, {
    'content-type': CONTENT_TYPES[path.extname(file)] ?? 'application/octet-stream',
    'content-length': statSync(file).size,
    // Vite's hashed assets never change; the page itself must be re-read to pick up a new build.
    'cache-control': file.includes(`${path.sep}assets${path.sep}`) ? 'public, max-age=31536000, immutable' : 'no-cache',
  });
  if (head) res.end();
  else createReadStream(file).pipe(res);
}

export function serveStatic(dir: string): (req: IncomingMessage, res: ServerResponse) => void {
  const root = path.resolve(dir);
  return (req, res) => {
    const method = req.method ?? 'GET';
    if (method !== 'GET' && method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD' }).end();
      return;
    }
    const url = req.url ?? '/';
    const file = resolveStatic(root, url);
    if (file) return sendFile(res, file, method === 'HEAD');
    // The page is one document: extension-less paths get it (its state lives in ?room=... and the like).
    if (path.extname(url.split('?')[0]) === '') return sendFile(res, path.join(root, 'index.html'), method === 'HEAD');
    res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found');
  };
}
