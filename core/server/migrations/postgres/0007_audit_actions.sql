-- The audit log records actions too (execs, shells, file reads and
-- writes, copies and tunnels on the runtime stream, console downloads,
-- uploads and terminals, gateway calls), with the client's address and
-- the sandbox acted on. `status` is 0 for an action with no HTTP answer
-- of its own (a request on the runtime stream); `outcome` says how it
-- ended: ok, refused, error, pending (still running) or interrupted.
-- `action_id` names a pending action's entry until its outcome is
-- written (internal, never shown).
ALTER TABLE audit_log ADD COLUMN client TEXT;
ALTER TABLE audit_log ADD COLUMN sandbox TEXT;
ALTER TABLE audit_log ADD COLUMN outcome TEXT NOT NULL DEFAULT 'ok';
ALTER TABLE audit_log ADD COLUMN action_id TEXT;
UPDATE audit_log SET outcome = 'refused' WHERE status IN (401, 403, 429);
UPDATE audit_log SET outcome = 'error'
    WHERE outcome = 'ok' AND code IS NOT NULL;
CREATE INDEX audit_log_by_sandbox ON audit_log (sandbox, id);
CREATE INDEX audit_log_by_action ON audit_log (action_id)
    WHERE action_id IS NOT NULL;
