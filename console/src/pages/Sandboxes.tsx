// The live table of sandboxes: the list once, then each event refetches
// the one sandbox it names (or drops it), with a full refetch every 15 s as
// a safety net. Rows are cheap: plain cells, one shared clock for ages.

import { memo } from '../memo';
import { useCallback, useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, asApiError, getSandbox, listSandboxes } from '../api';
import { useNow } from '../clock';
import { ActionButtons, useActions, type Ask } from '../components/Actions';
import { ErrorAlert } from '../components/ErrorAlert';
import { subscribe } from '../events';
import { ago, labels } from '../format';
import { href } from '../router';
import { STATUSES, type SandboxInfo } from '../types';

const REFETCH_MS = 15_000;
/** Rows stay cheap for a thousand of them: text cells, no wrappers, one
 * shared clock. */

/** Events are gathered this long, then their sandboxes fetched together. */
const BATCH_MS = 100;
/** More changed sandboxes than this in one batch: refetch the list. */
const MANY = 50;

type Rows = Map<string, SandboxInfo>;

const Row = memo(function Row({
  s,
  now,
  onAsk,
}: {
  s: SandboxInfo;
  now: number;
  onAsk: (a: Ask) => void;
}) {
  return (
    <tr data-sandbox-id={s.id}>
      <th scope="row">
        <a href={href({ page: 'sandbox', id: s.id })}>{s.name}</a>
      </th>
      <td data-field="status" class={`st status-${s.status}`}>
        {s.status}
      </td>
      <td>{s.config.driver ?? ''}</td>
      <td class="image">{s.config.image}</td>
      <td>{ago(s.created_at_ms, now)}</td>
      {/* Idle: the time since the last status change (`updated_at_ms`):
          SandboxInfo carries no last-use time. */}
      <td>{ago(s.updated_at_ms, now)}</td>
      <td class="labels">{labels(s.config.labels)}</td>
      <td class="actions">
        <ActionButtons target={s} onAsk={onAsk} bare />
      </td>
    </tr>
  );
});

function matches(s: SandboxInfo, text: string, status: string): boolean {
  if (status && s.status !== status) return false;
  if (!text) return true;
  if (s.name.toLowerCase().includes(text)) return true;
  return Object.entries(s.config.labels ?? {}).some(([k, v]) =>
    `${k}=${v}`.toLowerCase().includes(text),
  );
}

export function Sandboxes() {
  const [rows, setRows] = useState<Rows | null>(null);
  const [loadError, setLoadError] = useState<ApiError | null>(null);
  const [text, setText] = useState('');
  const [status, setStatus] = useState('');
  const now = useNow();

  const pending = useRef(new Set<string>());
  const timer = useRef<number | undefined>(undefined);
  const refetchList = useRef<() => Promise<void>>(async () => {});

  // Fetch the given sandboxes again; drop those that are gone.
  const refresh = useCallback(async (ids: string[]) => {
    const got = await Promise.all(
      ids.map((id) =>
        getSandbox(id).then(
          (s) => [id, s] as const,
          (e: unknown) => [id, e instanceof ApiError && e.status === 404 ? null : undefined] as const,
        ),
      ),
    );
    setRows((old) => {
      const next = new Map(old ?? []);
      for (const [id, s] of got) {
        if (s) next.set(id, s);
        else if (s === null) next.delete(id);
      }
      return next;
    });
  }, []);

  const queue = useCallback(
    (id: string) => {
      pending.current.add(id);
      if (timer.current !== undefined) return;
      timer.current = window.setTimeout(() => {
        timer.current = undefined;
        const ids = [...pending.current];
        pending.current.clear();
        if (ids.length > MANY) void refetchList.current();
        else void refresh(ids);
      }, BATCH_MS);
    },
    [refresh],
  );

  useEffect(() => {
    const abort = new AbortController();
    const events = subscribe((e) => {
      if (e.type === 'sandbox.removed') {
        pending.current.delete(e.sandbox.id);
        setRows((old) => {
          if (!old?.has(e.sandbox.id)) return old;
          const next = new Map(old);
          next.delete(e.sandbox.id);
          return next;
        });
      } else {
        queue(e.sandbox.id);
      }
    });
    refetchList.current = async () => {
      try {
        const { sandboxes, serverNow } = await listSandboxes(abort.signal);
        setRows(new Map(sandboxes.map((s) => [s.id, s])));
        setLoadError(null);
        events.since(serverNow);
      } catch (e) {
        if (!abort.signal.aborted) setLoadError(asApiError(e));
      }
    };
    void refetchList.current();
    const every = window.setInterval(() => void refetchList.current(), REFETCH_MS);
    return () => {
      abort.abort();
      events.close();
      window.clearInterval(every);
      window.clearTimeout(timer.current);
      timer.current = undefined;
    };
  }, [queue]);

  const { onAsk, dialog, busy, error, context } = useActions((ask, failed) => {
    if (ask.action !== 'destroy' || failed) return queue(ask.target.id);
    // Gone: no need to ask the server (its event removes it too).
    setRows((old) => {
      const next = new Map(old ?? []);
      next.delete(ask.target.id);
      return next;
    });
  });

  const sorted = useMemo(
    () => (rows ? [...rows.values()].sort((a, b) => a.name.localeCompare(b.name)) : []),
    [rows],
  );
  const needle = text.trim().toLowerCase();
  const shown = useMemo(
    () => sorted.filter((s) => matches(s, needle, status)),
    [sorted, needle, status],
  );

  return (
    <>
      <h1 tabIndex={-1}>Sandboxes</h1>
      <div class="filters">
        <div class="field">
          <label for="filter-text">Filter by name or label</label>
          <input
            id="filter-text"
            type="search"
            value={text}
            placeholder="web, env=prod"
            onInput={(e) => setText(e.currentTarget.value)}
          />
        </div>
        <div class="field">
          <label for="filter-status">Status</label>
          <select id="filter-status" value={status} onChange={(e) => setStatus(e.currentTarget.value)}>
            <option value="">All statuses</option>
            {STATUSES.map((s) => (
              <option key={s} value={s}>
                {s}
              </option>
            ))}
          </select>
        </div>
        <p class="count" aria-live="polite">
          {rows ? `${shown.length} of ${rows.size} sandboxes` : 'Loading…'}
        </p>
      </div>
      <ErrorAlert error={loadError} context="Listing the sandboxes" />
      <ErrorAlert error={error} context={context} />
      {busy ? (
        <p class="busy" role="status">
          {busy}
        </p>
      ) : null}
      <table id="sandboxes" class="data">
        <caption>Idle is the time since the sandbox's last change of status.</caption>
        <colgroup>
          <col class="c-name" />
          <col class="c-status" />
          <col class="c-driver" />
          <col class="c-image" />
          <col class="c-age" />
          <col class="c-idle" />
          <col class="c-labels" />
          <col class="c-actions" />
        </colgroup>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Status</th>
            <th scope="col">Driver</th>
            <th scope="col">Image</th>
            <th scope="col">Age</th>
            <th scope="col">Idle</th>
            <th scope="col">Labels</th>
            <th scope="col">Actions</th>
          </tr>
        </thead>
        <tbody>
          {shown.map((s) => (
            <Row key={s.id} s={s} now={now} onAsk={onAsk} />
          ))}
        </tbody>
      </table>
      {rows && shown.length === 0 ? (
        <p class="empty">{rows.size === 0 ? 'No sandboxes yet.' : 'No sandbox matches the filter.'}</p>
      ) : null}
      {dialog}
    </>
  );
}
