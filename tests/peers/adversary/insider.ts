/**
 * An insider's client: an admitted member that speaks the group's protocol from its description
 * (src/peers/collectives/framing.ts's frame layout, src/parallel/dp/wire.ts's message layouts, dp-channels.ts's run
 * ids, verified-reduce.ts's commitment, commitment row, contribution and echo order), not from the project's sending code, and
 * sends whatever it likes to whomever it likes. It runs over any Transport (a loopback endpoint in
 * the tests): the transport is the link, not the client. Only SHA-256 comes from a library.
 */
import { sha256 } from '@noble/hashes/sha2.js';
import type { PeerId, Transport } from '../../../src/peers/transport/transport';

const CRC = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();
/** CRC-32 (IEEE, zlib's), continued over several byte ranges. */
export function crc(...parts: Uint8Array[]): number {
  let c = 0xffffffff;
  for (const b of parts) for (let i = 0; i < b.length; i++) c = CRC[(c ^ b[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

export const FRAME = { header: 44, magic: 0x47504757, broadcast: 1, allGather: 2, allToAll: 3 } as const;

/** One frame: the 44-byte header (framing.ts's layout) + payload; crc over bytes 0..40 and the payload. */
export function frame(type: number, runId: number, step: number, tag: number, seq: number, index: number, count: number, total: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(FRAME.header + payload.length);
  const dv = new DataView(out.buffer);
  dv.setUint32(0, FRAME.magic, true);
  dv.setUint8(4, 1);
  dv.setUint8(5, type);
  [runId, step, tag, seq, index, count, payload.length, total].forEach((v, i) => dv.setUint32(8 + 4 * i, v >>> 0, true));
  out.set(payload, FRAME.header);
  dv.setUint32(40, crc(out.subarray(0, 40), payload), true);
  return out;
}

// dp-wire.ts: 8-byte header 'WDP1' kind version=3 reserved=0; u32 LE fields; ids as u8 count + (u16 len + UTF-8).
const utf8 = new TextEncoder();
type Field = ['u8' | 'u32' | 'f32', number] | ['ids', string[]] | ['text', string];
function dpMessage(kind: number, fields: Field[]): Uint8Array {
  const parts: number[] = [];
  const put = (n: number, v: number, f = false) => {
    const b = new Uint8Array(n);
    const dv = new DataView(b.buffer);
    if (f) dv.setFloat32(0, v, true);
    else if (n === 1) dv.setUint8(0, v);
    else if (n === 2) dv.setUint16(0, v, true);
    else dv.setUint32(0, v >>> 0, true);
    parts.push(...b);
  };
  put(4, 0x31504457);
  put(1, kind);
  put(1, 3);
  put(2, 0);
  for (const f of fields) {
    if (f[0] === 'text') {
      const b = utf8.encode(f[1]);
      put(2, b.length);
      parts.push(...b);
    } else if (f[0] !== 'ids') put(f[0] === 'u8' ? 1 : 4, f[1], f[0] === 'f32');
    else {
      put(1, f[1].length);
      for (const id of f[1]) {
        const b = utf8.encode(id);
        put(2, b.length);
        parts.push(...b);
      }
    }
  }
  return Uint8Array.from(parts);
}
export const dp = {
  hello: (fingerprint: number) => dpMessage(1, [['u32', fingerprint]]),
  status: (s: { fingerprint: number; epoch: number; step: number; weightsHash: number; established: boolean; members: string[]; stateDigest: Uint8Array }) =>
    Uint8Array.from([...dpMessage(6, [['u32', s.fingerprint], ['u32', s.epoch], ['u32', s.step], ['u32', s.weightsHash], ['u8', s.established ? 1 : 0], ['ids', s.members]]), ...s.stateDigest]),
  report: (r: { step: number; weightsHash: number | null; loss: number; joiners?: string[]; accused?: string[] }) =>
    dpMessage(7, [['u32', r.step], ['u8', r.weightsHash === null ? 0 : 1], ['u32', r.weightsHash ?? 0], ['f32', r.loss], ['ids', r.joiners ?? []], ['ids', r.accused ?? []]]),
  /** The run tag of dp-channels.ts: crc32('dp-run:' + run) >>> 16; frame run id = tag << 16 | epoch. */
  runId: (run: string, epoch: number) => (((crc(utf8.encode(`dp-run:${run}`)) >>> 16) << 16) | epoch) >>> 0,
};

/** fp32 contribution bytes (little-endian floats) and back. */
export const f32 = {
  encode: (x: Float32Array) => new Uint8Array(x.slice().buffer),
  decode: (b: Uint8Array) => new Float32Array(b.slice().buffer),
};

interface Partial {
  chunks: Map<number, Uint8Array>;
  count: number;
}

/** An admitted member's endpoint: reassembled messages by (run id, step, tag, sender), raw sends. */
export class Insider {
  private readonly got = new Map<string, Uint8Array[]>();
  private readonly parts = new Map<string, Partial>();
  private readonly waiting = new Map<string, (b: Uint8Array) => void>();
  private seq = 0;

  constructor(
    readonly transport: Transport,
    readonly chunkPayload = 16 * 1024 - FRAME.header,
  ) {
    transport.onMessage((from, bytes) => this.receive(from, bytes));
  }

  get id(): PeerId {
    return this.transport.id;
  }

  private receive(from: PeerId, b: Uint8Array): void {
    if (b.length < FRAME.header) return;
    const dv = new DataView(b.buffer, b.byteOffset, b.byteLength);
    if (dv.getUint32(0, true) !== FRAME.magic) return;
    const [runId, step, tag, seq, index, count] = [8, 12, 16, 20, 24, 28].map((o) => dv.getUint32(o, true));
    const key = `${runId}/${step}/${tag}/${from}`;
    const pk = `${key}/${seq}`;
    const p = this.parts.get(pk) ?? { chunks: new Map(), count };
    p.chunks.set(index, b.slice(FRAME.header));
    this.parts.set(pk, p);
    if (p.chunks.size < p.count) return;
    this.parts.delete(pk);
    const all = [...Array(p.count).keys()].map((i) => p.chunks.get(i)!);
    const msg = new Uint8Array(all.reduce((s, c) => s + c.length, 0));
    let o = 0;
    for (const c of all) {
      msg.set(c, o);
      o += c.length;
    }
    const w = this.waiting.get(key);
    this.waiting.delete(key);
    if (w) w(msg);
    else this.got.set(key, [...(this.got.get(key) ?? []), msg]);
  }

  /** The message `from` sent for (run id, step, tag), when it arrives. */
  recv(from: PeerId, runId: number, step: number, tag: number, timeoutMs = 20_000): Promise<Uint8Array> {
    const key = `${runId}/${step}/${tag}/${from}`;
    const m = this.got.get(key)?.shift();
    if (m) return Promise.resolve(m);
    return new Promise((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`insider: nothing from ${from} for ${key}`)), timeoutMs);
      this.waiting.set(key, (b) => (clearTimeout(t), resolve(b)));
    });
  }

  /** The next control message of dp-wire kind `kind` from `from` (heartbeats and others skipped). */
  async recvControl(from: PeerId, run: string, kind: number, timeoutMs = 60_000): Promise<Uint8Array> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const m = await this.recv(from, dp.runId(run, 0), 0, 0, Math.max(1, end - Date.now()));
      if (m[4] === kind) return m;
    }
  }

  /** One message, split into frames of chunkPayload bytes. */
  send(to: PeerId, type: number, runId: number, step: number, tag: number, payload: Uint8Array): void {
    this.seq++;
    const count = Math.max(1, Math.ceil(payload.length / this.chunkPayload));
    for (let i = 0; i < count; i++) {
      const part = payload.subarray(i * this.chunkPayload, Math.min(payload.length, (i + 1) * this.chunkPayload));
      this.transport.send(to, frame(type, runId, step, tag, this.seq, i, count, payload.length, part));
    }
  }

  /** A control message (epoch 0 of the run: one broadcast frame, step 0, tag 0). */
  control(to: PeerId, run: string, payload: Uint8Array): void {
    this.send(to, FRAME.broadcast, dp.runId(run, 0), 0, 0, payload);
  }

  /**
   * The verified all-reduce's signed commitment to a contribution (signed-echo.ts's slot layout,
   * 128 B): the insider's Ed25519 public key ‖ the digest ‖ its signature over context ‖ digest,
   * the digest being SHA-256 of the SHA-256s of the buckets (one bucket each here).
   */
  commitment(context: Uint8Array, contribution: Uint8Array): Uint8Array {
    const id = this.transport.identity!;
    const digest = Insider.digest(contribution);
    return Uint8Array.from([...id.publicKey, ...digest, ...id.sign(Uint8Array.from([...context, ...digest]))]);
  }

  /** Whether a message from `from` for (run id, step, tag) has arrived (it stays to be received). */
  has(from: PeerId, runId: number, step: number, tag: number): boolean {
    return (this.got.get(`${runId}/${step}/${tag}/${from}`)?.length ?? 0) > 0;
  }

  /**
   * A signed statement of the membership agreement (agreement.ts's layout): body ‖ public key ‖
   * Ed25519 signature over 'wgpg-<domain>-v1\0' ‖ run id u32 ‖ group step u32 ‖ SHA-256 of the
   * '\n'-joined members ‖ body. `body` may be anything the insider likes: it signs what it sends.
   */
  statement(domain: string, runId: number, step: number, members: string[], body: Uint8Array): Uint8Array {
    const id = this.transport.identity!;
    const prefix = utf8.encode(`wgpg-${domain}-v1\0`);
    const ctx = new Uint8Array(prefix.length + 8 + 32);
    ctx.set(prefix);
    new DataView(ctx.buffer).setUint32(prefix.length, runId >>> 0, true);
    new DataView(ctx.buffer).setUint32(prefix.length + 4, step >>> 0, true);
    ctx.set(sha256(utf8.encode(members.join('\n'))), prefix.length + 8);
    return Uint8Array.from([...body, ...id.publicKey, ...id.sign(Uint8Array.from([...ctx, ...body]))]);
  }

  /** A signed WELCOME or CLAIM (control): fingerprint, epoch, members, key, signature over the 'welcome'/'claim' context of (fingerprint, epoch, sorted members). */
  signedMembers(kind: 'welcome' | 'claim', fingerprint: number, epoch: number, members: string[]): Uint8Array {
    const sorted = [...members].sort();
    const head = dpMessage(kind === 'welcome' ? 2 : 9, [['u32', fingerprint], ['u32', epoch], ['ids', sorted]]);
    const sig = this.statement(kind, fingerprint, epoch, sorted, new Uint8Array(0)).subarray(0);
    return Uint8Array.from([...head, ...sig]);
  }

  /** A REFUSE (control, kind 3): a reason, u16 length + UTF-8. */
  static refuse(reason: string): Uint8Array {
    return dpMessage(3, [['text', reason]]);
  }

  /** An echo row of the membership agreement: per rank, u32 LE length ‖ the statement held (0: none). */
  static echo(held: (Uint8Array | null)[]): Uint8Array {
    const parts: number[] = [];
    for (const b of held) {
      const len = new Uint8Array(4);
      new DataView(len.buffer).setUint32(0, b?.length ?? 0, true);
      parts.push(...len, ...(b ?? []));
    }
    return Uint8Array.from(parts);
  }

  static digest(contribution: Uint8Array): Uint8Array {
    return sha256(sha256(contribution));
  }

  /** The context every signature of one exchange is over: 'wgpg-contrib-v1\0', run id, step, first tag (u32 LE), SHA-256 of the '\n'-joined members. */
  static context(runId: number, step: number, tag: number, members: string[]): Uint8Array {
    const out = new Uint8Array(16 + 12 + 32);
    out.set(utf8.encode('wgpg-contrib-v1\0'));
    const dv = new DataView(out.buffer);
    [runId, step, tag].forEach((v, i) => dv.setUint32(16 + 4 * i, v >>> 0, true));
    out.set(sha256(utf8.encode(members.join('\n'))), 28);
    return out;
  }

  /** An echo or commitment row: per rank, public key ‖ digest ‖ signature (128 B; zeros: none held). */
  static row(slots: ({ key: Uint8Array; digest: Uint8Array; sig: Uint8Array } | null)[]): Uint8Array {
    const out = new Uint8Array(128 * slots.length);
    slots.forEach((x, r) => {
      if (!x) return;
      out.set(x.key, 128 * r);
      out.set(x.digest, 128 * r + 32);
      out.set(x.sig, 128 * r + 64);
    });
    return out;
  }

  /** A 128-byte commitment as a slot. */
  static slot(commitment: Uint8Array) {
    return { key: commitment.slice(0, 32), digest: commitment.slice(32, 64), sig: commitment.slice(64, 128) };
  }
}
