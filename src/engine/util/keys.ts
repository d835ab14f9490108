/** Unknown keys in user-written objects (configs, schemes): errors that name the nearest valid key. */
import { closest, distance } from 'fastest-levenshtein';

/** "did you mean 'x'?" when a valid key is close enough to be a likely misspelling. */
export function suggestKey(key: string, valid: readonly string[]): string {
  if (!valid.length) return '';
  const best = closest(key, [...valid]);
  return distance(key, best) <= Math.max(2, Math.floor(best.length / 3)) ? ` (did you mean '${best}'?)` : '';
}

/**
 * One line per key of `obj` not in `valid`, each naming where it was found and the nearest valid key;
 * empty when every key is known.
 */
export function unknownKeys(obj: Record<string, unknown>, valid: readonly string[], where: string): string[] {
  const known = new Set(valid);
  return Object.keys(obj).filter((k) => !known.has(k))
    .map((k) => `${where}: unknown key '${k}'${suggestKey(k, valid)}; expected one of ${valid.join(', ')}`);
}
