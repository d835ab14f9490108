/**
 * Screening of the members' contributions before they are summed (verified-reduce.ts), and the
 * strikes that remove a member whose contributions keep failing. Every member screens the same
 * bytes with the same arithmetic in the same order, so every member reaches the same decision.
 *
 * No contribution is judged by a statistic it shares with the one it may be up against. Each pair
 * of finite contributions is compared on its own: member k objects to r when
 *  - |g_r| > normK · |g_k| (r is far larger than k's), or
 *  - (when `minCosine` is set, 3 or more candidates) cos(g_r, g_k) < minCosine (r points away
 *    from k's; a zero vector has cosine 0 with anything).
 * r is left out when a strict majority of the other candidates object to it. With one insider
 * among n ≥ 3 an honest member is objected to by the insider at most (honest pairs never object
 * to each other when the thresholds are calibrated: see bench/screen-calibration.ts), so it is
 * never left out; the insider is left out when the honest majority objects to it, e.g. when it
 * is ×−1000, sign-flipped or orthogonal-and-huge. Commit-then-reveal keeps the insider from aiming
 * at this step's honest contributions, and it cannot move any pair's figures but its own.
 *
 * What cannot be decided is never held against anyone (`strike: false`: left out of this step's
 * mean, named, not counted towards removal):
 *  - two candidates: one word against the other. The larger is left out when it is more than
 *    normK times the smaller; directions are not judged;
 *  - when the majority rule would leave no strict majority of the candidates (a split, as with two
 *    colluding insiders among four), the step keeps what the rule keeps, or if nothing, the
 *    contribution of smallest norm, and nobody gets a strike.
 * Non-finite contributions are left out with a strike. Malformed or equivocated contributions are
 * faults, decided before screening (verified-reduce.ts).
 */
import type { PeerId } from '../transport/transport';

export interface ScreenOptions {
  /** Largest norm, as a multiple of another member's norm, before that member objects (default 16). */
  normK: number;
  /** Smallest cosine with another member's contribution before it objects (default -0.5; null: not checked). */
  minCosine: number | null;
  /**
   * Smallest projection g_r·g_k / |g_k|² (how much of k's own step r undoes) before k objects
   * (default -2; null: not checked). Needs 3 or more candidates, as the cosine.
   */
  minProjection?: number | null;
  /** Consecutive screened-out steps (that count) after which a member is removed (default 3). */
  strikes: number;
}

export const DEFAULT_SCREEN: ScreenOptions = { normK: 16, minCosine: -0.9, minProjection: -2, strikes: 3 };

export function resolveScreen(o: Partial<ScreenOptions> = {}): ScreenOptions {
  const s = { ...DEFAULT_SCREEN, ...o };
  if (!(s.normK >= 1) || !Number.isFinite(s.normK)) throw new Error(`screen: normK must be a finite number ≥ 1, got ${s.normK}`);
  if (s.minCosine !== null && !(s.minCosine >= -1 && s.minCosine <= 1)) throw new Error(`screen: minCosine must be in [-1, 1] or null, got ${s.minCosine}`);
  if (s.minProjection != null && !(s.minProjection <= 0 && Number.isFinite(s.minProjection))) throw new Error(`screen: minProjection must be a finite number ≤ 0 or null, got ${s.minProjection}`);
  if (!Number.isSafeInteger(s.strikes) || s.strikes < 1) throw new Error(`screen: strikes must be an integer ≥ 1, got ${s.strikes}`);
  return s;
}

/** Why one member's contribution was left out; `fault` ones remove the member at once. */
export interface Exclusion {
  peer: PeerId;
  rank: number;
  why: string;
  fault: boolean;
  /** false: left out of this step only, never counted towards removal (nothing could be decided). Default true. */
  strike?: boolean;
}

/** What the screen needs from the data: sums over the contributions, in a fixed order. */
export interface ScreenData {
  /** Per rank: all values finite, and the squared L2 norm. */
  finite: boolean[];
  norm2: number[];
  /** For the ranks of `set`: g_i · Σ_{j∈set} g_j, and |Σ_{j∈set} g_j|². */
  dots(set: number[]): { dot: number[]; sum2: number };
  /** Optional: G[i][j] = g_set[i] · g_set[j] in one pass (the pairwise screen's figures); else from dots over each pair. */
  gram?(set: number[]): number[][];
}

/** The figures the screen judged by, per pair (for calibration and reports): norm ratio and cosine. */
export interface ScreenFigures {
  /** Largest |g_r| / |g_k| over ordered pairs of finite candidates. */
  maxNormRatio: number;
  /** Smallest cosine over pairs (null: not computed). */
  minCosine: number | null;
  /** Smallest g_r·g_k / |g_k|² over ordered pairs (null: not computed). */
  minProjection: number | null;
}

/** Screens the candidate ranks; returns those kept (ascending), the exclusions and the pair figures. */
export function screen(members: readonly PeerId[], candidates: number[], d: ScreenData, o: ScreenOptions): { kept: number[]; excluded: Exclusion[]; figures: ScreenFigures } {
  const excluded: Exclusion[] = [];
  const out = (rank: number, why: string, strike = true) => excluded.push({ peer: members[rank], rank, why, fault: false, ...(strike ? {} : { strike: false }) });
  const finite = candidates.filter((r) => {
    if (!d.finite[r] || !Number.isFinite(d.norm2[r])) out(r, 'non-finite values');
    return d.finite[r] && Number.isFinite(d.norm2[r]);
  });
  const n = finite.length;
  const norm = (r: number) => Math.sqrt(d.norm2[r]);
  const figures: ScreenFigures = { maxNormRatio: 1, minCosine: null, minProjection: null };
  if (n < 2) return { kept: finite, excluded, figures };

  // Pairwise cosines from dots over each pair: g_i·(g_i + g_j) − |g_i|² = g_i·g_j.
  const dotOf = new Map<string, number>();
  const minProj = o.minProjection === undefined ? DEFAULT_SCREEN.minProjection! : o.minProjection;
  if ((o.minCosine !== null || minProj !== null) && n >= 3 && d.gram) {
    const G = d.gram(finite);
    for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) dotOf.set(`${finite[i]}/${finite[j]}`, G[i][j]);
  } else if ((o.minCosine !== null || minProj !== null) && n >= 3) {
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const [a, b] = [finite[i], finite[j]];
        dotOf.set(`${a}/${b}`, d.dots([a, b]).dot[0] - d.norm2[a]);
      }
    }
  }
  const dot = (a: number, b: number) => dotOf.get(a < b ? `${a}/${b}` : `${b}/${a}`);
  const cos = (a: number, b: number) => {
    const g = dot(a, b);
    const den = norm(a) * norm(b);
    return g === undefined ? undefined : den > 0 ? Math.max(-1, Math.min(1, g / den)) : 0;
  };
  /** How much of k's own step r undoes: g_r·g_k / |g_k|² (0 for a zero g_k). */
  const proj = (r: number, k: number) => {
    const g = dot(r, k);
    return g === undefined ? undefined : d.norm2[k] > 0 ? g / d.norm2[k] : 0;
  };
  const objections = new Map<number, string[]>();
  for (const r of finite) {
    const why: string[] = [];
    for (const k of finite) {
      if (k === r) continue;
      const ratio = norm(k) > 0 ? norm(r) / norm(k) : norm(r) > 0 ? Infinity : 1;
      if (Number.isFinite(ratio)) figures.maxNormRatio = Math.max(figures.maxNormRatio, ratio);
      const c = cos(r, k);
      const p = proj(r, k);
      if (c !== undefined) figures.minCosine = Math.min(figures.minCosine ?? 1, c);
      if (p !== undefined) figures.minProjection = Math.min(figures.minProjection ?? 0, p);
      if (ratio > o.normK) why.push(`norm ${norm(r).toExponential(3)} above ${o.normK} × ${members[k]}'s ${norm(k).toExponential(3)}`);
      else if (c !== undefined && o.minCosine !== null && c < o.minCosine) why.push(`cosine ${c.toFixed(3)} with ${members[k]}'s, below ${o.minCosine}`);
      else if (p !== undefined && minProj !== null && p < minProj) why.push(`undoes ${(-p).toFixed(2)} × ${members[k]}'s step (projection below ${minProj})`);
    }
    objections.set(r, why);
  }

  if (n === 2) {
    // One word against the other: the larger is left out if far larger, without a strike.
    const [a, b] = norm(finite[0]) >= norm(finite[1]) ? finite : [finite[1], finite[0]];
    const w = objections.get(a)!;
    if (w.length === 0) return { kept: finite, excluded, figures };
    out(a, `${w[0]} (two members: left out of this step, not held against it)`, false);
    return { kept: [b], excluded: excluded.sort((x, y) => x.rank - y.rank), figures };
  }
  const gone = finite.filter((r) => objections.get(r)!.length > (n - 1) / 2);
  let kept = finite.filter((r) => !gone.includes(r));
  const decided = kept.length > n / 2;
  for (const r of gone) {
    const w = objections.get(r)!;
    const why = `${w.length} of the other ${n - 1} object: ${w.join('; ')}`;
    out(r, decided ? why : `${why} (no majority remains: not held against it)`, decided);
  }
  if (kept.length === 0) kept = [finite.reduce((a, b) => (norm(b) < norm(a) ? b : a))];
  return { kept, excluded: excluded.filter((e) => !kept.includes(e.rank)).sort((x, y) => x.rank - y.rank), figures };
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
    for (const p of members) if (!excluded.some((e) => e.peer === p && (e.fault || e.strike !== false))) this.count.delete(p);
    for (const e of excluded) {
      if (e.strike === false && !e.fault) continue;
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
