// The gateway's targets: state, calls in flight, last use and the last
// cold starts of each (a sparkline of how long each waited).

import { useNow } from '../clock';
import { ErrorAlert } from '../components/ErrorAlert';
import { ago, iso, ms } from '../format';
import { usePoll } from '../hooks';
import { Sparkline } from '../plots';
import { href } from '../router';
import type { TargetList, TargetView } from '../types';

const EVERY_MS = 5_000;

/** A target whose runtime is `null` never had a gateway call: dormant. */
const state = (t: TargetView) => t.runtime?.state ?? 'dormant';

function median(v: number[]): number {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

function Row({ t, now }: { t: TargetView; now: number }) {
  const cold = t.cold_starts.map((c) => c.ms);
  return (
    <tr data-target-id={t.id}>
      <th scope="row">
        {t.kind === 'sandbox' ? (
          <a href={href({ page: 'sandbox', id: t.id })}>
            <code>{t.id}</code>
          </a>
        ) : (
          <code>{t.id}</code>
        )}
      </th>
      <td>{t.kind}</td>
      <td class="image">{t.kind === 'sandbox' ? `port ${t.port ?? '—'}` : (t.url ?? '—')}</td>
      <td data-field="state">
        <span class={`status state-${state(t)}`}>{state(t)}</span>
        {t.runtime?.last_error ? <div class="muted">{t.runtime.last_error}</div> : null}
      </td>
      <td class="num">{t.leases}</td>
      <td>
        {t.runtime ? (
          <time datetime={iso(t.runtime.last_used_at)}>{ago(t.runtime.last_used_at, now)} ago</time>
        ) : (
          'never'
        )}
      </td>
      <td>
        {cold.length ? (
          <div class="cold">
            <Sparkline values={cold} label={`Cold starts of ${t.id}`} format={ms} points width={140} />
            <span class="muted">
              {cold.length}, last {ms(cold[cold.length - 1])}, median {ms(median(cold))}
            </span>
          </div>
        ) : (
          <span class="muted">none yet</span>
        )}
      </td>
    </tr>
  );
}

export function Targets() {
  const { data, error } = usePoll<TargetList>('/v1/gateway/targets', EVERY_MS);
  const now = useNow();
  return (
    <>
      <h1 tabIndex={-1}>Gateway targets</h1>
      <ErrorAlert error={error} context="Listing the targets" />
      <table id="targets" class="data">
        <caption>Each target's last 50 cold starts: how long a call waited for its workload.</caption>
        <thead>
          <tr>
            <th scope="col">ID</th>
            <th scope="col">Kind</th>
            <th scope="col">Port or URL</th>
            <th scope="col">State</th>
            <th scope="col">Leases</th>
            <th scope="col">Last use</th>
            <th scope="col">Cold starts</th>
          </tr>
        </thead>
        <tbody>
          {data?.targets.map((t) => (
            <Row key={t.id} t={t} now={now} />
          ))}
        </tbody>
      </table>
      {data && data.targets.length === 0 ? <p class="empty">No gateway targets.</p> : null}
    </>
  );
}
