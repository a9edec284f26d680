-- MCP sessions the gateway re-establishes after a reclaim: per target (and
-- so per tenant), the client's session id (the one the first server gave),
-- the current server's id for it, and the client's `initialize` request,
-- replayed to a new server when the old one is gone.
CREATE TABLE mcp_sessions (
    target_id    TEXT NOT NULL,
    session      TEXT NOT NULL,
    tenant       TEXT NOT NULL,
    upstream     TEXT NOT NULL,
    initialize   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    last_used_at BIGINT NOT NULL,
    PRIMARY KEY (target_id, session)
);
CREATE INDEX mcp_sessions_by_use ON mcp_sessions (last_used_at);
