/**
 * Screening of the members' contributions before they are summed (verified-reduce.ts), and the
 * strikes that remove a member whose contributions keep failing. Every member screens the same
 * bytes with the same arithmetic in the same order, so every member reaches the same decision.
 *
 * A contribution is left out of the step's mean when it
 *  - holds a non-finite value;
 *  - has an L2 norm above `normK` × the median norm of the other (finite) contributions;
 *  - (when `minCosine` is set and at least 3 remain) points away from the mean of the others:
 *    the worst such contribution is dropped, then the test is repeated on the rest, while more
 *    than half of the screened members remain (so a minority can never outvote the majority).
 * Malformed or equivocated contributions are faults, decided before screening (verified-reduce.ts).
 */
import type { PeerId } from '../transport/transport';

export interface ScreenOptions {
  /** Largest norm, as a multiple of the median of the other members' norms (default 4). */
  normK: number;
  /** Smallest cosine with the mean of the other contributions (default -0.2; null: not checked). */
  minCosine: number | null;
  /** Consecutive screened-out steps after which a member is removed (default 3). */
  strikes: number;
}

export const DEFAULT_SCREEN: ScreenOptions = { normK: 4, minCosine: -0.2, strikes: 3 };

export function resolveScreen(o: Partial<ScreenOptions> = {}): ScreenOptions {
  const s = { ...DEFAULT_SCREEN, ...o };
  if (!(s.normK >= 1) || !Number.isFinite(s.normK)) throw new Error(`screen: normK must be a finite number ≥ 1, got ${s.normK}`);
  if (s.minCosine !== null && !(s.minCosine >= -1 && s.minCosine <= 1)) throw new Error(`screen: minCosine must be in [-1, 1] or null, got ${s.minCosine}`);
  if (!Number.isSafeInteger(s.strikes) || s.strikes < 1) throw new Error(`screen: strikes must be an integer ≥ 1, got ${s.strikes}`);
  return s;
}

/** Why one member's contribution was left out; `fault` ones remove the member at once. */
export interface Exclusion {
  peer: PeerId;
  rank: number;
  why: string;
  fault: boolean;
}

/** What the screen needs from the data: sums over the contributions, in a fixed order. */
export interface ScreenData {
  /** Per rank: all values finite, and the squared L2 norm. */
  finite: boolean[];
  norm2: number[];
  /** For the ranks of `set`: g_i · Σ_{j∈set} g_j, and |Σ_{j∈set} g_j|². */
  dots(set: number[]): { dot: number[]; sum2: number };
}

function median(v: number[]): number {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Screens the candidate ranks; returns those kept (ascending) and the exclusions. */
export function screen(members: readonly PeerId[], candidates: number[], d: ScreenData, o: ScreenOptions): { kept: number[]; excluded: Exclusion[] } {
  const excluded: Exclusion[] = [];
  const out = (rank: number, why: string) => excluded.push({ peer: members[rank], rank, why, fault: false });
  const finite = candidates.filter((r) => {
    if (!d.finite[r] || !Number.isFinite(d.norm2[r])) out(r, 'non-finite values');
    return d.finite[r] && Number.isFinite(d.norm2[r]);
  });
  const norm = (r: number) => Math.sqrt(d.norm2[r]);
  let kept = finite.filter((r) => {
    const others = finite.filter((q) => q !== r).map(norm);
    if (others.length === 0) return true;
    const m = median(others);
    if (norm(r) <= o.normK * m) return true;
    out(r, `norm ${norm(r).toExponential(3)} above ${o.normK} × the others' median ${m.toExponential(3)}`);
    return false;
  });
  if (o.minCosine !== null) {
    const floor = kept.length / 2;
    while (kept.length >= 3 && kept.length - 1 > floor) {
      const { dot, sum2 } = d.dots(kept);
      // cos(g_i, Σ_{j≠i} g_j) from g_i·S, |S|², |g_i|²; a zero vector counts as cosine 0.
      const cos = kept.map((r, i) => {
        const rest2 = sum2 - 2 * dot[i] + d.norm2[r];
        const den = norm(r) * Math.sqrt(Math.max(0, rest2));
        return den > 0 ? (dot[i] - d.norm2[r]) / den : 0;
      });
      let worst = 0;
      for (let i = 1; i < cos.length; i++) if (cos[i] < cos[worst]) worst = i;
      if (!(cos[worst] < o.minCosine)) break;
      out(kept[worst], `cosine ${cos[worst].toFixed(3)} with the others' mean, below ${o.minCosine}`);
      kept = kept.filter((_, i) => i !== worst);
    }
  }
  return { kept, excluded };
}

/**
 * Who may stay: consecutive screened-out steps per member, the members removed for good (faults,
 * `strikes` failures in a row, divergence), and how often a member's HELLO may force a regroup.
 * Fed the same exclusions on every member, it removes alike.
 */
export class MemberGuard {
  private readonly count = new Map<PeerId, number>();
  private readonly banned = new Map<PeerId, string>();
  private readonly restarts = new Map<PeerId, number>();

  constructor(
    private readonly strikes: number,
    private readonly restartIntervalMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  /** Records one step's exclusions; returns the members to remove now, with why. */
  record(members: readonly PeerId[], excluded: readonly Exclusion[]): Exclusion[] {
    const out: Exclusion[] = [];
    for (const p of members) if (!excluded.some((e) => e.peer === p)) this.count.delete(p);
    for (const e of excluded) {
      const c = (this.count.get(e.peer) ?? 0) + 1;
      this.count.set(e.peer, c);
      if (e.fault || c >= this.strikes) {
        const why = e.fault ? e.why : `screened out ${c} steps in a row (last: ${e.why})`;
        this.ban(e.peer, why);
        out.push({ ...e, why });
      }
    }
    return out;
  }

  /** Removes `peer` for good. */
  ban(peer: PeerId, why: string): void {
    this.banned.set(peer, why);
  }

  /** Why `peer` was removed, or null: a removed member is not admitted again. */
  bannedWhy(peer: PeerId): string | null {
    return this.banned.get(peer) ?? null;
  }

  /** Whether a member's HELLO (a restart: it rejoins afresh, the group regroups) is honoured now. */
  allowRestart(peer: PeerId): boolean {
    const t = this.now();
    const last = this.restarts.get(peer);
    if (last !== undefined && t - last < this.restartIntervalMs) return false;
    this.restarts.set(peer, t);
    return true;
  }
}
