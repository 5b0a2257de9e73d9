package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// The drain gate reads readiness from the session row (migrations 00006,
// 00035): a session blocks the running drain exactly when it is active and
// not drain_ready or not valid — the rows of the partial index
// sessions_drain_blocking — or when it looks ready but its latest
// checkpoint was written before the drain started (its checkpoint_epoch is
// older than the drain's, and it has a run: a parked session keeps its
// readiness) — the range of sessions_written_before below the drain's
// epoch. A drain's start touches no session: the second set is every
// ready session at first, and the reset pass (ResetWrittenBefore) moves
// it into the first in batches. Every query below repeats an index's
// predicate verbatim, so both planners use it and the cost follows the
// number of blocking sessions, not of active ones.
const blockingWhere = `state = 'active' AND (NOT drain_ready OR validity <> 'valid')`

// writtenBeforeWhere selects the sessions that say drain_ready, have a run
// and wrote nothing since the drain of the epoch its parameter names
// started: what the reset pass resets. Those of them that are valid block
// the drain only for it (onlyWrittenBefore); the others are in
// sessions_drain_blocking already.
const (
	writtenBeforeWhere = `state = 'active' AND drain_ready AND current_run_id <> '' AND checkpoint_epoch < ?`
	onlyWrittenBefore  = writtenBeforeWhere + ` AND validity = 'valid'`
)

// blocking names the sessions table for queries over blocking sessions.
// SQLite's planner proves the partial index usable but prefers the
// equality on sessions_state_id, reading every active row (50 ms at 100k
// instead of 0.3 ms), so it is told which index to use; were the predicate
// ever to drift from the index's, the query fails instead of scanning.
func (s *Store) blocking() string {
	if s.dialect == migrations.SQLite {
		return `sessions INDEXED BY sessions_drain_blocking`
	}
	return `sessions`
}

// countWrittenBefore counts the sessions written before the drain of the
// epoch its parameter names; from names the table (writtenBefore).
func countWrittenBefore(from string) string {
	return `SELECT COUNT(*) FROM ` + from + ` WHERE ` + onlyWrittenBefore
}

// selectWrittenBefore reads a chunk of them, oldest epoch first.
func selectWrittenBefore(from string) string {
	return `SELECT id FROM ` + from + ` WHERE ` + writtenBeforeWhere + ` ORDER BY checkpoint_epoch, id LIMIT ?`
}

// writtenBefore names the sessions table for queries over the sessions
// written before a drain, as blocking does.
func (s *Store) writtenBefore() string {
	if s.dialect == migrations.SQLite {
		return `sessions INDEXED BY sessions_written_before`
	}
	return `sessions`
}

const drainColumns = `id, reason, started_at, started_by, state, ended_at, ended_by, lifted_at, is_open, decision, epoch`

type drainRow struct {
	ID        string        `db:"id"`
	Reason    string        `db:"reason"`
	StartedAt int64         `db:"started_at"`
	StartedBy string        `db:"started_by"`
	State     string        `db:"state"`
	EndedAt   sql.NullInt64 `db:"ended_at"`
	EndedBy   string        `db:"ended_by"`
	LiftedAt  sql.NullInt64 `db:"lifted_at"`
	IsOpen    sql.NullInt64 `db:"is_open"`
	Decision  string        `db:"decision"`
	// Epoch numbers the drain among all drains (0: started before 00035).
	Epoch int64 `db:"epoch"`
}

// drain converts the row. An unreadable decision fails the read: the gate
// never answers from state it cannot read.
func (r *drainRow) drain() (*checkpointd.Drain, error) {
	d := &checkpointd.Drain{ID: r.ID, Reason: r.Reason, State: checkpointd.DrainState(r.State),
		StartedAt: fromMicros(r.StartedAt), StartedBy: r.StartedBy, EndedAt: fromNullMicros(r.EndedAt),
		EndedBy: r.EndedBy, LiftedAt: fromNullMicros(r.LiftedAt), Gating: r.IsOpen.Valid}
	if r.Decision != "" {
		d.Decision = &checkpointd.DrainDecision{}
		if err := jsonUnmarshal(r.Decision, d.Decision); err != nil {
			return nil, fmt.Errorf("%w: drain %s: decision unreadable: %w", checkpointd.ErrStoreUnavailable, r.ID, err)
		}
	}
	return d, nil
}

// openDrain returns the drain that gates new sessions and runs, or nil.
func openDrain(ctx context.Context, q sqlx.QueryerContext) (*drainRow, error) {
	var row drainRow
	err := sqlx.GetContext(ctx, q, &row, `SELECT `+drainColumns+` FROM drains WHERE is_open = 1`)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &row, nil
}

const countOpenDrains = `SELECT COUNT(*) FROM drains WHERE is_open = 1`

// The drain gate's lock (PostgreSQL): every transaction that creates a
// session or a run holds it shared from before its "not draining" check to
// its commit, and a drain's start takes it exclusively. Row locks cannot
// do this: before a drain starts there is no drain row to lock, and the
// session a create inserts is invisible to the completion until it
// commits. With the lock a create either committed before the drain's row
// did — it is not ready for the drain and every completion sees it — or it checks
// after, and sees the drain. SQLite needs nothing: its one writer runs
// these transactions one at a time.
const (
	lockGateShared    = `SELECT pg_advisory_xact_lock_shared(` + lockSQL + `)`
	lockGateExclusive = `SELECT pg_advisory_xact_lock(` + lockSQL + `)`
	gateLock          = "drain-gate"
)

// refuseIfDraining fails with ErrDraining while a drain gates new sessions
// and runs. It runs inside the creating transaction, so every replica
// enforces the drain row, not what it remembers, and, on PostgreSQL,
// under the gate's lock taken shared first: the check is a statement of
// its own, so its snapshot is taken after the lock is granted.
func (s *Store) refuseIfDraining(ctx context.Context, tx *sqlx.Tx) error {
	if s.dialect == migrations.Postgres {
		if _, err := tx.ExecContext(ctx, lockGateShared, gateLock); err != nil {
			return err
		}
	}
	var n int
	if err := tx.GetContext(ctx, &n, countOpenDrains); err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("%w: new sessions and runs are refused until the drain ends", checkpointd.ErrDraining)
	}
	if s.afterDrainCheck != nil {
		s.afterDrainCheck(ctx, tx)
	}
	return nil
}

// DrainGating reports whether a drain gates new sessions and runs now: one
// lookup in the unique index of drains.is_open. Errors: ErrStoreUnavailable.
func (s *Store) DrainGating(ctx context.Context) (bool, error) {
	var n int
	if err := s.rdb.GetContext(ctx, &n, countOpenDrains); err != nil {
		return false, s.classify(err)
	}
	return n > 0, nil
}

// errDrainRace reports a concurrent start that won the unique is_open slot.
var errDrainRace = errors.New("another drain started concurrently")

// StartDrain starts a drain, of the next epoch: every session with a run is
// not ready for it until it writes a checkpoint (no session row is
// touched: see blockingWhere). When a drain is already running it returns that drain and started
// false. A completed drain that still gates is replaced (the gate stays
// closed throughout). On PostgreSQL it first waits for the session creates
// and takeovers that passed their check (the gate's lock), so a completion
// sees every session and run that was not refused. Errors:
// ErrStoreUnavailable.
func (s *Store) StartDrain(ctx context.Context, reason, by string) (d *checkpointd.Drain, started bool, err error) {
	now := s.now()
	row := drainRow{ID: checkpointd.NewID(checkpointd.PrefixDrain), Reason: reason, StartedAt: micros(now),
		StartedBy: by, State: string(checkpointd.DrainRunning), IsOpen: sql.NullInt64{Int64: 1, Valid: true}}
	var running *drainRow
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		if s.dialect == migrations.Postgres {
			// Wait for the creates and takeovers past their check, and
			// hold back the next ones until the drain row commits.
			if _, err := tx.ExecContext(ctx, lockGateExclusive, gateLock); err != nil {
				return err
			}
		}
		cur, err := openDrain(ctx, tx)
		if err != nil {
			return err
		}
		if cur != nil && cur.State == string(checkpointd.DrainRunning) {
			running = cur
			return nil
		}
		if cur != nil {
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE drains SET is_open = NULL, lifted_at = ? WHERE id = ?`), micros(now), cur.ID); err != nil {
				return err
			}
		}
		// Readiness is relative to this start: nothing written before
		// counts (the writes record the latest epoch).
		if err := tx.GetContext(ctx, &row.Epoch, `SELECT COALESCE(MAX(epoch), 0) + 1 FROM drains`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO drains (id, reason, started_at, started_by, state, is_open, epoch)
VALUES (?, ?, ?, ?, ?, 1, ?)`), row.ID, row.Reason, row.StartedAt, row.StartedBy, row.State, row.Epoch); err != nil {
			if isUnique(err) {
				return errDrainRace
			}
			return err
		}
		return nil
	})
	if errors.Is(err, errDrainRace) {
		cur, err := openDrain(ctx, s.rdb)
		if err != nil || cur == nil {
			return nil, false, s.classify(errors.Join(errDrainRace, err))
		}
		running = cur
	} else if err != nil {
		return nil, false, err
	}
	if running != nil {
		d, err := running.drain()
		return d, false, err
	}
	d, err = row.drain()
	return d, true, err
}

// CancelDrain ends the open drain: a running drain becomes cancelled, a
// completed one is lifted. Either way new sessions and runs are admitted
// again. Errors: ErrNotFound (no open drain), ErrStoreUnavailable.
func (s *Store) CancelDrain(ctx context.Context, by string) (*checkpointd.Drain, error) {
	now := s.now()
	var out *checkpointd.Drain
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		var row drainRow
		err := tx.GetContext(ctx, &row, tx.Rebind(`UPDATE drains SET is_open = NULL, lifted_at = ? WHERE is_open = 1 RETURNING `+drainColumns), micros(now))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("no drain is open: %w", checkpointd.ErrNotFound)
		}
		if err != nil {
			return err
		}
		if row.State == string(checkpointd.DrainRunning) {
			row.State, row.EndedAt, row.EndedBy = string(checkpointd.DrainCancelled), sql.NullInt64{Int64: micros(now), Valid: true}, by
			if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE drains SET state = ?, ended_at = ?, ended_by = ? WHERE id = ?`),
				row.State, row.EndedAt.Int64, by, row.ID); err != nil {
				return err
			}
		}
		out, err = row.drain()
		return err
	})
	return out, err
}

// LiftCompletedDrain lifts a completed drain that still gates, as a daemon
// start does: the restart the drain prepared for has happened. A running
// drain is kept. It returns the lifted drain, or nil. Errors:
// ErrStoreUnavailable.
func (s *Store) LiftCompletedDrain(ctx context.Context) (*checkpointd.Drain, error) {
	var out *checkpointd.Drain
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		var row drainRow
		err := tx.GetContext(ctx, &row, tx.Rebind(`UPDATE drains SET is_open = NULL, lifted_at = ?
WHERE is_open = 1 AND state = 'completed' RETURNING `+drainColumns), micros(s.now()))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		out, err = row.drain()
		return err
	})
	return out, err
}

// blockerRow is what the gate reads of a blocking session.
type blockerRow struct {
	ID              string        `db:"id"`
	Repo            string        `db:"repo"`
	Role            string        `db:"role"`
	Validity        string        `db:"validity"`
	ValidityReason  string        `db:"validity_reason"`
	DrainReady      bool          `db:"drain_ready"`
	CheckpointAt    int64         `db:"checkpoint_at"`
	LatestComplete  bool          `db:"latest_complete"`
	LatestMissing   string        `db:"latest_missing"`
	WriteFailedAt   sql.NullInt64 `db:"write_failed_at"`
	WriteFailedCode string        `db:"write_failed_code"`
	EventSeq        int64         `db:"event_seq"`
	CheckpointSeq   int64         `db:"checkpoint_seq"`
	Unreadable      bool          `db:"latest_unreadable"`
	CurrentRun      string        `db:"current_run_id"`
	RunSeenAt       int64         `db:"run_seen_at"`
	Epoch           int64         `db:"checkpoint_epoch"`
}

const blockerColumns = `id, repo, role, validity, validity_reason, drain_ready, checkpoint_at, latest_complete,
    latest_missing, write_failed_at, write_failed_code, COALESCE(unreadable_seq = checkpoint_seq, FALSE) AS latest_unreadable,
    current_run_id, run_seen_at, checkpoint_epoch`

// blocker applies the domain's blocking rule to the row for the drain that
// started at start, of epoch, with the current run's liveness at now
// against window. drain_ready counts only for a checkpoint written in the
// drain's epoch, or without a run.
func (r *blockerRow) blocker(start time.Time, epoch int64, now time.Time, window time.Duration) checkpointd.DrainBlocker {
	ready := r.DrainReady && (r.CurrentRun == "" || r.Epoch >= epoch)
	in := checkpointd.Readiness{DrainStart: start, Ready: ready, Complete: r.LatestComplete,
		Validity: checkpointd.Validity(r.Validity), Unreadable: r.Unreadable, Parked: r.CurrentRun == ""}
	if r.CheckpointAt > 0 {
		in.CheckpointAt = fromMicros(r.CheckpointAt)
	}
	if r.WriteFailedAt.Valid {
		in.WriteFailedAt = fromMicros(r.WriteFailedAt.Int64)
	}
	if err := jsonUnmarshal(r.LatestMissing, &in.Missing); err == nil && in.Missing == nil {
		in.Missing = []string{}
	}
	b := checkpointd.DrainBlocker{SessionID: r.ID, Repo: r.Repo, Role: r.Role, Reasons: checkpointd.DrainBlockers(in)}
	if r.CheckpointAt > 0 {
		b.CheckpointAt = &in.CheckpointAt
	}
	if slices.Contains(b.Reasons, checkpointd.BlockIncomplete) {
		b.Missing = in.Missing
	}
	if in.Validity != checkpointd.ValidityValid {
		b.ValidityReason = checkpointd.ExplainValidity(checkpointd.Validity(r.Validity), r.ValidityReason)
	}
	if slices.Contains(b.Reasons, checkpointd.BlockWriteFailed) {
		b.WriteFailedAt, b.WriteFailure = &in.WriteFailedAt, r.WriteFailedCode
	}
	b.Parked = in.Parked
	if !in.Parked {
		seen, live := lastSeen(r.RunSeenAt, r.CheckpointAt, now, window)
		b.Live = &live
		if !live {
			b.LastSeenAt = &seen
		}
	}
	return b
}

// DrainQuery selects the page of blocking sessions a status shows.
type DrainQuery struct {
	// Limit bounds the blocking list.
	Limit int
	// After is the last session id of the previous page.
	After string
	// Scope limits the list (not the counts) to repos a token may see; nil
	// shows every repo.
	Scope []string
}

// DrainStatus is the gate's view of the open drain.
type DrainStatus struct {
	// Drain is the open drain, else the latest one (nil: never drained).
	Drain *checkpointd.Drain
	// Counts and Blocking are set only while a drain is open.
	Counts   *checkpointd.DrainCounts
	Blocking []checkpointd.DrainBlocker
	// Replicas are the registered replicas while a drain is open: what a
	// completion will ask to confirm.
	Replicas []checkpointd.Replica
}

// DrainStatus reads the open drain, its counts and a page of the sessions
// that block it, by session id, from one snapshot. Errors:
// ErrStoreUnavailable: nothing is answered from a partial read.
func (s *Store) DrainStatus(ctx context.Context, q DrainQuery) (*DrainStatus, error) {
	opts := &sql.TxOptions{ReadOnly: true}
	if s.dialect == migrations.Postgres {
		// One snapshot for every statement, so the counts agree.
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := s.rdb.BeginTxx(ctx, opts)
	if err != nil {
		return nil, s.classify(err)
	}
	defer tx.Rollback()
	st, err := s.drainStatus(ctx, tx, q)
	if err != nil {
		return nil, s.classify(err)
	}
	return st, nil
}

func (s *Store) drainStatus(ctx context.Context, tx *sqlx.Tx, q DrainQuery) (*DrainStatus, error) {
	row, err := openDrain(ctx, tx)
	if err != nil {
		return nil, err
	}
	st := &DrainStatus{Blocking: []checkpointd.DrainBlocker{}}
	if row == nil {
		var last drainRow
		err := tx.GetContext(ctx, &last, `SELECT `+drainColumns+` FROM drains ORDER BY started_at DESC, id DESC LIMIT 1`)
		if errors.Is(err, sql.ErrNoRows) {
			return st, nil
		}
		if err != nil {
			return nil, err
		}
		st.Drain, err = last.drain()
		return st, err
	}
	if st.Drain, err = row.drain(); err != nil {
		return nil, err
	}
	counts, err := s.countDrain(ctx, tx, row.Epoch)
	if err != nil {
		return nil, err
	}
	st.Counts = &counts
	var where string
	var args []any
	if q.After != "" {
		where, args = " AND id > ?", append(args, q.After)
	}
	if q.Scope != nil {
		cond, cargs := scopeCondition(q.Scope, "repo_key", "repo_owner")
		where, args = where+" AND "+cond, append(args, cargs...)
	}
	rows, err := s.selectBlockers(ctx, tx, row.Epoch, where, args, q.Limit)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		st.Blocking = append(st.Blocking, rows[i].blocker(st.Drain.StartedAt, row.Epoch, s.now(), s.liveness()))
	}
	var reps []replicaRow
	if err := tx.SelectContext(ctx, &reps, `SELECT `+replicaColumns+` FROM replicas ORDER BY id`); err != nil {
		return nil, err
	}
	st.Replicas = replicasOf(reps)
	return st, nil
}

// selectBlockers reads the first limit sessions by id that block the
// drain of epoch, and satisfy where (" AND …" with args; may be empty):
// those of sessions_drain_blocking and those written before the drain
// (blocker reads them as not ready: nothing since the start counts),
// merged.
func (s *Store) selectBlockers(ctx context.Context, tx *sqlx.Tx, epoch int64, where string, args []any, limit int) ([]blockerRow, error) {
	var rows, before []blockerRow
	if err := tx.SelectContext(ctx, &rows, tx.Rebind(`SELECT `+blockerColumns+` FROM `+s.blocking()+` WHERE `+blockingWhere+where+
		` ORDER BY id LIMIT ?`), append(slices.Clone(args), limit)...); err != nil {
		return nil, err
	}
	if err := tx.SelectContext(ctx, &before, tx.Rebind(`SELECT `+blockerColumns+` FROM `+s.writtenBefore()+` WHERE `+onlyWrittenBefore+where+
		` ORDER BY id LIMIT ?`), append(append([]any{epoch}, args...), limit)...); err != nil {
		return nil, err
	}
	rows = append(rows, before...)
	slices.SortFunc(rows, func(a, b blockerRow) int { return strings.Compare(a.ID, b.ID) })
	return rows[:min(len(rows), limit)], nil
}

// countBlocking sums, from session_counts, the active sessions and those
// of sessions_drain_blocking (blockingWhere: the counts' key holds
// validity and drain_ready, migration 00036).
const countBlocking = `SELECT COALESCE(SUM(n), 0) AS active,
    COALESCE(SUM(CASE WHEN NOT drain_ready OR validity <> 'valid' THEN n ELSE 0 END), 0) AS blocking FROM session_counts`

// countDrain counts the active sessions and those that block the drain of
// epoch: the rows of sessions_drain_blocking from the counts kept by
// triggers, whatever their number, and the sessions written before the
// drain over their index (as many as the reset pass has left: all of them
// right after the start, none seconds later).
func (s *Store) countDrain(ctx context.Context, tx *sqlx.Tx, epoch int64) (c checkpointd.DrainCounts, err error) {
	var sums struct {
		Active   int64 `db:"active"`
		Blocking int64 `db:"blocking"`
	}
	if err := tx.GetContext(ctx, &sums, countBlocking); err != nil {
		return c, err
	}
	c.Active, c.Blocking = sums.Active, sums.Blocking
	var before int64
	if err := tx.GetContext(ctx, &before, tx.Rebind(countWrittenBefore(s.writtenBefore())), epoch); err != nil {
		return c, err
	}
	c.Blocking += before
	c.Ready = c.Active - c.Blocking
	return c, nil
}

// DrainUnverified returns up to limit active sessions that block the
// running drain only because they are unverified: what reconcile can clear
// before the gate decides. None while no drain runs: asking the forge then
// would cost a pass for a decision that is not made (the completion
// answers not found, or with the completed drain). Errors:
// ErrStoreUnavailable.
func (s *Store) DrainUnverified(ctx context.Context, limit int) ([]string, error) {
	var running int
	if err := s.rdb.GetContext(ctx, &running, `SELECT COUNT(*) FROM drains WHERE is_open = 1 AND state = 'running'`); err != nil {
		return nil, s.classify(err)
	}
	if running == 0 {
		return nil, nil
	}
	var ids []string
	if err := s.rdb.SelectContext(ctx, &ids, s.rdb.Rebind(`SELECT id FROM `+s.blocking()+` WHERE `+blockingWhere+`
AND drain_ready AND validity = 'unverified' ORDER BY id LIMIT ?`), limit); err != nil {
		return nil, s.classify(err)
	}
	return ids, nil
}

// selectIn runs q, whose IN (?) takes a list, with sqlx.In. The chunks are
// explicit id lists: given a subquery instead, PostgreSQL hashes the whole
// sessions table for every chunk.
func selectIn(ctx context.Context, tx sqlx.ExtContext, dest any, q string, args ...any) error {
	q, args, err := sqlx.In(q, args...)
	if err != nil {
		return err
	}
	return sqlx.SelectContext(ctx, tx, dest, tx.Rebind(q), args...)
}

// execIn runs q, whose IN (?) takes a list, and returns how many rows it
// changed.
func execIn(ctx context.Context, tx sqlx.ExtContext, q string, args ...any) (int64, error) {
	q, args, err := sqlx.In(q, args...)
	if err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, tx.Rebind(q), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}
