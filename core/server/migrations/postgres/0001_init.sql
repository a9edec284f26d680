-- burrow serve: the server's own tables (the engine's sandbox records live
-- in the engine's store). Times are milliseconds since the epoch.

CREATE TABLE api_tokens (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    token_hash  TEXT NOT NULL UNIQUE,
    created_at  BIGINT NOT NULL
);

-- What the gateway proxies to: a port inside a sandbox (id = the sandbox's
-- id) or a remote URL (proxying only, no workload). Configuration,
-- credentials and discovered metadata live here; reclaiming never touches
-- this table.
CREATE TABLE targets (
    id           TEXT PRIMARY KEY,
    kind         TEXT NOT NULL CHECK (kind IN ('sandbox', 'url')),
    port         INTEGER,
    command      TEXT,
    url          TEXT,
    metadata     TEXT NOT NULL DEFAULT '{}',
    credentials  TEXT,
    created_at   BIGINT NOT NULL,
    updated_at   BIGINT NOT NULL
);

-- Runtime state of a sandbox target, written by the gateway and the reaper.
-- No row: never called through the gateway.
CREATE TABLE runtime_state (
    target_id     TEXT PRIMARY KEY REFERENCES targets (id) ON DELETE CASCADE,
    state         TEXT NOT NULL
                  CHECK (state IN ('dormant', 'starting', 'ready', 'reaping', 'failed')),
    prev_state    TEXT,
    generation    BIGINT NOT NULL,
    last_used_at  BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    owner         TEXT,
    last_error    TEXT
);
CREATE INDEX runtime_state_by_state ON runtime_state (state, last_used_at);

-- One row per gateway call in flight, heartbeated while it runs.
CREATE TABLE leases (
    id          TEXT PRIMARY KEY,
    target_id   TEXT NOT NULL,
    replica     TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE INDEX leases_by_target ON leases (target_id, expires_at);
CREATE INDEX leases_by_expiry ON leases (expires_at);

-- Client sessions of remote backends; attached sandboxes stop when their
-- session ends (connection closed, or not heartbeated by a dead replica).
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    replica     TEXT NOT NULL,
    expires_at  BIGINT NOT NULL
);
CREATE TABLE attachments (
    sandbox_id  TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    session_id  TEXT NOT NULL
);
CREATE INDEX attachments_by_session ON attachments (session_id);
