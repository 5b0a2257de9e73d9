package store

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// SetExclusiveTiming shortens RunExclusive's retry and keepalive for tests.
func SetExclusiveTiming(s *Store, retry, keepalive time.Duration) {
	s.exclusiveRetry, s.exclusiveKeepalive = retry, keepalive
}

// PlanQuery is a statement of the store with sample arguments, and the
// index its search must be bounded by.
type PlanQuery struct {
	Name, Query, Index string
	Args               []any
}

// PlanQueries are the statements whose cost must not grow with the
// store — what retention, session removal and the liveness pass run per
// batch, a list of an owner's sessions — for the plan test.
func PlanQueries() []PlanQuery {
	in := func(q string, args ...any) (string, []any) {
		q, args, err := sqlx.In(q, args...)
		if err != nil {
			panic(err)
		}
		return q, args
	}
	ids := []string{"ses_a", "ses_b"}
	oldTombstones, delTombstones := oldestSQL("tombstones", "session_id", "at")
	tombstones, targs := in(delTombstones, ids, int64(5))
	oldDeliveries, delDeliveries := oldestSQL("deliveries", "id", "received_at")
	deliveries, dargs := in(delDeliveries, ids, int64(5))
	free, fargs := in(freeSessionResources, ids, ids)
	qs := []PlanQuery{
		{"events boundary", selectEventsBoundary, "events_at", []any{int64(5), 499}},
		{"events delete", deleteEventsThrough, "events_at", []any{int64(4), int64(4), "ses_a", int64(1)}},
		{"prune candidates", fmt.Sprintf(selectPruneCandidates, ">"), "sessions_pkey", []any{"ses_a", int64(3), 500}},
		{"prune range", selectPruneRange, "checkpoints_pkey", []any{"ses_a", int64(1), int64(7), 500}},
		{"prune claim", claimPruneRange, "sessions_pkey", []any{int64(7), "ses_a", int64(1)}},
		{"prune delete", deletePruneRange, "checkpoints_pkey", []any{"ses_a", int64(1), int64(7), int64(3)}},
		{"tombstones oldest", oldTombstones, "tombstones_at", []any{int64(5), 500}},
		{"tombstones delete", tombstones, "tombstones_pkey", targs},
		{"deliveries oldest", oldDeliveries, "deliveries_received", []any{int64(5), 500}},
		{"deliveries delete", deliveries, "deliveries_pkey", dargs},
		{"live refs oldest", selectOldLiveRefs, "live_refs_observed", []any{int64(5), int64(1), "acme/widgets", "branch:x", 500}},
		{"live ref delete (branch)", deleteLiveRefBranch, "live_refs_pkey", []any{"acme/widgets", "branch:x", int64(5), "x"}},
		{"live ref delete (PR)", deleteLiveRefPR, "live_refs_pkey", []any{"acme/widgets", "pr:3", int64(5), int64(3)}},
		{"idempotency boundary", selectIdempotencyBoundary, "idempotency_created", []any{int64(5), 499}},
		{"idempotency delete", deleteIdempotencyThrough, "idempotency_created", []any{int64(5), int64(4), int64(5)}},
		{"free resources", free, "lease_resources_pkey", fargs},
		{"renew resource", renewResource, "lease_resources_pkey", []any{int64(5), "branch:acme/widgets:x", "lea_a"}},
		{"free resource", freeResource, "lease_resources_pkey", []any{"branch:acme/widgets:x", "lea_a"}},
		{"bump resource", bumpResource, "lease_resources_pkey", []any{"branch:acme/widgets:x", "lea_a"}},
	}
	owner, oargs := listQuery(SessionFilter{State: checkpointd.SessionActive, Repo: "acme/*", Limit: 50}, time.Unix(5, 0), time.Minute)
	qs = append(qs, PlanQuery{"sessions of an owner", owner, "sessions_owner_id", oargs},
		PlanQuery{"leases not ok", selectLeasesNotOK, "sessions_leases_ok", nil},
		PlanQuery{"lease audit", selectLeaseAudit, "sessions_state_id", []any{"ses_a", 5000}},
		PlanQuery{"lease mismatch audit", selectMismatchAudit, "leases_pkey", []any{"lea_a", 5000}})
	qs = append(qs,
		PlanQuery{"written before a drain (count)", countWrittenBefore("sessions"), "sessions_written_before", []any{int64(3)}},
		PlanQuery{"written before a drain (reset)", selectWrittenBefore("sessions"), "sessions_written_before", []any{int64(3), 1000}})
	return append(qs, PlanQuery{"unresponsive candidates", fmt.Sprintf(selectUnresponsive, ""), "sessions_unmarked_seen",
		[]any{int64(5), int64(5), 200}})
}

// SQLitePlanForms are the SQLite forms of the plan queries that differ
// (they name their index: INDEXED BY), by name.
func SQLitePlanForms() map[string]string {
	return map[string]string{
		"unresponsive candidates":        fmt.Sprintf(selectUnresponsive, (&Store{dialect: migrations.SQLite}).unmarked()),
		"written before a drain (count)": countWrittenBefore((&Store{dialect: migrations.SQLite}).writtenBefore()),
		"written before a drain (reset)": selectWrittenBefore((&Store{dialect: migrations.SQLite}).writtenBefore()),
	}
}

// TrimEvents is trimEvents, for tests.
func TrimEvents(ctx context.Context, s *Store, sessionID string, batch int) (int64, error) {
	return s.trimEvents(ctx, sessionID, batch)
}

// ExclusiveHeldElsewhere reports whether another process holds the lock of
// name right now (always false on SQLite).
func (s *Store) ExclusiveHeldElsewhere(ctx context.Context, name string) (bool, error) {
	if s.dialect != migrations.Postgres {
		return false, nil
	}
	conn, err := s.wdb.Connx(ctx)
	if err != nil {
		return false, s.classify(err)
	}
	defer conn.Close()
	var got bool
	if err := conn.GetContext(ctx, &got, `SELECT pg_try_advisory_lock(`+lockSQL+`)`, name); err != nil {
		return false, s.classify(err)
	}
	if got {
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock(`+lockSQL+`)`, name); err != nil {
			return false, s.classify(err)
		}
	}
	return !got, nil
}

// LimitPages makes the SQLite database full, as a full disk does: on the
// writer's one connection it frees the unused pages (VACUUM) and caps the
// database at the pages it now has (PRAGMA max_page_count), so a write
// that needs a new page fails with SQLITE_FULL, "database or disk is
// full". restore lifts the cap.
func LimitPages(ctx context.Context, s *Store) (restore func() error, err error) {
	if _, err := s.wdb.ExecContext(ctx, `VACUUM`); err != nil {
		return nil, err
	}
	return CapPages(ctx, s)
}

// CapPages is LimitPages without the VACUUM: the pages on the freelist
// stay usable, as they do when a real disk fills up, so a write that fits
// in them still commits and a larger one fails.
func CapPages(ctx context.Context, s *Store) (restore func() error, err error) {
	var was int64
	if err := s.wdb.GetContext(ctx, &was, `PRAGMA max_page_count`); err != nil {
		return nil, err
	}
	var pages int64
	if err := s.wdb.GetContext(ctx, &pages, `PRAGMA page_count`); err != nil {
		return nil, err
	}
	if _, err := s.wdb.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages)); err != nil {
		return nil, err
	}
	return func() error {
		_, err := s.wdb.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, was))
		return err
	}, nil
}

// ReadyTTL and ReadyProbeTimeout are readyTTL and readyProbeTimeout, for
// tests.
const (
	ReadyTTL          = readyTTL
	ReadyProbeTimeout = readyProbeTimeout
)

// FreePages is how many pages the SQLite database has on its freelist.
func FreePages(ctx context.Context, s *Store) (n int64, err error) {
	err = s.wdb.GetContext(ctx, &n, `PRAGMA freelist_count`)
	return n, err
}

// ReadyProbes is how many readiness probes s ran.
func ReadyProbes(s *Store) int64 { return s.ready.probes.Load() }

// DecideDrain is one drain decision alone, without the reads CompleteDrain
// brings up to date before it.
func DecideDrain(ctx context.Context, s *Store, by string, limit int) (*checkpointd.Drain, error) {
	return s.decideDrain(ctx, DrainCompletion{By: by, Limit: limit})
}

// PauseAfterDrainCheck makes pause run inside every session or run
// creation of s once its "not draining" check passed, with the
// transaction's PostgreSQL backend pid (0 on SQLite): a test holds the
// window between the check and the commit open for as long as it likes.
// nil removes it.
func PauseAfterDrainCheck(s *Store, pause func(pid int)) {
	if pause == nil {
		s.afterDrainCheck = nil
		return
	}
	s.afterDrainCheck = func(ctx context.Context, tx *sqlx.Tx) {
		pid := 0
		if s.dialect == migrations.Postgres {
			if err := tx.GetContext(ctx, &pid, `SELECT pg_backend_pid()`); err != nil {
				panic(err)
			}
		}
		pause(pid)
	}
}

// DocumentDigest is what a checkpoint row keeps of its clear document.
func DocumentDigest(document []byte) string { return documentDigest(document) }

// SetOneStatementWrite turns the one-statement checkpoint write on or off.
func SetOneStatementWrite(s *Store, on bool) { s.written.off.Store(!on) }

// OneStatementWrites counts the checkpoint writes the one statement made,
// and those it declined by reason.
func OneStatementWrites(s *Store) (taken int64, declined map[string]int64) {
	declined = map[string]int64{}
	s.written.declines.Range(func(k, v any) bool {
		declined[k.(string)] = v.(interface{ Load() int64 }).Load()
		return true
	})
	return s.written.taken.Load(), declined
}

// SetFeedPoll sets how often PostgreSQL feed readers are woken without a
// notification, until the test ends.
func SetFeedPoll(t interface{ Cleanup(func()) }, d time.Duration) {
	old := feedPoll
	feedPoll = d
	t.Cleanup(func() { feedPoll = old })
}

// SetWriteBatchRunners sets how many batched calls of one-statement
// writes s runs at once. Call it before s writes a checkpoint.
func SetWriteBatchRunners(s *Store, n int) { s.batcher.runners = n }

// HoldWriteBatches holds every runner of s, from the next write it takes,
// until release: the writes that arrive meanwhile wait to be taken, then
// go in one call, which waits until it has gather of them (0: whoever
// waits). queued is how many wait, holding how many runners hold the
// write they took.
func HoldWriteBatches(s *Store, gather int) (queued, holding func() int64, release func()) {
	h := make(chan struct{})
	s.batcher.gather.Store(int64(gather))
	s.batcher.hold.Store(&h)
	var once sync.Once
	return s.batcher.waiting.Load, s.batcher.holding.Load, func() {
		once.Do(func() {
			s.batcher.hold.Store(nil)
			close(h)
		})
	}
}

// WriteBatchCalls counts the batched calls s made and the largest.
func WriteBatchCalls(s *Store) (calls, largest int64) {
	return s.batcher.calls.Load(), s.batcher.largest.Load()
}

// RawConsoleGrant is a console session's forge_grant column as stored.
func (s *Store) RawConsoleGrant(t interface{ Fatal(...any) }, idDigest string) string {
	var raw string
	if err := s.rdb.Get(&raw, s.rdb.Rebind(`SELECT forge_grant FROM console_sessions WHERE id_digest = ?`), idDigest); err != nil {
		t.Fatal(err)
	}
	return raw
}

// ExpireReadyWarnings makes the next ReadyWarnings read the statistics.
func ExpireReadyWarnings(s *Store) {
	s.warnings.mu.Lock()
	s.warnings.at = time.Time{}
	s.warnings.mu.Unlock()
}

// SetLeaseAuditChunk sets how many sessions a reconcile pass audits for
// leases named but not held, until the test ends.
func SetLeaseAuditChunk(t interface{ Cleanup(func()) }, n int) {
	was := leaseAuditChunk
	leaseAuditChunk = n
	t.Cleanup(func() { leaseAuditChunk = was })
}

// UnsettledProbes are the statements Settled and the drain decision ask
// whether any ref waits to be settled with.
var UnsettledProbes = map[string]string{"unsettled": unsettledProbe, "unsettled, bound": unsettledBoundProbe}
