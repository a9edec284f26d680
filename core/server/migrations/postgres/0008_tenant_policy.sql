-- A tenant's policy beyond its egress ceiling (NULL: as before, the
-- engine's freedom within the ceiling): the images its sandboxes may use
-- (a JSON array of image references and repository prefixes, normalized)
-- and the registries (a JSON array of hosts); and the most memory (MiB)
-- and CPUs one of its sandboxes may have.
ALTER TABLE tenants ADD COLUMN allowed_images TEXT;
ALTER TABLE tenants ADD COLUMN allowed_registries TEXT;
ALTER TABLE tenants ADD COLUMN sandbox_max_memory_mb BIGINT;
ALTER TABLE tenants ADD COLUMN sandbox_max_cpus DOUBLE PRECISION;
