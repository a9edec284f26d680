-- Lifecycle events, per tenant, copied from the engine's event log by one
-- replica at a time (the pump, under an advisory lock): ids are assigned
-- by the pump in order, so a reader resuming after an id misses nothing.
CREATE TABLE events (
    id          BIGINT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    at          BIGINT NOT NULL,
    type        TEXT NOT NULL,
    body        TEXT NOT NULL
);
CREATE INDEX events_by_tenant ON events (tenant, id);
CREATE INDEX events_by_time ON events (at);

-- How far the engine's log (by its id) has been copied; and, under
-- `_events` and `_deliveries`, the last id given (ids are never reused,
-- whatever was pruned).
CREATE TABLE event_cursors (
    log         TEXT PRIMARY KEY,
    seq         BIGINT NOT NULL
);

-- For a backend that keeps no event log (Kubernetes): each sandbox as the
-- pump last saw it; a change seen in the next listing is an event.
CREATE TABLE event_states (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    status      TEXT NOT NULL,
    generation  BIGINT NOT NULL
);

-- Webhooks: a tenant's URLs that receive its events (of the listed
-- types; an empty list is every type), signed with the secret.
CREATE TABLE webhooks (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL,
    url         TEXT NOT NULL,
    secret      TEXT NOT NULL,
    types       TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);
CREATE INDEX webhooks_by_tenant ON webhooks (tenant);

-- The outbox: one delivery per (webhook, event), written with the event;
-- a replica leases a due one, posts it, and records how it went. A lease
-- that ran out (its replica died mid-post) makes it due again.
CREATE TABLE deliveries (
    id            BIGINT PRIMARY KEY,
    webhook       TEXT NOT NULL REFERENCES webhooks (id) ON DELETE CASCADE,
    event         BIGINT NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    next_at       BIGINT NOT NULL,
    leased_until  BIGINT,
    created_at    BIGINT NOT NULL,
    done_at       BIGINT
);
CREATE INDEX deliveries_due ON deliveries (next_at) WHERE state = 'pending';
CREATE INDEX deliveries_by_webhook ON deliveries (webhook, id);

-- Each attempt of a delivery: an attempt without an end was cut short
-- (its replica stopped while posting).
CREATE TABLE delivery_attempts (
    delivery    BIGINT NOT NULL REFERENCES deliveries (id) ON DELETE CASCADE,
    attempt     INTEGER NOT NULL,
    started_at  BIGINT NOT NULL,
    ended_at    BIGINT,
    status      INTEGER,
    error       TEXT,
    PRIMARY KEY (delivery, attempt)
);
