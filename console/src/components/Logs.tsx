// Following a sandbox's logs: `fetch` of the NDJSON stream (`LogFrame`s),
// read as it comes, the sources chosen by checkboxes (a change restarts the
// stream). At most MAX_LINES are kept; the view sticks to the bottom unless
// the reader scrolled up.

import { useEffect, useLayoutEffect, useRef, useState } from 'preact/hooks';
import { ApiError, asApiError, request, seg } from '../api';
import { LOG_SOURCES, type LogFrame, type LogLine, type LogSource } from '../types';
import { ErrorAlert } from './ErrorAlert';

const MAX_LINES = 5_000;
const TAIL = 200;

function format(l: LogLine): string {
  const t = l.time_ms != null ? `${new Date(l.time_ms).toLocaleTimeString()} ` : '';
  return `${t}[${l.source}] ${l.text}`;
}

/** Reads the stream, calling `line` for each line; resolves at its end. */
async function follow(
  url: string,
  signal: AbortSignal,
  line: (l: LogLine) => void,
): Promise<void> {
  const res = await request(url, { signal });
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let nl: number;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const text = buf.slice(0, nl).trim();
      buf = buf.slice(nl + 1);
      if (!text) continue;
      const frame = JSON.parse(text) as LogFrame;
      if ('error' in frame) throw new ApiError(200, frame.error);
      line(frame.line);
    }
  }
}

type State = 'following' | 'ended' | 'failed';

export function Logs({ id }: { id: string }) {
  const [sources, setSources] = useState<Set<LogSource>>(() => new Set(LOG_SOURCES));
  const [state, setState] = useState<State>('following');
  const [error, setError] = useState<ApiError | null>(null);
  const [attempt, setAttempt] = useState(0);
  const [, setVersion] = useState(0);
  const lines = useRef<string[]>([]);
  const pre = useRef<HTMLPreElement>(null);
  const stick = useRef(true);

  useEffect(() => {
    lines.current = [];
    setVersion((v) => v + 1);
    setError(null);
    if (sources.size === 0) {
      setState('ended');
      return;
    }
    setState('following');
    const abort = new AbortController();
    let frame = 0;
    // One render per animation frame however fast lines come.
    const schedule = () => {
      if (!frame) {
        frame = requestAnimationFrame(() => {
          frame = 0;
          setVersion((v) => v + 1);
        });
      }
    };
    const q = new URLSearchParams({ follow: 'true', tail: String(TAIL) });
    // All four checked: no filter (the server's default is every source).
    if (sources.size < LOG_SOURCES.length) sources.forEach((s) => q.append('source', s));
    follow(`/v1/sandboxes/${seg(id)}/logs?${q}`, abort.signal, (l) => {
      const all = lines.current;
      all.push(format(l));
      if (all.length > MAX_LINES) all.splice(0, all.length - MAX_LINES);
      schedule();
    }).then(
      () => {
        if (!abort.signal.aborted) setState('ended');
      },
      (e: unknown) => {
        if (abort.signal.aborted) return;
        setError(asApiError(e));
        setState('failed');
      },
    );
    return () => {
      abort.abort();
      cancelAnimationFrame(frame);
    };
  }, [id, sources, attempt]);

  useLayoutEffect(() => {
    const el = pre.current;
    if (el && stick.current) el.scrollTop = el.scrollHeight;
  });

  const onScroll = () => {
    const el = pre.current;
    if (el) stick.current = el.scrollHeight - el.scrollTop - el.clientHeight < 8;
  };

  const toggle = (s: LogSource, on: boolean) =>
    setSources((old) => {
      const next = new Set(old);
      if (on) next.add(s);
      else next.delete(s);
      return next;
    });

  return (
    <section aria-labelledby="logs-h">
      <h2 id="logs-h">Logs</h2>
      <div class="log-controls">
        <fieldset>
          <legend>Sources</legend>
          {LOG_SOURCES.map((s) => (
            <label key={s} class="check">
              <input
                type="checkbox"
                checked={sources.has(s)}
                onChange={(e) => toggle(s, e.currentTarget.checked)}
              />
              {s}
            </label>
          ))}
        </fieldset>
        <p class="log-state">
          <span role="status">
            {state === 'following'
              ? 'Following.'
              : sources.size === 0
                ? 'No source chosen.'
                : state === 'ended'
                  ? 'The stream ended.'
                  : 'The stream failed.'}
          </span>{' '}
          <span class="muted">
            {lines.current.length} line{lines.current.length === 1 ? '' : 's'}
          </span>
        </p>
        {state !== 'following' && sources.size > 0 ? (
          <button type="button" onClick={() => setAttempt((a) => a + 1)}>
            Follow again
          </button>
        ) : null}
      </div>
      <ErrorAlert error={error} context="Following the logs" />
      <pre id="logs" ref={pre} tabIndex={0} aria-label="Log lines" onScroll={onScroll}>
        {lines.current.join('\n')}
      </pre>
    </section>
  );
}
