/**
 * Reports rate-limited per remote: a peer (or a stranger) that sends garbage by the thousand gets a
 * few lines and a count, not one line per message.
 */

/** Per key: at most `burst` reports per `windowMs`; the rest are counted and summed up in the next one let through. */
export class PerKeyRateLimit {
  private readonly windows = new Map<string, { start: number; passed: number; suppressed: number }>();

  constructor(
    private readonly burst = 5,
    private readonly windowMs = 10_000,
    /** Keys remembered at once; the least recently seen is forgotten beyond this. */
    private readonly maxKeys = 1024,
  ) {}

  /**
   * Whether a report for `key` passes now; when it does, how many were suppressed for that key
   * since the last one that passed.
   */
  take(key: string, now = Date.now()): { pass: boolean; suppressed: number } {
    let w = this.windows.get(key);
    this.windows.delete(key);
    if (!w || now - w.start >= this.windowMs) w = { start: now, passed: 0, suppressed: w?.suppressed ?? 0 };
    this.windows.set(key, w);
    if (this.windows.size > this.maxKeys) this.windows.delete(this.windows.keys().next().value!);
    if (w.passed >= this.burst) {
      w.suppressed++;
      return { pass: false, suppressed: 0 };
    }
    w.passed++;
    const suppressed = w.suppressed;
    w.suppressed = 0;
    return { pass: true, suppressed };
  }
}
