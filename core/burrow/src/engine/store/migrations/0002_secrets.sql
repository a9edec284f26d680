-- A sandbox's secrets' values and its CA, sealed (ChaCha20-Poly1305 with
-- the key file beside the database, the sandbox's id as associated data).
ALTER TABLE sandboxes ADD COLUMN secrets TEXT;
