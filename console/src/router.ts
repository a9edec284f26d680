// A tiny router on the history API under the base /ui/ (the server answers
// index.html for every page's URL, so these are real URLs).

import { useEffect, useState } from 'preact/hooks';

export const BASE = '/ui';

export type Route =
  | { page: 'sandboxes' }
  | { page: 'sandbox'; id: string }
  | { page: 'targets' }
  | { page: 'pools' }
  | { page: 'snapshots' }
  | { page: 'login' }
  | { page: 'not-found'; path: string };

/** The route of a pathname (`/ui/...`). */
export function parse(pathname: string): Route {
  const path = pathname.startsWith(`${BASE}/`) ? pathname.slice(BASE.length) : pathname;
  const parts = path.split('/').filter(Boolean);
  if (parts.length === 0) return { page: 'sandboxes' };
  if (parts.length === 2 && parts[0] === 'sandboxes') {
    return { page: 'sandbox', id: decodeURIComponent(parts[1]) };
  }
  if (parts.length === 1) {
    switch (parts[0]) {
      case 'targets':
      case 'pools':
      case 'snapshots':
      case 'login':
        return { page: parts[0] };
      case 'sandboxes':
        return { page: 'sandboxes' };
    }
  }
  return { page: 'not-found', path };
}

/** The URL of a route. */
export function href(route: Route): string {
  switch (route.page) {
    case 'sandboxes':
      return `${BASE}/`;
    case 'sandbox':
      return `${BASE}/sandboxes/${encodeURIComponent(route.id)}`;
    case 'not-found':
      return `${BASE}${route.path}`;
    default:
      return `${BASE}/${route.page}`;
  }
}

const listeners = new Set<() => void>();
window.addEventListener('popstate', () => listeners.forEach((f) => f()));

/** Goes to `url` (same origin) without reloading the page. */
export function navigate(url: string, opts: { replace?: boolean } = {}): void {
  if (url === location.pathname + location.search) return;
  if (opts.replace) history.replaceState(null, '', url);
  else history.pushState(null, '', url);
  listeners.forEach((f) => f());
}

/** The current location's pathname and search, re-rendering on changes. */
export function useLocation(): { pathname: string; search: string } {
  const [loc, setLoc] = useState(() => ({ pathname: location.pathname, search: location.search }));
  useEffect(() => {
    const f = () => setLoc({ pathname: location.pathname, search: location.search });
    listeners.add(f);
    return () => {
      listeners.delete(f);
    };
  }, []);
  return loc;
}

/** Plain clicks on links to the app's pages navigate in place (one
 * listener for every link, however many rows a table has). Downloads, the
 * console API, new tabs and modified clicks are left to the browser. */
export function interceptLinks(): void {
  document.addEventListener('click', (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) {
      return;
    }
    const a = (e.target as Element | null)?.closest?.('a');
    if (!a || a.hasAttribute('download') || (a.target && a.target !== '_self')) return;
    const url = new URL(a.href, location.href);
    if (url.origin !== location.origin) return;
    if (!url.pathname.startsWith(`${BASE}/`) || url.pathname.startsWith(`${BASE}/api/`)) return;
    e.preventDefault();
    navigate(url.pathname + url.search);
  });
}
