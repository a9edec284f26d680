-- The web console's logins: a session cookie's hash, the token it was made
-- with (a revoked token ends its sessions: the join finds nothing), the
-- session's CSRF token, and when it expires.
CREATE TABLE console_sessions (
    id_hash     TEXT PRIMARY KEY,
    token_id    TEXT NOT NULL,
    csrf        TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);
CREATE INDEX console_sessions_by_expiry ON console_sessions (expires_at);

-- The gateway's cold starts, per target (the last few are kept): when,
-- and how long the call waited for its workload.
CREATE TABLE cold_starts (
    target_id   TEXT NOT NULL,
    at          INTEGER NOT NULL,
    ms          INTEGER NOT NULL
);
CREATE INDEX cold_starts_by_target ON cold_starts (target_id, at);
