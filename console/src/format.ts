// Numbers and times as the pages write them.

/** A duration in ms, short: `850 ms`, `12 s`, `5 min`, `3 h`, `2 d`. */
export function duration(ms: number): string {
  if (!Number.isFinite(ms)) return '—';
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${Math.round(ms)} ms`;
  const s = ms / 1_000;
  if (Math.abs(s) < 60) return `${Math.floor(s)} s`;
  const m = s / 60;
  if (Math.abs(m) < 60) return `${Math.floor(m)} min`;
  const h = m / 60;
  if (Math.abs(h) < 48) return `${Math.floor(h)} h`;
  return `${Math.floor(h / 24)} d`;
}

/** Milliseconds with one decimal when small (phase timings). */
export function ms(v: number): string {
  return v < 10 ? `${v.toFixed(1)} ms` : `${Math.round(v)} ms`;
}

/** How long ago `at` was, seen from `now`. */
export function ago(at: number, now: number): string {
  return duration(Math.max(0, now - at));
}

/** An absolute time, in the browser's locale. */
export function time(at: number | null | undefined): string {
  if (at == null) return '—';
  return new Date(at).toLocaleString();
}

/** ISO form of a time, for `<time datetime>`. */
export function iso(at: number): string {
  return new Date(at).toISOString();
}

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/** Bytes in binary units: `512 B`, `1.5 MiB`. */
export function bytes(n: number | null | undefined): string {
  if (n == null) return '—';
  let v = n;
  let u = 0;
  while (v >= 1024 && u < UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  return u === 0 ? `${v} B` : `${v < 10 ? v.toFixed(1) : Math.round(v)} ${UNITS[u]}`;
}

/** Labels as `k=v` pairs. */
export function labels(l: Record<string, string> | undefined): string {
  if (!l) return '';
  return Object.entries(l)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');
}
