/**
 * A local stand-in for the Hugging Face Hub's file layout, `/{org}/{name}/resolve/{revision}/{file}`,
 * served by node:http in the test process (nothing downloads from the internet in CI). It answers GET
 * and HEAD with Content-Length, honours `Range: bytes=N-` (206), logs every request, and can be told
 * to misbehave per path: refuse with a status and the Hub's X-Error-Code, cut a body short, or
 * require a bearer token. CORS is open (the page's e2e test fetches it from another origin); preflights are not logged.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// From import.meta.url: the e2e runner (tsx, ESM) has no __dirname.
export const FIXTURE_ROOT = fileURLToPath(new URL('../fixtures', import.meta.url));

export interface Fault {
  status?: number;
  errorCode?: string;
  errorMessage?: string;
  /** Send Content-Length of the whole file but only this many bytes, then drop the connection. */
  cutAt?: number;
}

export interface HubServer {
  endpoint: string;
  /** Every request as `METHOD /path` (Range appended), in order. */
  log: string[];
  /** Repo files by `org/name`: file name → bytes. */
  repos: Map<string, Map<string, Uint8Array>>;
  /** Faults by path (`org/name/file`), applied to every request of it. */
  faults: Map<string, Fault>;
  /** Repos that answer only with `Authorization: Bearer <token>`. */
  tokens: Map<string, string>;
  /** Empties the log, repos, faults and tokens (between tests sharing one server). */
  reset(): void;
  close(): Promise<void>;
}

/** The files of fixture folders merged into one repo (e.g. hf-llama's model/ and tokenizer/), the Hub's way. */
export function fixtureRepo(...dirs: string[]): Map<string, Uint8Array> {
  const out = new Map<string, Uint8Array>();
  for (const d of dirs) {
    const full = path.resolve(FIXTURE_ROOT, d);
    for (const n of readdirSync(full)) if (/\.(json|safetensors)$/.test(n) && n !== 'logits.json' && n !== 'ids.json') out.set(n, new Uint8Array(readFileSync(path.join(full, n))));
  }
  return out;
}

export async function startHubServer(): Promise<HubServer> {
  const log: string[] = [];
  const repos = new Map<string, Map<string, Uint8Array>>();
  const faults = new Map<string, Fault>();
  const tokens = new Map<string, string>();
  const server: Server = createServer((req, res) => {
    const range = req.headers.range;
    // The page fetches it cross-origin, as it does huggingface.co: CORS, with the Hub's error headers readable.
    res.setHeader('Access-Control-Allow-Origin', '*');
    res.setHeader('Access-Control-Expose-Headers', 'X-Error-Code, X-Error-Message, Content-Length, Content-Range');
    if (req.method === 'OPTIONS') {
      res.writeHead(204, { 'Access-Control-Allow-Headers': 'Authorization, Range', 'Access-Control-Allow-Methods': 'GET, HEAD' });
      return res.end();
    }
    log.push(`${req.method} ${req.url}${range ? ` ${range}` : ''}`);
    const m = /^\/([^/]+\/[^/]+)\/resolve\/([^/]+)\/(.+)$/.exec(req.url ?? '');
    const refuse = (status: number, code?: string, msg?: string) => {
      res.writeHead(status, { ...(code ? { 'X-Error-Code': code } : {}), ...(msg ? { 'X-Error-Message': msg } : {}), 'Content-Type': 'text/plain' });
      res.end(req.method === 'HEAD' ? undefined : `${status}`);
    };
    if (!m) return refuse(404, 'RepoNotFound');
    const [, repo, revision, file] = m;
    const files = repos.get(repo);
    if (!files) return refuse(401, 'RepoNotFound', 'Invalid username or password.');
    const token = tokens.get(repo);
    if (token && req.headers.authorization !== `Bearer ${token}`) {
      return refuse(req.headers.authorization ? 403 : 401, 'GatedRepo', `Access to model ${repo} is restricted. You must have access to it and be authenticated to access it.`);
    }
    if (revision !== 'main') return refuse(404, 'RevisionNotFound');
    const fault = faults.get(`${repo}/${file}`);
    if (fault?.status) return refuse(fault.status, fault.errorCode, fault.errorMessage);
    const body = files.get(file);
    if (!body) return refuse(404, 'EntryNotFound', `${file} does not exist on "${revision}"`);
    let start = 0;
    const r = range ? /^bytes=(\d+)-$/.exec(range) : null;
    if (r && Number(r[1]) < body.length) start = Number(r[1]);
    const part = body.subarray(start);
    res.writeHead(start > 0 ? 206 : 200, {
      'Content-Length': String(part.length), 'Content-Type': 'application/octet-stream', 'Accept-Ranges': 'bytes',
      ...(start > 0 ? { 'Content-Range': `bytes ${start}-${body.length - 1}/${body.length}` } : {}),
    });
    if (req.method === 'HEAD') return res.end();
    if (fault?.cutAt !== undefined && req.method === 'GET' && start === 0) {
      res.write(part.subarray(0, fault.cutAt), () => res.destroy());
      return;
    }
    res.end(part);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`, log, repos, faults, tokens,
    reset: () => {
      log.length = 0;
      for (const m of [repos, faults, tokens]) m.clear();
    },
    close: () => new Promise<void>((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
