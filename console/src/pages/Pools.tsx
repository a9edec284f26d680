// Warm pools and their counters.

import { ErrorAlert } from '../components/ErrorAlert';
import { ms, time } from '../format';
import { usePoll } from '../hooks';
import type { PoolList } from '../types';

const EVERY_MS = 10_000;

export function Pools() {
  const { data, error } = usePoll<PoolList>('/v1/pools', EVERY_MS);
  return (
    <>
      <h1 tabIndex={-1}>Pools</h1>
      <ErrorAlert error={error} context="Listing the pools" />
      <table id="pools" class="data">
        <caption>Warm sandboxes kept started and unclaimed, by configuration.</caption>
        <thead>
          <tr>
            <th scope="col">Name</th>
            <th scope="col">Image</th>
            <th scope="col">Size</th>
            <th scope="col">Warm</th>
            <th scope="col">Starting</th>
            <th scope="col">Claims</th>
            <th scope="col">Misses</th>
            <th scope="col">Last refill</th>
            <th scope="col">Created</th>
          </tr>
        </thead>
        <tbody>
          {data?.pools.map((p) => (
            <tr key={p.name} data-pool-name={p.name}>
              <th scope="row">{p.name}</th>
              <td class="image">{p.config.image}</td>
              <td class="num">{p.size}</td>
              <td class="num">{p.warm}</td>
              <td class="num">{p.starting}</td>
              <td class="num">{p.claims}</td>
              <td class="num">{p.misses}</td>
              <td class="num">{p.last_refill_ms == null ? '—' : ms(p.last_refill_ms)}</td>
              <td>{time(p.created_at_ms)}</td>
            </tr>
          ))}
        </tbody>
      </table>
      {data && data.pools.length === 0 ? <p class="empty">No pools.</p> : null}
    </>
  );
}
