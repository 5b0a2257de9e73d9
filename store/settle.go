package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// A delivery that moves a ref commits the ref's new live state and answers
// the forge at once; the validity of the sessions bound to the ref is
// brought in line afterwards, by Settle, one transaction per ref. The
// webhook handler settles right after its answer, the background workers
// settle what a crash left behind, and every caller about to report
// validity settles first (Settled), so no answer ever carries a verdict
// older than the live refs it could have been judged against.

// settleBatch bounds how many unsettled refs one query lists.
const settleBatch = 100

// Settle re-judges the active sessions bound to every ref whose live state
// changed since they were last judged, recording each change with its
// evidence (the observation that set the ref's live state). Refs that
// change again while it runs are settled by the next call. Errors:
// ErrStoreUnavailable.
//
// Callers in one process take turns: a burst of deliveries then waits in
// Go for the one settle that covers them all, instead of each holding a
// pooled connection while it waits on the same row locks. A ref that fails
// does not hold up the others; the errors are joined.
func (s *Store) Settle(ctx context.Context) error { return s.settle(ctx) }

// settle is Settle recording what it moved in track.
func (s *Store) settle(ctx context.Context, track ...*Moves) error {
	select {
	case s.settling <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting to settle: %w", checkpointd.ErrStoreUnavailable, ctx.Err())
	}
	defer func() { <-s.settling }()
	var after struct{ repoKey, ref string }
	var failed []error
	for {
		var refs []struct {
			RepoKey string `db:"repo_key"`
			Ref     string `db:"ref"`
		}
		if err := s.rdb.SelectContext(ctx, &refs, s.rdb.Rebind(`SELECT repo_key, ref FROM live_refs
WHERE version <> settled_version AND (repo_key, ref) > (?, ?)
ORDER BY repo_key, ref LIMIT ?`), after.repoKey, after.ref, settleBatch); err != nil {
			return errors.Join(append(failed, s.classify(err))...)
		}
		for _, r := range refs {
			if err := s.settleRef(ctx, r.RepoKey, r.Ref, track...); err != nil {
				if ctx.Err() != nil {
					return err
				}
				failed = append(failed, fmt.Errorf("settle %s %s: %w", r.RepoKey, r.Ref, err))
			}
		}
		if len(refs) < settleBatch {
			return errors.Join(failed...)
		}
		after.repoKey, after.ref = refs[len(refs)-1].RepoKey, refs[len(refs)-1].Ref
	}
}

// Settled brings every verdict up to date, for a caller about to read and
// report one: it ends the leases whose time ran out (expired) and settles
// what is pending, if anything, at the price of two indexed probes. Reads
// do not do it themselves (a read only reads): the API calls it before
// every answer that carries a session's validity or a lease's state, so no
// answer carries a verdict older than the live refs it could have been
// judged against. Errors: ErrStoreUnavailable.
func (s *Store) Settled(ctx context.Context) error {
	if err := s.expired(ctx); err != nil {
		return err
	}
	pending, err := unsettled(ctx, s.rdb)
	if err != nil {
		return s.classify(err)
	}
	if !pending {
		return nil
	}
	return s.Settle(ctx)
}

// unsettled reports whether some ref's sessions wait to be re-judged.
func unsettled(ctx context.Context, q sqlx.QueryerContext) (bool, error) {
	var n int
	err := sqlx.GetContext(ctx, q, &n, unsettledProbe)
	return n > 0, err
}

// unsettledBound is unsettled for the refs an active session is bound to:
// a push to a branch nobody works on does not concern a drain.
func unsettledBound(ctx context.Context, q sqlx.QueryerContext) (bool, error) {
	var n int
	err := sqlx.GetContext(ctx, q, &n, unsettledBoundProbe)
	return n > 0, err
}

// The probes read live_refs_unsettled in its order. PostgreSQL estimates
// version <> settled_version as true of nearly every row, so without the
// ORDER BY its plan for LIMIT 1 was a scan of the whole table, which
// found nothing on every answer that settles first: 5–7 ms at 100k refs
// (TestUnsettledProbesReadTheirIndex).
const (
	unsettledProbe = `SELECT COUNT(*) FROM (SELECT 1 FROM live_refs WHERE version <> settled_version
ORDER BY repo_key, ref LIMIT 1) p`
	unsettledBoundProbe = `SELECT COUNT(*) FROM (SELECT 1 FROM live_refs l
WHERE l.version <> l.settled_version AND (
    (l.ref LIKE 'branch:%' AND EXISTS (SELECT 1 FROM sessions s
        WHERE s.repo_key = l.repo_key AND s.branch = substr(l.ref, 8) AND s.state = 'active'))
 OR (l.ref LIKE 'pr:%' AND EXISTS (SELECT 1 FROM sessions s
        WHERE s.repo_key = l.repo_key AND s.pr = CAST(substr(l.ref, 4) AS BIGINT) AND s.state = 'active')))
ORDER BY l.repo_key, l.ref LIMIT 1) p`
)

// settleRef settles one ref. On PostgreSQL the ref's row is locked first, so
// two replicas settling the same ref take turns and the later one finds it
// settled, and a delivery to the ref waits for the settle in progress; an
// older judgement can never be committed over a newer one.
func (s *Store) settleRef(ctx context.Context, repoKey, ref string, track ...*Moves) error {
	q := `SELECT head, state, observed_at, source, version FROM live_refs WHERE repo_key = ? AND ref = ? AND version <> settled_version`
	if s.dialect == migrations.Postgres {
		q += ` FOR UPDATE`
	}
	start, judged := time.Now(), false
	err := s.change(ctx, CauseWebhook, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		judged = false
		var row liveRefRow
		if err := tx.GetContext(ctx, &row, tx.Rebind(q), repoKey, ref); err != nil {
			return ignoreNoRows(err) // settled meanwhile
		}
		judged = true
		ch.cause = settleCause(row.Source)
		groups, err := judgeRef(ctx, tx, repoKey, ref, row)
		if err != nil {
			return err
		}
		return applyJudgement(ctx, tx, ch, repoKey, ref, row, groups, s.now())
	}, track...)
	if err == nil && judged && s.obs != nil {
		s.obs.RefSettled(time.Since(start))
	}
	return err
}

// settleCause is the observer's cause for a settle: whoever observed the
// ref's live state last.
func settleCause(source string) string {
	if strings.HasPrefix(source, "reconcile") {
		return CauseReconcile
	}
	return CauseWebhook
}

// SettleSweep is how often RunSettle looks for refs nobody settled: a
// handler that failed or a daemon that stopped between a delivery's answer
// and its settle. Reads settle on their own; this keeps the event logs and
// the metrics from waiting for a read.
const SettleSweep = 10 * time.Second

// RunSettle settles every SettleSweep until ctx ends. Every replica may run
// it: settling one ref twice is a no-op.
func (s *Store) RunSettle(ctx context.Context) error {
	return every(ctx, SettleSweep, func(ctx context.Context) {
		pass, cancel := context.WithTimeout(ctx, SettleSweep)
		defer cancel()
		if err := s.Settle(pass); err != nil && ctx.Err() == nil {
			s.log.Warn("settling live refs failed", slog.Any("err", err))
		}
	})
}
