-- Warm pools: a sandbox configuration and how many sandboxes of it are
-- kept started and unclaimed. The counters are the pool's metrics.
CREATE TABLE pools (
    name           TEXT PRIMARY KEY,
    config         TEXT NOT NULL,
    size           INTEGER NOT NULL,
    claims         INTEGER NOT NULL DEFAULT 0,
    misses         INTEGER NOT NULL DEFAULT 0,
    last_refill_ms INTEGER,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
);

-- The pool of a warm sandbox not yet claimed (named `pool/<pool>/<n>`);
-- NULL for every other sandbox. A claim clears it in the statement that
-- renames the sandbox, so a warm sandbox is claimed at most once.
ALTER TABLE sandboxes ADD COLUMN pool TEXT;
CREATE INDEX sandboxes_by_pool ON sandboxes(pool) WHERE pool IS NOT NULL;
