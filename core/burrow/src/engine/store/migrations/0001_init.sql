-- Sandboxes: one row per persisted sandbox. A name belongs to one live row.
CREATE TABLE sandboxes (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    config      TEXT NOT NULL,
    status      TEXT NOT NULL,
    generation  INTEGER NOT NULL DEFAULT 0,
    detached    INTEGER NOT NULL DEFAULT 0,
    -- The live owner of a Starting/Running/Draining/Paused record: first the
    -- starter process, then the supervisor. pid + kernel start time, so a
    -- reused pid is never mistaken for the owner.
    owner_pid   INTEGER,
    owner_start INTEGER,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
);

-- Runs: one row per runtime generation.
CREATE TABLE runs (
    sandbox_id     TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    generation     INTEGER NOT NULL,
    supervisor_pid INTEGER,
    supervisor_start INTEGER,
    started_at     INTEGER NOT NULL,
    running_at     INTEGER,
    ended_at       INTEGER,
    exit_reason    TEXT,
    detail         TEXT,
    timings        TEXT,
    PRIMARY KEY (sandbox_id, generation)
);

CREATE TABLE labels (
    sandbox_id TEXT NOT NULL REFERENCES sandboxes(id) ON DELETE CASCADE,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX labels_by_key_value ON labels(key, value);
