// Snapshots and what they were taken from.

import { ErrorAlert } from '../components/ErrorAlert';
import { bytes, time } from '../format';
import { usePoll } from '../hooks';
import { href } from '../router';
import type { SnapshotList } from '../types';

export function Snapshots() {
  const { data, error } = usePoll<SnapshotList>('/v1/snapshots');
  return (
    <>
      <h1 tabIndex={-1}>Snapshots</h1>
      <ErrorAlert error={error} context="Listing the snapshots" />
      <table id="snapshots" class="data">
        <caption>Images taken from sandboxes; create a sandbox from one with its image reference.</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Kind</th>
            <th scope="col">Image</th>
            <th scope="col">Source</th>
            <th scope="col">Base image</th>
            <th scope="col">Driver</th>
            <th scope="col">Size</th>
            <th scope="col">Taken</th>
            <th scope="col">Digest</th>
          </tr>
        </thead>
        <tbody>
          {data?.snapshots.map((s) => (
            <tr key={s.name} data-snapshot-name={s.name}>
              <th scope="row">{s.name}</th>
              <td>{s.kind}</td>
              <td class="image">
                <code>{s.image}</code>
              </td>
              <td>
                <a href={href({ page: 'sandbox', id: s.source_id })}>{s.source_name}</a>
              </td>
              <td class="image">{s.base_image}</td>
              <td>{s.driver}</td>
              <td class="num">{bytes(s.size)}</td>
              <td>{time(s.created_at_ms)}</td>
              <td>
                <code title={s.digest}>{s.digest.slice(0, 19)}…</code>
              </td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && data.snapshots.length === 0 ? <p class="empty">No snapshots.</p> : null}
    </>
  );
}
