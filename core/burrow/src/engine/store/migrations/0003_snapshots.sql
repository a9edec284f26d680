-- Snapshots: a sandbox's state saved under a name. The content lives in
-- the image store (an OCI manifest and its blobs, by digest); a full
-- snapshot's saved guest in `snapshots/<name>/` of the home. A row is
-- written last, once everything it names is in place, so a snapshot that
-- was interrupted is not one. Rows outlive their source sandbox.
CREATE TABLE snapshots (
    name        TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    size        INTEGER NOT NULL,
    source_id   TEXT NOT NULL,
    source_name TEXT NOT NULL,
    base_image  TEXT NOT NULL,
    driver      TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);
