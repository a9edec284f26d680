// The gateway's targets: state, calls in flight, last use and the last
// cold starts of each (a sparkline of how long each waited), and a preview
// link to open one in the browser on the gateway's own origin (never on
// the console's: the link is made here, opened there).

import { useState } from 'preact/hooks';
import { asApiError, json, seg, type ApiError } from '../api';
import { useNow } from '../clock';
import { ErrorAlert } from '../components/ErrorAlert';
import { ago, iso, ms } from '../format';
import { usePoll } from '../hooks';
import { Sparkline } from '../plots';
import { href } from '../router';
import type { PreviewView, TargetList, TargetView } from '../types';

const EVERY_MS = 5_000;

/** A target whose runtime is `null` never had a gateway call: dormant. */
const state = (t: TargetView) => t.runtime?.state ?? 'dormant';

function median(v: number[]): number {
  const s = [...v].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Makes a preview link of the target, then shows it to be opened (a new
 * tab opened after an await would be a blocked popup). */
function Preview({ t, onError }: { t: TargetView; onError: (e: ApiError | null) => void }) {
  const [link, setLink] = useState<PreviewView | null>(null);
  const [busy, setBusy] = useState(false);
  const make = async () => {
    setBusy(true);
    onError(null);
    try {
      setLink(await json<PreviewView>(`/v1/gateway/targets/${seg(t.id)}/previews`, { method: 'POST', body: {} }));
    } catch (e) {
      onError(asApiError(e));
    } finally {
      setBusy(false);
    }
  };
  if (link) {
    return (
      <a href={link.url} target="_blank" rel="noopener noreferrer" data-preview-id={link.id}>
        Open preview of {t.id}
      </a>
    );
  }
  return (
    <button type="button" onClick={make} disabled={busy} aria-label={`Make a preview link of ${t.id}`}>
      Preview
    </button>
  );
}

function Row({ t, now, onError }: { t: TargetView; now: number; onError: (e: ApiError | null) => void }) {
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
      <td>
        <Preview t={t} onError={onError} />
      </td>
    </tr>
  );
}

export function Targets() {
  const { data, error } = usePoll<TargetList>('/v1/gateway/targets', EVERY_MS);
  const now = useNow();
  const [previewError, setPreviewError] = useState<ApiError | null>(null);
  return (
    <>
      <h1 tabIndex={-1}>Gateway targets</h1>
      <ErrorAlert error={error} context="Listing the targets" />
      <ErrorAlert error={previewError} context="Making a preview link" />
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
            <th scope="col">Preview</th>
          </tr>
        </thead>
        <tbody>
          {data?.targets.map((t) => (
            <Row key={t.id} t={t} now={now} onError={setPreviewError} />
          ))}
        </tbody>
      </table>
      {data && data.targets.length === 0 ? <p class="empty">No gateway targets.</p> : null}
    </>
  );
}
