-- Tenants: every token, gateway target and session belongs to one. The
-- default tenant exists always; the rows that were there before are its,
-- and the tokens that were there before are its admins.

CREATE TABLE tenants (
    name        TEXT PRIMARY KEY,
    created_at  BIGINT NOT NULL
);
INSERT INTO tenants (name, created_at) VALUES ('default', 0);

ALTER TABLE api_tokens ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE api_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'admin'
    CHECK (role IN ('admin', 'tenant_admin', 'operator', 'read_only'));
ALTER TABLE targets ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sessions ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
