/**
 * Which GPU a tuning belongs to: the adapter's vendor, architecture, device and description (the
 * description carries the driver where the browser or Dawn reports one), and the family
 * (vendor/architecture) whose shipped table may seed a GPU that has none of its own.
 */

export interface AdapterKey {
  vendor: string;
  architecture: string;
  device: string;
  description: string;
}

export function adapterKeyOf(info: Partial<AdapterKey>): AdapterKey {
  const f = (s: unknown) => (typeof s === 'string' ? s : '');
  return { vendor: f(info.vendor), architecture: f(info.architecture), device: f(info.device), description: f(info.description) };
}

/** One string per adapter (the cache's key). */
export function adapterId(a: AdapterKey): string {
  return [a.vendor, a.architecture, a.device, a.description].map((s) => s.trim().toLowerCase()).join('|');
}

export function sameAdapter(a: AdapterKey, b: AdapterKey): boolean {
  return adapterId(a) === adapterId(b);
}

/** How a person reads an adapter. */
export function adapterLabel(a: AdapterKey): string {
  return [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(' / ') || 'unknown adapter';
}

// Data-centre Hopper parts by name, for a browser or Dawn that leaves `architecture` empty.
const HOPPER = /\b(g?h100|h200|gh200|h800|h20)\b/;

/**
 * `vendor/architecture` in lower case ("nvidia/hopper"), or null when the adapter does not say
 * (then no other GPU's table seeds it). An NVIDIA adapter without an architecture but named like a
 * Hopper part counts as one.
 */
let seedsOn = true;

/**
 * Whether a shipped table may seed another GPU of its vendor and architecture (default on). Off, a
 * GPU runs its own table, else the heuristic: what "no tuning at all" measures (LAB_SHIPPED_SEEDS=0).
 */
export function setShippedSeeds(on: boolean): void {
  seedsOn = on;
}

/** The family whose shipped tables seed this adapter: adapterFamily, or null with seeds off. */
export function seedFamily(a: AdapterKey): string | null {
  return seedsOn ? adapterFamily(a) : null;
}

export function adapterFamily(a: AdapterKey): string | null {
  const vendor = a.vendor.trim().toLowerCase();
  let arch = a.architecture.trim().toLowerCase();
  if (!arch && vendor.includes('nvidia') && HOPPER.test(`${a.device} ${a.description}`.toLowerCase())) arch = 'hopper';
  if (!vendor || !arch) return null;
  return `${vendor.includes('nvidia') ? 'nvidia' : vendor}/${arch}`;
}
