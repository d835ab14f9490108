import { afterEach, describe, expect, it, vi } from 'vitest';
import { limitTransport } from '../../src/peers/transport/limiter';
import { LoopbackHub } from '../../src/peers/transport/loopback';
import { bytesOf, settle } from './helpers';

describe('LoopbackHub', () => {
  it('delivers asynchronously, in order, with counters and buffered amounts', async () => {
    const { transports: [a, b] } = LoopbackHub.group(2);
    const got: number[] = [];
    b.onMessage((from, m) => {
      expect(from).toBe('p0');
      got.push(m[0]);
    });
    const buf = bytesOf(1, 2, 3);
    a.send('p1', buf);
    buf[0] = 99; // the message was copied at send
    a.send('p1', bytesOf(2));
    expect(got).toEqual([]); // never synchronous
    expect(a.bufferedAmount('p1')).toBe(4);
    const drained = a.waitForBufferedBelow('p1', 0);
    await settle();
    await drained;
    expect(got).toEqual([1, 2]);
    expect(a.bufferedAmount('p1')).toBe(0);
    expect(a.stats).toMatchObject({ bytesSent: 4, messagesSent: 2 });
    expect(b.stats).toMatchObject({ bytesReceived: 4, messagesReceived: 2 });
    expect(() => a.send('nobody', bytesOf(1))).toThrow(/unknown peer/);
  });

  it('reports joins and leaves; a closed endpoint neither sends nor receives', async () => {
    const hub = new LoopbackHub();
    const a = hub.endpoint('a');
    const events: string[] = [];
    a.onPeerJoin((p) => events.push(`+${p}`));
    a.onPeerLeave((p) => events.push(`-${p}`));
    const b = hub.endpoint('b');
    expect(b.peers()).toEqual(['a']);
    expect(a.peers()).toEqual(['b']);
    b.send('a', bytesOf(1)); // in flight when b closes: dropped
    b.close();
    await settle();
    expect(events).toEqual(['+b', '-b']);
    expect(a.stats.messagesReceived).toBe(0);
    expect(a.peers()).toEqual([]);
    expect(() => b.send('a', bytesOf(1))).toThrow(/closed/);
  });

  it('reorder option shuffles deliveries but loses none', async () => {
    const { transports: [a, b] } = LoopbackHub.group(2, { reorder: { seed: 3 } });
    const got: number[] = [];
    b.onMessage((_, m) => got.push(m[0]));
    for (let i = 0; i < 50; i++) a.send('p1', bytesOf(i));
    await settle();
    expect([...got].sort((x, y) => x - y)).toEqual([...Array(50).keys()]);
    expect(got).not.toEqual([...Array(50).keys()]);
  });
});

describe('limitTransport', () => {
  afterEach(() => {
    vi.useRealTimers();
  });

  it('holds a transfer to the configured bandwidth and adds latency (fake timers)', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const { transports } = LoopbackHub.group(2);
    // 10 kB/s, 100 B bucket, 50 ms latency: 20 messages of 500 B need ≈ (10 000 − 100)/10 000 s.
    const a = limitTransport(transports[0], { bytesPerSecond: 10_000, latencyMs: 50, burstBytes: 100 });
    const arrivals: number[] = [];
    const t0 = Date.now();
    transports[1].onMessage(() => arrivals.push(Date.now() - t0));
    for (let i = 0; i < 20; i++) a.send('p1', new Uint8Array(500));
    expect(a.bufferedAmount('p1')).toBe(9500); // the first message went out on the burst
    await vi.advanceTimersByTimeAsync(49);
    expect(arrivals.length).toBe(0); // latency
    await vi.advanceTimersByTimeAsync(1);
    expect(arrivals.length).toBe(1);
    await vi.advanceTimersByTimeAsync(400);
    expect(arrivals.length).toBeLessThan(10);
    await vi.advanceTimersByTimeAsync(2000);
    expect(arrivals.length).toBe(20);
    const last = arrivals.at(-1)!;
    expect(last).toBeGreaterThanOrEqual(950);
    expect(last).toBeLessThan(1100);
    expect(a.bufferedAmount('p1')).toBe(0);

    // Unlimited, the same transfer arrives within one timer tick.
    const { transports: fast } = LoopbackHub.group(2);
    let n = 0;
    fast[1].onMessage(() => n++);
    for (let i = 0; i < 20; i++) fast[0].send('p1', new Uint8Array(500));
    await vi.advanceTimersByTimeAsync(0);
    expect(n).toBe(20);
  });

  it('waitForBufferedBelow resolves as the bucket drains', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'Date'] });
    const { transports } = LoopbackHub.group(2);
    const a = limitTransport(transports[0], { bytesPerSecond: 1000, burstBytes: 10 });
    for (let i = 0; i < 10; i++) a.send('p1', new Uint8Array(100));
    let woke = false;
    void a.waitForBufferedBelow('p1', 300).then(() => (woke = true));
    await vi.advanceTimersByTimeAsync(500);
    expect(woke).toBe(false);
    await vi.advanceTimersByTimeAsync(200);
    expect(woke).toBe(true);
    expect(a.bufferedAmount('p1')).toBeLessThanOrEqual(300);
  });
});
