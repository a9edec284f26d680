// Live resource usage: `GET /v1/sandboxes/{id}/metrics` every 2 s while
// the sandbox runs, the last 60 samples of each series as a sparkline.
// Counters (CPU time, bytes) are shown as rates between samples.

import { useEffect, useState } from 'preact/hooks';
import { asApiError, json, seg, type ApiError } from '../api';
import { bytes } from '../format';
import { Sparkline } from '../plots';
import type { Metrics } from '../types';
import { ErrorAlert } from './ErrorAlert';

/** A cgroup without a memory limit reports the largest page-aligned
 * value (about 8 EiB): anything from 2^62 up is no limit. */
const NO_LIMIT = 2 ** 62;

const EVERY_MS = 2_000;
const KEEP = 60;

interface Sample {
  t: number;
  m: Metrics;
}

interface Series {
  label: string;
  values: number[];
  format: (v: number) => string;
  note?: string;
}

const pct = (v: number) => `${v.toFixed(1)} %`;
const rate = (v: number) => `${bytes(Math.round(v))}/s`;
const count = (v: number) => String(Math.round(v));

/** A rate of a counter between consecutive samples (per second). */
function rates(samples: Sample[], get: (m: Metrics) => number | null, per = 1): number[] {
  const out: number[] = [];
  for (let i = 1; i < samples.length; i++) {
    const a = get(samples[i - 1].m);
    const b = get(samples[i].m);
    const dt = (samples[i].t - samples[i - 1].t) / 1_000;
    if (a == null || b == null || dt <= 0 || b < a) continue;
    out.push((b - a) / dt / per);
  }
  return out;
}

function gauge(samples: Sample[], get: (m: Metrics) => number | null): number[] {
  return samples.map((s) => get(s.m)).filter((v): v is number => v != null);
}

function series(samples: Sample[]): Series[] {
  const last = samples[samples.length - 1]?.m;
  const sum = (a: number | null, b: number | null) => (a == null || b == null ? null : a + b);
  const out: Series[] = [
    // ns of CPU per second of wall time, as a percentage of one CPU.
    { label: 'CPU', values: rates(samples, (m) => m.cpu_usage_ns, 1e7), format: pct },
    {
      label: 'Memory',
      values: gauge(samples, (m) => m.memory_bytes),
      format: bytes,
      note:
        last?.memory_limit_bytes == null
          ? undefined
          : last.memory_limit_bytes >= NO_LIMIT
            ? 'no limit'
            : `limit ${bytes(last.memory_limit_bytes)}`,
    },
    { label: 'Processes', values: gauge(samples, (m) => m.pids), format: count },
    {
      label: 'Disk I/O',
      values: rates(samples, (m) => sum(m.io_read_bytes, m.io_write_bytes)),
      format: rate,
    },
  ];
  if (last?.network) {
    out.push({
      label: 'Network',
      values: rates(samples, (m) => (m.network ? m.network.bytes_in + m.network.bytes_out : null)),
      format: rate,
    });
  }
  return out;
}

export function MetricsPanel({ id, running }: { id: string; running: boolean }) {
  const [samples, setSamples] = useState<Sample[]>([]);
  const [error, setError] = useState<ApiError | null>(null);

  useEffect(() => {
    if (!running) return;
    const abort = new AbortController();
    let timer: number | undefined;
    const poll = async () => {
      try {
        const m = await json<Metrics>(`/v1/sandboxes/${seg(id)}/metrics`, { signal: abort.signal });
        setSamples((old) => [...old, { t: performance.now(), m }].slice(-(KEEP + 1)));
        setError(null);
      } catch (e) {
        if (abort.signal.aborted) return;
        const err = asApiError(e);
        // A sandbox that just stopped has no metrics: not worth an alert.
        if (err.code !== 'invalid_state' && err.code !== 'not_found') setError(err);
      }
      if (!abort.signal.aborted) timer = window.setTimeout(poll, EVERY_MS);
    };
    void poll();
    return () => {
      abort.abort();
      window.clearTimeout(timer);
    };
  }, [id, running]);

  const all = series(samples);
  return (
    <section aria-labelledby="metrics-h">
      <h2 id="metrics-h">Metrics</h2>
      <ErrorAlert error={error} context="Reading the metrics" />
      {!running ? <p class="note">Metrics are read every 2 s while the sandbox runs.</p> : null}
      <ul class="metrics">
        {all.map((s) => {
          const last = s.values[s.values.length - 1];
          return (
            <li key={s.label}>
              <span class="metric-label">{s.label}</span>
              <span class="metric-value">{last == null ? '—' : s.format(last)}</span>
              {s.note ? <span class="metric-note">{s.note}</span> : null}
              <Sparkline values={s.values.slice(-KEEP)} label={s.label} format={s.format} />
            </li>
          );
        })}
      </ul>
    </section>
  );
}
