-- Tenants: every token, gateway target and session belongs to one. The
-- default tenant exists always; the rows that were there before are its,
-- and the tokens that were there before are its admins.

-- Quotas: NULL is no limit.
CREATE TABLE tenants (
    name                   TEXT PRIMARY KEY,
    created_at             INTEGER NOT NULL,
    max_sandboxes          INTEGER,
    max_running            INTEGER,
    max_cpus               REAL,
    max_memory_mb          INTEGER,
    max_starts_per_minute  INTEGER
);

-- Starts of the last minute, per tenant (older rows are deleted as new
-- ones come).
CREATE TABLE tenant_starts (
    tenant  TEXT NOT NULL,
    at      INTEGER NOT NULL
);
CREATE INDEX tenant_starts_by_tenant ON tenant_starts (tenant, at);
INSERT INTO tenants (name, created_at) VALUES ('default', 0);

ALTER TABLE api_tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE api_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'
    CHECK (role IN ('admin', 'tenant_admin', 'operator', 'read_only'));
ALTER TABLE targets ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sessions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';

-- The audit log: every change asked of the API, and every refusal, with
-- who asked (token, tenant) and how it ended. Pruned by the reaper after
-- audit.retention.
CREATE TABLE audit_log (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at          INTEGER NOT NULL,
    tenant      TEXT,
    token       TEXT,
    operation   TEXT NOT NULL,
    object      TEXT,
    status      INTEGER NOT NULL,
    code        TEXT
);
CREATE INDEX audit_log_by_tenant ON audit_log (tenant, id);
CREATE INDEX audit_log_by_time ON audit_log (at);
