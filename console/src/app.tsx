// The app: the session (logged in or not), the banner, and the page of
// the URL. A 401 from any call leads back to the login.

import { useEffect, useRef, useState } from 'preact/hooks';
import { asApiError, json, onUnauthorized, request, setCsrf, type ApiError } from './api';
import { ErrorAlert } from './components/ErrorAlert';
import { Header } from './components/Header';
import { Login } from './pages/Login';
import { Pools } from './pages/Pools';
import { Sandbox } from './pages/Sandbox';
import { Sandboxes } from './pages/Sandboxes';
import { Snapshots } from './pages/Snapshots';
import { Targets } from './pages/Targets';
import { navigate, parse, useLocation, type Route } from './router';
import type { Session } from './types';

type Auth =
  | { state: 'checking' }
  | { state: 'out' }
  | { state: 'in'; session: Session }
  | { state: 'failed'; error: ApiError };

const TITLES: Partial<Record<Route['page'], string>> = {
  sandboxes: 'Sandboxes',
  targets: 'Gateway targets',
  pools: 'Pools',
  snapshots: 'Snapshots',
  login: 'Log in',
  'not-found': 'Not found',
};

function Page({ route }: { route: Route }) {
  switch (route.page) {
    case 'sandboxes':
    case 'login':
      return <Sandboxes />;
    case 'sandbox':
      return <Sandbox key={route.id} id={route.id} />;
    case 'targets':
      return <Targets />;
    case 'pools':
      return <Pools />;
    case 'snapshots':
      return <Snapshots />;
    case 'not-found':
      return (
        <>
          <h1 tabIndex={-1}>Not found</h1>
          <p>
            The console has no page at <code>/ui{route.path}</code>. <a href="/ui/">Sandboxes</a>
          </p>
        </>
      );
  }
}

/** Where to go after the login: the page asked for (`?next=`), if it is
 * one of the console's. */
function nextPage(search: string): string {
  const next = new URLSearchParams(search).get('next');
  return next && next.startsWith('/ui/') && !next.startsWith('/ui/login') ? next : '/ui/';
}

export function App() {
  const [auth, setAuth] = useState<Auth>({ state: 'checking' });
  const [attempt, setAttempt] = useState(0);
  const loc = useLocation();
  const route = parse(loc.pathname);
  const first = useRef(true);

  const loggedIn = (session: Session) => {
    setCsrf(session.csrf);
    setAuth({ state: 'in', session });
  };
  const loggedOut = () => {
    setCsrf(null);
    setAuth({ state: 'out' });
  };

  useEffect(() => {
    onUnauthorized(loggedOut);
    json<Session>('/ui/api/session', { quiet401: true }).then(loggedIn, (e: unknown) => {
      const err = asApiError(e);
      if (err.status === 401) loggedOut();
      else setAuth({ state: 'failed', error: err });
    });
  }, [attempt]);

  // The login page's URL while logged out; back where one was after.
  useEffect(() => {
    if (auth.state === 'out' && route.page !== 'login') {
      const here = loc.pathname + loc.search;
      navigate(`/ui/login${here === '/ui/' ? '' : `?next=${encodeURIComponent(here)}`}`, {
        replace: true,
      });
    } else if (auth.state === 'in' && route.page === 'login') {
      navigate(nextPage(loc.search), { replace: true });
    }
  }, [auth.state, route.page, loc.pathname, loc.search]);

  // A new page: its title, and the focus on its heading (as a page load
  // would put the reader at the top).
  useEffect(() => {
    const t = TITLES[route.page];
    if (t) document.title = `${t} · burrow console`;
    if (first.current) {
      first.current = false;
      return;
    }
    document.querySelector<HTMLElement>('main h1')?.focus();
  }, [loc.pathname]);

  const logout = async () => {
    try {
      await request('/ui/api/logout', { method: 'POST', quiet401: true });
    } catch {
      // Gone either way: the cookie is no use once the session ended.
    }
    loggedOut();
  };

  const session = auth.state === 'in' ? auth.session : null;
  return (
    <>
      <Header route={route} session={session} onLogout={() => void logout()} />
      <main id="main">
        {auth.state === 'checking' ? (
          <p class="muted" role="status">
            Loading…
          </p>
        ) : auth.state === 'failed' ? (
          <>
            <h1 tabIndex={-1}>The console cannot start</h1>
            <ErrorAlert error={auth.error} context="Reading the session" />
            <button type="button" onClick={() => setAttempt((a) => a + 1)}>
              Try again
            </button>
          </>
        ) : auth.state === 'out' ? (
          <Login onLogin={loggedIn} />
        ) : (
          <Page route={route} />
        )}
      </main>
    </>
  );
}
