-- +goose Up
-- The sessions each reconcile pass judges for a lost lease: the active
-- ones whose leases_ok is false (after the boot reset made them
-- unverified, say), a range as small as the sessions that lost a lease,
-- instead of reading every active session whose latest checkpoint names a
-- lease on each pass. leases_ok changes only when a lease is lost or held
-- again, never on an ordinary write, so the write's session update stays
-- HOT on PostgreSQL.
CREATE INDEX sessions_leases_ok ON sessions (leases_ok, id) WHERE state = 'active';

-- +goose Down
DROP INDEX sessions_leases_ok;
