-- Preview links of the gateway's own origin: a short-lived token, traded
-- once (exchanged_at) for a cookie of that target's origin alone
-- (cookie_hash), for one target and, where the link names one, one port
-- of it. Revoking the link (revoked_at), its token being revoked (the
-- EXISTS finds nothing) or its expiry ends the cookie too.
CREATE TABLE gateway_previews (
    id           TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    target_id    TEXT NOT NULL,
    port         INTEGER,
    token_hash   TEXT NOT NULL UNIQUE,
    cookie_hash  TEXT UNIQUE,
    token_id     TEXT,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    exchanged_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX gateway_previews_by_target ON gateway_previews (target_id);
CREATE INDEX gateway_previews_by_expiry ON gateway_previews (expires_at);
