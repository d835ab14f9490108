export function formatBytes(n: number): string {
  if (!Number.isFinite(n)) return '–';
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = n / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(v < 10 ? 2 : 1)} ${units[i]}`;
}

export function formatCount(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

export function formatLoss(x: number | null | undefined): string {
  return x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(4);
}

const RATE = new Intl.NumberFormat('en', { maximumSignificantDigits: 3 });
const RATE_BIG = new Intl.NumberFormat('en', { maximumFractionDigits: 0 });

/** Rates (tokens/s) in one format everywhere: 3 significant digits, whole numbers with grouping from 1000. */
export function formatRate(x: number | undefined): string {
  if (x === undefined || !Number.isFinite(x)) return '–';
  return Math.abs(x) >= 1000 ? RATE_BIG.format(x) : RATE.format(x);
}
