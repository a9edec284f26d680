-- Lifecycle events: one row per change of a sandbox's record (created, a
-- status changed, renamed by a pool claim, removed), written by triggers,
-- so every writer (the library, the CLI, supervisors, any process) records
-- them in the transaction that made the change, and in its order.
CREATE TABLE events (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    at            INTEGER NOT NULL,
    sandbox_id    TEXT NOT NULL,
    name          TEXT NOT NULL,
    kind          TEXT NOT NULL,
    status        TEXT,
    previous      TEXT,
    previous_name TEXT,
    generation    INTEGER NOT NULL,
    reason        TEXT
);
CREATE INDEX events_by_sandbox ON events(sandbox_id, generation);

-- Which event log this is: a reader's position (a seq) means something
-- only in the log it was read from (a home made again starts again at 1).
CREATE TABLE event_log (id TEXT NOT NULL);
INSERT INTO event_log (id) VALUES (lower(hex(randomblob(16))));

CREATE TRIGGER events_created AFTER INSERT ON sandboxes BEGIN
    INSERT INTO events (at, sandbox_id, name, kind, status, generation)
    VALUES (new.updated_at, new.id, new.name, 'created', new.status, new.generation);
END;

CREATE TRIGGER events_status AFTER UPDATE OF status ON sandboxes
WHEN old.status IS NOT new.status BEGIN
    INSERT INTO events (at, sandbox_id, name, kind, status, previous, generation)
    VALUES (new.updated_at, new.id, new.name, 'status', new.status, old.status, new.generation);
END;

CREATE TRIGGER events_renamed AFTER UPDATE OF name ON sandboxes
WHEN old.name IS NOT new.name BEGIN
    INSERT INTO events (at, sandbox_id, name, kind, status, previous_name, generation)
    VALUES (new.updated_at, new.id, new.name, 'renamed', new.status, old.name, new.generation);
END;

CREATE TRIGGER events_removed AFTER DELETE ON sandboxes BEGIN
    INSERT INTO events (at, sandbox_id, name, kind, previous, generation)
    VALUES (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
            old.id, old.name, 'removed', old.status, old.generation);
END;

-- A run's end is written with its status change, in one transaction: the
-- reason goes on that change's event.
CREATE TRIGGER events_reason AFTER UPDATE OF exit_reason ON runs
WHEN new.exit_reason IS NOT NULL BEGIN
    UPDATE events SET reason = new.exit_reason
    WHERE seq = (SELECT max(seq) FROM events
                 WHERE sandbox_id = new.sandbox_id AND generation = new.generation
                   AND kind = 'status');
END;

-- The log keeps its newest 100000 events (trimmed every 1000).
CREATE TRIGGER events_trim AFTER INSERT ON events
WHEN new.seq % 1000 = 0 BEGIN
    DELETE FROM events WHERE seq <= new.seq - 100000;
END;
