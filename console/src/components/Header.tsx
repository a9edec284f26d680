// The banner of every page: the sections, who is logged in, Log out.

import type { Route } from '../router';
import type { Session } from '../types';

const SECTIONS: { label: string; url: string; pages: Route['page'][] }[] = [
  { label: 'Sandboxes', url: '/ui/', pages: ['sandboxes', 'sandbox'] },
  { label: 'Gateway targets', url: '/ui/targets', pages: ['targets'] },
  { label: 'Pools', url: '/ui/pools', pages: ['pools'] },
  { label: 'Snapshots', url: '/ui/snapshots', pages: ['snapshots'] },
];

const ROLE: Record<Session['role'], string> = {
  admin: 'admin',
  tenant_admin: 'tenant admin',
  operator: 'operator',
  read_only: 'read-only',
};

export function Header({
  route,
  session,
  onLogout,
}: {
  route: Route;
  session: Session | null;
  onLogout: () => void;
}) {
  return (
    <header class="top">
      <a class="brand" href="/ui/">
        burrow <span>console</span>
      </a>
      {session ? (
        <>
          <nav aria-label="Sections">
            <ul>
              {SECTIONS.map((s) => {
                const here = s.pages.includes(route.page);
                return (
                  <li key={s.url}>
                    <a href={s.url} aria-current={here ? 'page' : undefined}>
                      {s.label}
                    </a>
                  </li>
                );
              })}
            </ul>
          </nav>
          <div class="who">
            <span>
              {session.auth ? (
                <>
                  <span class="visually-hidden">Logged in as </span>
                  <strong>{session.token ?? 'token'}</strong>
                </>
              ) : (
                <strong>no login needed</strong>
              )}{' '}
              · tenant <strong>{session.tenant}</strong> · <span>{ROLE[session.role] ?? session.role}</span>
            </span>
            {session.auth ? (
              <button type="button" onClick={onLogout}>
                Log out
              </button>
            ) : null}
          </div>
        </>
      ) : null}
    </header>
  );
}
