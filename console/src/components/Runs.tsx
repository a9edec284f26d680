// A sandbox's runs (newest first), each start's phase timings as a
// stacked bar on a scale shared by every run shown.

import { useEffect, useState } from 'preact/hooks';
import { asApiError, json, seg, type ApiError } from '../api';
import { duration, ms, time } from '../format';
import { StackedBar, type Segment } from '../plots';
import type { RunInfo, RunList } from '../types';
import { ErrorAlert } from './ErrorAlert';

const LIMIT = 10;

/** The phases of a start, in the order the server gives them; `total` is
 * their sum as the server measured it, not a phase. */
function phases(run: RunInfo): { segments: Segment[]; total: number | null } {
  const t = run.timings ?? {};
  const segments = Object.entries(t)
    .filter(([k, v]) => k !== 'total' && typeof v === 'number' && v >= 0)
    .map(([label, value]) => ({ label, value }));
  return { segments, total: typeof t.total === 'number' ? t.total : null };
}

/** `reload` changes when the runs may have changed (a new generation, a
 * new status). */
export function Runs({ id, reload }: { id: string; reload: string }) {
  const [runs, setRuns] = useState<RunInfo[] | null>(null);
  const [error, setError] = useState<ApiError | null>(null);

  useEffect(() => {
    const abort = new AbortController();
    json<RunList>(`/v1/sandboxes/${seg(id)}/runs?limit=${LIMIT}`, { signal: abort.signal }).then(
      (r) => {
        setRuns(r.runs);
        setError(null);
      },
      (e: unknown) => {
        if (!abort.signal.aborted) setError(asApiError(e));
      },
    );
    return () => abort.abort();
  }, [id, reload]);

  const all = (runs ?? []).map((r) => ({ run: r, ...phases(r) }));
  const scale = Math.max(
    0,
    ...all.map((r) => Math.max(r.total ?? 0, r.segments.reduce((a, s) => a + s.value, 0))),
  );

  return (
    <section aria-labelledby="runs-h">
      <h2 id="runs-h">Runs</h2>
      <ErrorAlert error={error} context="Reading the runs" />
      {runs && runs.length === 0 ? <p class="empty">Never started.</p> : null}
      <ol class="runs">
        {all.map(({ run, segments, total }) => (
          <li key={run.generation}>
            <h3>Generation {run.generation}</h3>
            <p class="run-facts">
              started {time(run.started_at_ms)}
              {run.running_at_ms != null
                ? `, running after ${duration(run.running_at_ms - run.started_at_ms)}`
                : ''}
              {run.ended_at_ms != null
                ? `, ended ${time(run.ended_at_ms)} (${run.exit_reason ?? 'unknown reason'})`
                : run.running_at_ms != null
                  ? ', still running'
                  : ''}
              {run.supervisor_pid != null ? `; supervisor pid ${run.supervisor_pid}` : ''}
            </p>
            {run.detail ? <pre class="detail">{run.detail}</pre> : null}
            {segments.length > 0 ? (
              <StackedBar
                segments={segments}
                scale={scale}
                format={ms}
                total={total}
                title={`Start phases of generation ${run.generation}`}
              />
            ) : (
              <p class="note">No phase timings for this run.</p>
            )}
          </li>
        ))}
      </ol>
    </section>
  );
}
