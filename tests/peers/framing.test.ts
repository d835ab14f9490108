import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc32 } from '../../src/peers/collectives/crc32';
import {
  decodeFrame,
  encodeFrame,
  encodeMessage,
  FRAME_VERSION,
  FrameType,
  HEADER_BYTES,
  Reassembler,
} from '../../src/peers/collectives/framing';
import { Rng } from '../../src/engine/util/rng';

const hdr = { type: FrameType.AllGather, runId: 7, step: 3, tag: 2, seq: 11 };

describe('crc32', () => {
  it('matches the IEEE check value and known vectors', () => {
    expect(crc32(new TextEncoder().encode('123456789'))).toBe(0xcbf43926);
    expect(crc32(new Uint8Array(0))).toBe(0);
    expect(crc32(new TextEncoder().encode('The quick brown fox jumps over the lazy dog'))).toBe(0x414fa339);
  });
});

describe('frames', () => {
  it('round-trips header fields and payload', () => {
    const payload = new Rng(1).uniformArray(100).map((v) => v * 100);
    const bytes = new Uint8Array(payload.buffer);
    const f = encodeFrame({ ...hdr, chunkIndex: 0, chunkCount: 1, totalLength: bytes.length }, bytes);
    expect(f.length).toBe(HEADER_BYTES + bytes.length);
    const d = decodeFrame(f);
    expect(d.ok).toBe(true);
    if (!d.ok) return;
    expect(d.frame).toMatchObject({ ...hdr, chunkIndex: 0, chunkCount: 1, totalLength: bytes.length });
    expect([...d.frame.payload]).toEqual([...bytes]);
  });

  it('rejects every single-bit flip (fast-check)', () => {
    const f = encodeFrame({ ...hdr, chunkIndex: 0, chunkCount: 1, totalLength: 40 }, new Uint8Array(40).fill(9));
    fc.assert(
      fc.property(fc.integer({ min: 0, max: f.length * 8 - 1 }), (bit) => {
        const g = f.slice();
        g[bit >> 3] ^= 1 << (bit & 7);
        return !decodeFrame(g).ok;
      }),
      { numRuns: 500 },
    );
  });

  it('names the reason: short, oversized, magic, version, type, checksum, chunk fields', () => {
    const good = encodeFrame({ ...hdr, chunkIndex: 0, chunkCount: 1, totalLength: 8 }, new Uint8Array(8));
    const reseal = (g: Uint8Array) => {
      const c = crc32(Uint8Array.from([...g.subarray(0, 40), ...g.subarray(HEADER_BYTES)]));
      new DataView(g.buffer).setUint32(40, c, true);
      return g;
    };
    const patch = (off: number, v: number, size: 1 | 4) => {
      const g = good.slice();
      const dv = new DataView(g.buffer);
      if (size === 1) dv.setUint8(off, v);
      else dv.setUint32(off, v, true);
      return reseal(g);
    };
    const reason = (b: Uint8Array) => {
      const d = decodeFrame(b, HEADER_BYTES + 64);
      return d.ok ? 'ok' : d.reason;
    };
    expect(reason(good)).toBe('ok');
    expect(reason(good.subarray(0, 30))).toMatch(/short/);
    expect(reason(new Uint8Array(HEADER_BYTES + 65))).toMatch(/oversized/);
    expect(reason(patch(0, 0x12345678, 4))).toMatch(/magic/);
    expect(reason(patch(4, FRAME_VERSION + 1, 1))).toMatch(/version/);
    expect(reason(patch(5, 99, 1))).toMatch(/type/);
    expect(reason(patch(24, 1, 4))).toMatch(/chunk/);
    expect(reason(patch(36, 4, 4))).toMatch(/larger|length/);
    const bad = good.slice();
    bad[HEADER_BYTES] ^= 0xff;
    expect(reason(bad)).toMatch(/checksum/);
  });
});

describe('Reassembler', () => {
  const payload = (n: number, seed: number) => Uint8Array.from(new Rng(seed).uniformArray(n, 0, 256), Math.floor);

  it('reassembles chunks in any order; empty and 1-chunk messages', () => {
    const rng = new Rng(5);
    for (const n of [0, 1, 99, 100, 101, 1000]) {
      const p = payload(n, n);
      const frames = encodeMessage(hdr, p, 100);
      expect(frames.length).toBe(Math.max(1, Math.ceil(n / 100)));
      for (let i = frames.length - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [frames[i], frames[j]] = [frames[j], frames[i]];
      }
      const r = new Reassembler({ maxChunkPayload: 100 });
      const results = frames.map((f) => {
        const d = decodeFrame(f);
        if (!d.ok) throw new Error(d.reason);
        return r.add('a', d.frame);
      });
      const last = results.at(-1)!;
      expect(results.slice(0, -1).every((x) => x.kind === 'pending')).toBe(true);
      expect(last.kind).toBe('complete');
      if (last.kind === 'complete') expect([...last.message.payload]).toEqual([...p]);
      expect(r.inFlight()).toBe(0);
    }
  });

  const frameOf = (b: Uint8Array) => {
    const d = decodeFrame(b);
    if (!d.ok) throw new Error(d.reason);
    return d.frame;
  };

  it('enforces message size, in-flight count, duplicates, header agreement and timeouts', () => {
    let now = 0;
    const r = new Reassembler({ maxChunkPayload: 10, maxMessageBytes: 50, maxInFlightPerPeer: 2, timeoutMs: 100 }, () => now);
    expect(r.add('a', frameOf(encodeMessage(hdr, payload(51, 1), 10)[0]))).toMatchObject({ kind: 'reject', reason: /too large/ });
    expect(r.add('a', frameOf(encodeMessage(hdr, payload(11, 1), 11)[0]))).toMatchObject({ kind: 'reject', reason: /chunk too large/ });
    const m1 = encodeMessage({ ...hdr, seq: 1 }, payload(30, 1), 10);
    const m2 = encodeMessage({ ...hdr, seq: 2 }, payload(30, 2), 10);
    const m3 = encodeMessage({ ...hdr, seq: 3 }, payload(30, 3), 10);
    expect(r.add('a', frameOf(m1[0])).kind).toBe('pending');
    expect(r.add('a', frameOf(m1[0]))).toMatchObject({ kind: 'reject', reason: /duplicate/ });
    expect(r.add('a', frameOf(m2[0])).kind).toBe('pending');
    expect(r.add('a', frameOf(m3[0]))).toMatchObject({ kind: 'reject', reason: /in flight/ });
    expect(r.add('b', frameOf(m3[0])).kind).toBe('pending'); // limits are per peer
    const other = encodeMessage({ ...hdr, seq: 1, tag: 9 }, payload(30, 1), 10);
    expect(r.add('a', frameOf(other[1]))).toMatchObject({ kind: 'reject', reason: /disagrees/ });
    expect(r.inFlight()).toBe(3);
    now = 101;
    expect(r.expire()).toBe(3);
    expect(r.add('a', frameOf(m1[1])).kind).toBe('pending'); // a fresh partial after the timeout
  });
});
