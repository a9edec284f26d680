// One shared clock for relative times ("5m ago"): a single timer for the
// whole page however many rows show an age.

import { useEffect, useState } from 'preact/hooks';

const subscribers = new Set<(now: number) => void>();
let timer: number | undefined;

const TICK_MS = 5_000;

function subscribe(f: (now: number) => void): () => void {
  subscribers.add(f);
  if (timer === undefined) {
    timer = window.setInterval(() => {
      const now = Date.now();
      subscribers.forEach((s) => s(now));
    }, TICK_MS);
  }
  return () => {
    subscribers.delete(f);
    if (subscribers.size === 0 && timer !== undefined) {
      window.clearInterval(timer);
      timer = undefined;
    }
  };
}

/** The time now, updated every few seconds. */
export function useNow(): number {
  const [now, setNow] = useState(Date.now);
  useEffect(() => subscribe(setNow), []);
  return now;
}
