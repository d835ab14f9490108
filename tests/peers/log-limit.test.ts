import { describe, expect, it } from 'vitest';
import { PerKeyRateLimit } from '../../src/peers/peerjs/log-limit';

describe('PerKeyRateLimit', () => {
  it('passes a burst per key and window, then counts the rest into the next report that passes', () => {
    const l = new PerKeyRateLimit(2, 1000, 3);
    expect([0, 1, 2, 3].map((i) => l.take('a', i).pass)).toEqual([true, true, false, false]);
    expect(l.take('b', 4)).toEqual({ pass: true, suppressed: 0 }); // other keys are not held back
    expect(l.take('a', 1000)).toEqual({ pass: true, suppressed: 2 });
    expect(l.take('a', 1001)).toEqual({ pass: true, suppressed: 0 });
    // Beyond maxKeys the least recently seen key is forgotten: memory stays bounded.
    for (const k of ['c', 'd', 'e']) l.take(k, 1002);
    l.take('a', 1003);
    l.take('a', 1004);
    expect(l.take('a', 1005).pass).toBe(false);
  });
});
