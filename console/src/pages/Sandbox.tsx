// One sandbox: its record and configuration, actions, runs, metrics, logs,
// files and a terminal. The record follows the event stream (and a 15 s
// safety refetch). The terminal comes last: once focused it keeps Tab.

import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, asApiError, jsonAt, seg } from '../api';
import { ActionButtons, useActions } from '../components/Actions';
import { ErrorAlert } from '../components/ErrorAlert';
import { Files } from '../components/Files';
import { Logs } from '../components/Logs';
import { MetricsPanel } from '../components/MetricsPanel';
import { Runs } from '../components/Runs';
import { TerminalPanel } from '../components/Terminal';
import { subscribe } from '../events';
import { time } from '../format';
import { navigate } from '../router';
import type { SandboxInfo } from '../types';

const REFETCH_MS = 15_000;

function Overview({ s }: { s: SandboxInfo }) {
  return (
    <dl class="facts">
      <dt>ID</dt>
      <dd>
        <code>{s.id}</code>
      </dd>
      <dt>Name</dt>
      <dd>{s.name}</dd>
      <dt>Status</dt>
      <dd data-field="status">
        <span class={`status status-${s.status}`}>{s.status}</span>
      </dd>
      <dt>Generation</dt>
      <dd>{s.generation}</dd>
      <dt>Detached</dt>
      <dd>{s.detached ? 'yes' : 'no'}</dd>
      <dt>Created</dt>
      <dd>{time(s.created_at_ms)}</dd>
      <dt>Updated</dt>
      <dd>{time(s.updated_at_ms)}</dd>
      <dt>Driver</dt>
      <dd>{s.config.driver ?? '—'}</dd>
      <dt>Image</dt>
      <dd>
        <code>{s.config.image}</code>
      </dd>
    </dl>
  );
}

/** The configuration as JSON, collapsed at first (rendered only when
 * open: a closed `<details>` keeps its content out of the tab order but
 * not out of the layout's rectangles). */
function Config({ config }: { config: SandboxInfo['config'] }) {
  const [open, setOpen] = useState(false);
  return (
    <details class="config" onToggle={(e) => setOpen(e.currentTarget.open)}>
      <summary>Configuration</summary>
      {open ? (
        <pre tabIndex={0} aria-label="Configuration as JSON">
          {JSON.stringify(config, null, 2)}
        </pre>
      ) : null}
    </details>
  );
}

export function Sandbox({ id }: { id: string }) {
  const [info, setInfo] = useState<SandboxInfo | null>(null);
  const [error, setError] = useState<ApiError | null>(null);
  const [gone, setGone] = useState(false);
  const reload = useRef<() => Promise<void>>(async () => {});

  useEffect(() => {
    setInfo(null);
    setGone(false);
    setError(null);
    const abort = new AbortController();
    let removed = false;
    const events = subscribe((e) => {
      if (e.sandbox.id !== id) return;
      if (e.type === 'sandbox.removed') {
        removed = true;
        setGone(true);
      } else void reload.current();
    });
    reload.current = async () => {
      if (removed) return;
      try {
        const [s, at] = await jsonAt<SandboxInfo>(`/v1/sandboxes/${seg(id)}`, { signal: abort.signal });
        setInfo(s);
        setError(null);
        events.since(at);
      } catch (e) {
        if (abort.signal.aborted) return;
        const err = asApiError(e);
        setError(err);
        if (err.status === 404) setGone(true);
      }
    };
    void reload.current();
    const every = window.setInterval(() => void reload.current(), REFETCH_MS);
    return () => {
      abort.abort();
      events.close();
      window.clearInterval(every);
    };
  }, [id]);

  const after = useCallback((ask: { action: string }, failed: ApiError | null) => {
    if (ask.action === 'destroy' && !failed) navigate('/ui/');
    else void reload.current();
  }, []);
  const actions = useActions(after);

  useEffect(() => {
    document.title = `${info?.name ?? id} · burrow console`;
  }, [info?.name, id]);

  const running = info?.status === 'running';
  return (
    <>
      <p class="crumb">
        <a href="/ui/">Sandboxes</a> / sandbox
      </p>
      <h1 tabIndex={-1}>{info?.name ?? (gone ? 'Sandbox not found' : 'Sandbox')}</h1>
      <ErrorAlert error={error} context={gone ? `Sandbox ${id}` : 'Reading the sandbox'} />
      {gone && info ? (
        <p class="note" role="status">
          This sandbox was removed.
        </p>
      ) : null}
      {info ? (
        <>
          <section aria-labelledby="overview-h">
            <h2 id="overview-h" class="visually-hidden">
              Overview
            </h2>
            <Overview s={info} />
            <ActionButtons target={info} onAsk={actions.onAsk} />
            <ErrorAlert error={actions.error} context={actions.context} />
            {actions.busy ? (
              <p class="busy" role="status">
                {actions.busy}
              </p>
            ) : null}
            <Config config={info.config} />
          </section>
          <Runs id={id} reload={`${info.generation}:${info.status}`} />
          <MetricsPanel id={id} running={running} />
          <Logs id={id} />
          <Files id={id} running={running} />
          <TerminalPanel id={id} running={running} />
          {actions.dialog}
        </>
      ) : null}
    </>
  );
}
