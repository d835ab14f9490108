/**
 * An attacker's tools, written from the protocol descriptions (PeerServer websocket protocol,
 * docs/peer-groups.md's id and listing scheme), not from the project's client code: a raw
 * signalling client over `ws`, ids shaped like member ids, and the headless CLI peer as a victim.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { request } from 'node:http';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ristretto255, ristretto255_hasher } from '@noble/curves/ed25519.js';
import { hmac } from '@noble/hashes/hmac.js';
import { sha512 } from '@noble/hashes/sha2.js';
import { WebSocket } from 'ws';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

const B32 = 'abcdefghijklmnopqrstuvwxyz234567';
export function b32(bytes: Uint8Array): string {
  let out = '';
  let acc = 0;
  let bits = 0;
  for (const b of bytes) {
    acc = (acc << 8) | b;
    bits += 8;
    while (bits >= 5) {
      out += B32[(acc >>> (bits - 5)) & 31];
      bits -= 5;
    }
    acc &= (1 << bits) - 1;
  }
  if (bits > 0) out += B32[(acc << (5 - bits)) & 31];
  return out;
}
const sha = (s: string) => createHash('sha256').update(s).digest();
export const rand16 = () => b32(randomBytes(10));

/** The discovery key a link holder computes from the room id (docs/peer-groups.md). */
export const discoveryOf = (room: string) => b32(sha(`wgpg-room-discovery\0${room}`).subarray(0, 20));
const tagOf = (d: string) => b32(sha(`wgpg-room-tag\0${d}`).subarray(0, 10));
/** A member id with a valid mark: what a link holder can make. */
export const linkHolderId = (d: string) => {
  const r = rand16();
  return `${tagOf(d)}-${r}-${b32(sha(`wgpg-member-mark\0${d}\0${r}`).subarray(0, 10))}`;
};
/** An id under a known tag (read from one member id) with a made-up mark: what a stranger can make. */
export const strangerId = (tag = rand16()) => `${tag}-${rand16()}-${rand16()}`;

/** A raw PeerServer client: registers an id and sends whatever JSON it likes to whomever it likes. */
export class RawSignal {
  readonly received: { type?: string }[] = [];
  /** Set when the server closed or cut the socket. */
  closedBy: number | null = null;
  private constructor(
    readonly id: string,
    private readonly ws: WebSocket,
    /** The token it registered with (it proves the id is its own). */
    readonly token: string,
  ) {
    ws.on('close', (code) => (this.closedBy = code));
    ws.on('message', (d) => {
      try {
        this.received.push(JSON.parse(String(d)) as { type?: string });
      } catch {
        // not JSON: ignored
      }
    });
  }

  /** Resolves once the server said OPEN; rejects with the HTTP status if it refused the registration. */
  static connect(port: number, id: string, headers: Record<string, string> = {}, from?: string): Promise<RawSignal> {
    const token = b32(randomBytes(5));
    const url = `ws://127.0.0.1:${port}/peerjs/peerjs?key=peerjs&id=${encodeURIComponent(id)}&token=${token}`;
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(url, { headers, ...(from ? { localAddress: from } : {}) });
      const s = new RawSignal(id, ws, token);
      ws.on('unexpected-response', (_req, res) => reject(new Error(`refused: HTTP ${res.statusCode}`)));
      ws.on('error', (e) => reject(e));
      ws.on('message', (d) => {
        if (String(d).includes('"OPEN"')) resolve(s);
      });
    });
  }

  send(m: unknown): void {
    this.ws.send(typeof m === 'string' ? m : JSON.stringify(m));
  }

  /** Stops reading: what the server sends piles up in the kernel's buffers, then in the server's. */
  stopReading(): void {
    this.ws.pause();
  }

  /** Sends as fast as the socket takes it (waiting only for its own buffer), until `n` messages or the socket closes. */
  async flood(n: number, m: (i: number) => string): Promise<number> {
    let sent = 0;
    for (; sent < n && this.ws.readyState === WebSocket.OPEN; sent++) {
      this.ws.send(m(sent));
      if (this.ws.bufferedAmount > 4 * 1024 * 1024) await new Promise((r) => setTimeout(r, 1));
    }
    return sent;
  }

  get open(): boolean {
    return this.ws.readyState === WebSocket.OPEN;
  }

  /** Resolves once everything sent so far has left the socket. */
  async flushed(): Promise<void> {
    while (this.ws.readyState === WebSocket.OPEN && this.ws.bufferedAmount > 0) await new Promise((r) => setTimeout(r, 5));
  }

  close(): void {
    this.ws.terminate();
  }
}

/** The headless CLI peer as a separate process (`npm run peer`), so that a crash is a real exit. */
export class CliPeer {
  out = '';
  exited: number | null = null;
  private constructor(readonly child: ChildProcess) {
    child.stdout!.on('data', (d: Buffer) => (this.out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.out += d.toString()));
    child.on('exit', (code, sig) => (this.exited = code ?? (sig ? 128 : -1)));
  }

  static start(args: string[]): CliPeer {
    return new CliPeer(spawn(process.execPath, ['scripts/run-node.mjs', 'src/cli/peer.ts', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] }));
  }

  /** The peer's id and room link, once it printed them. */
  async ready(ms = 30_000): Promise<{ id: string; link: string }> {
    await until(() => /room created; link: (\S+)/.test(this.out) || this.exited !== null, ms, `the CLI peer to start:\n${this.out}`);
    if (this.exited !== null) throw new Error(`the CLI peer exited ${this.exited}:\n${this.out}`);
    return { id: /peer: (\S+) on /.exec(this.out)![1], link: /room created; link: (\S+)/.exec(this.out)![1] };
  }

  /** Resident memory of the process in MB (Linux /proc). */
  rssMb(): number {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${this.child.pid}/status`, 'utf8'));
    return Number(m![1]) / 1024;
  }

  kill(): void {
    this.child.kill('SIGKILL');
  }
}

/** A raw HTTP GET (no URL normalisation), optionally from another local address. */
export function httpGet(port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Record<string, unknown> }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Whether a TURN REST credential (coturn use-auth-secret) is one the TURN server takes at `nowS`:
 * username `<expiry unix s>:<anything>`, credential base64(HMAC-SHA1(secret, username)), not expired.
 */
export function turnServerAccepts(secret: string, username: string, credential: string, nowS = Date.now() / 1000): boolean {
  const expiry = Number(username.split(':')[0]);
  return Number.isFinite(expiry) && expiry > nowS && createHmac('sha1', secret).update(username).digest('base64') === credential;
}

export async function until(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A link holder's side of the admission PAKE, from its description (docs/peer-groups.md): CPace-style
 * on ristretto255, generator from the room key (PBKDF2) and the length-prefixed sid of both ids and
 * nonces, session key from the shared point, HMAC-SHA512 key confirmations.
 */
export class PakeAttacker {
  private readonly a = ristretto255_hasher.hashToScalar(randomBytes(64));
  readonly share: Uint8Array;
  private readonly sid: Uint8Array;
  constructor(
    room: string,
    guess: string,
    private readonly self: string,
    private readonly peer: string,
    selfNonce: Uint8Array,
    peerNonce: Uint8Array,
  ) {
    const prs = pbkdf2Sync(`wgpg-pass\0${guess}`, `wgpg-room-key\0${room}`, 100_000, 32, 'sha256');
    const [lo, hi] = self < peer ? [[self, selfNonce], [peer, peerNonce]] as const : [[peer, peerNonce], [self, selfNonce]] as const;
    this.sid = sha512(lp('wgpg-cpace-sid-v1', lo[0], hi[0], lo[1], hi[1]));
    const g = ristretto255_hasher.hashToCurve(lp(new Uint8Array(prs), this.sid), { DST: 'wgpg-cpace-generator-v1' });
    this.share = g.multiply(this.a).toBytes();
  }
  /** The session key as this side computes it from the peer's share. */
  isk(peerShare: Uint8Array): Uint8Array {
    const k = ristretto255.Point.fromBytes(peerShare).multiply(this.a).toBytes();
    const [x, y] = this.self < this.peer ? [this.share, peerShare] : [peerShare, this.share];
    return sha512(lp('wgpg-cpace-isk-v1', this.sid, k, x, y));
  }
  confirm(isk: Uint8Array, prover: string, verifier: string): Uint8Array {
    return hmac(sha512, isk, lp('wgpg-cpace-confirm-v1', prover, verifier));
  }
}

function lp(...parts: (Uint8Array | string)[]): Uint8Array {
  const bytes = parts.map((p) => (typeof p === 'string' ? new TextEncoder().encode(p) : p));
  return Uint8Array.from(bytes.flatMap((b) => [b.length >>> 8, b.length & 255, ...b]));
}
