// Live updates: the server-sent events of `GET /v1/events?follow=true`.
//
// The stream starts from the oldest event the server keeps, so it first
// replays history. Events older than what the page already fetched are
// dropped (`since`, in the server's clock, with slack for clock skew and
// for changes made while the list was being read): the page's own fetch
// already shows their outcome.

import type { SandboxEvent } from './types';

/** The event names the server sends (`event: <type>`); an EventSource
 * only hands named events to listeners of that name. */
const TYPES = [
  'message',
  'sandbox.created',
  'sandbox.removed',
  'sandbox.starting',
  'sandbox.running',
  'sandbox.draining',
  'sandbox.paused',
  'sandbox.stopped',
  'sandbox.crashed',
];

/** Slack before `since`: events this close to the fetch are applied. */
const SLACK_MS = 5_000;

export interface Subscription {
  /** Events before this time (ms, the server's clock) are dropped. Until
   * the first call events are held: the page's first fetch may miss them. */
  since(t: number): void;
  close(): void;
}

/** Calls `on` with each new event until `close()`. The EventSource
 * reconnects by itself (resuming with `Last-Event-ID`). */
export function subscribe(on: (e: SandboxEvent) => void): Subscription {
  let cutoff: number | null = null;
  let held: SandboxEvent[] = [];
  const source = new EventSource('/v1/events?follow=true');
  const handle = (m: MessageEvent) => {
    let e: SandboxEvent;
    try {
      e = JSON.parse(m.data as string) as SandboxEvent;
    } catch {
      return;
    }
    if (!e?.sandbox?.id) return;
    if (cutoff === null) held.push(e);
    else if (e.at_ms >= cutoff) on(e);
  };
  for (const t of TYPES) source.addEventListener(t, handle as EventListener);
  return {
    since(t) {
      const first = cutoff === null;
      cutoff = Math.max(cutoff ?? -Infinity, t - SLACK_MS);
      if (first) {
        const c = cutoff;
        held.filter((e) => e.at_ms >= c).forEach(on);
        held = [];
      }
    },
    close() {
      source.close();
    },
  };
}
