package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// Retention is the policy that bounds the store's growth (DESIGN §10;
// docs/retention.md). A zero age disables its rule; see DefaultRetention
// for the defaults the daemon runs with.
type Retention struct {
	// KeepCheckpoints is how many of each session's latest checkpoints are
	// kept whatever their age (0: keep every checkpoint). Older ones are
	// kept too while an event in the log refers to them (a validity change
	// or a drain decision).
	KeepCheckpoints int
	// EndedSessionAge prunes a session that ended longer ago than this,
	// with everything it owns, to a tombstone of kind pruned. Active
	// sessions are never pruned.
	EndedSessionAge time.Duration
	// EventAge prunes events older than this, of every session. Event seqs
	// live on the session row, so a session's numbering continues after.
	EventAge time.Duration
	// DeliveryAge prunes webhook delivery records (the dedup memory) older
	// than this.
	DeliveryAge time.Duration
	// Batch bounds the rows one transaction selects and deletes (default
	// 500); ended sessions go Batch/10 at a time (at least one), since each
	// takes its checkpoints, events, runs and leases along.
	Batch int
}

// Default retention settings.
const (
	DefaultKeepCheckpoints = 100
	DefaultEndedSessionAge = 30 * 24 * time.Hour
	DefaultEventAge        = 90 * 24 * time.Hour
	DefaultDeliveryAge     = 14 * 24 * time.Hour
	DefaultRetentionBatch  = 500
)

// DefaultRetention is the policy the daemon applies unless configured
// otherwise.
func DefaultRetention() Retention {
	return Retention{KeepCheckpoints: DefaultKeepCheckpoints, EndedSessionAge: DefaultEndedSessionAge,
		EventAge: DefaultEventAge, DeliveryAge: DefaultDeliveryAge, Batch: DefaultRetentionBatch}
}

// Validate rejects a policy with negative settings. Errors: ErrInvalidRequest.
func (p Retention) Validate() error {
	if p.KeepCheckpoints < 0 || p.EndedSessionAge < 0 || p.EventAge < 0 || p.DeliveryAge < 0 || p.Batch < 0 {
		return fmt.Errorf("%w: retention settings must not be negative", checkpointd.ErrInvalidRequest)
	}
	return nil
}

// RetentionCounts says what one retention pass removed.
type RetentionCounts struct {
	Checkpoints int64 `json:"checkpoints"`
	Sessions    int64 `json:"sessions"`
	Events      int64 `json:"events"`
	Deliveries  int64 `json:"deliveries"`
	// Batches is how many transactions removed something.
	Batches int64 `json:"batches"`
}

// Total is the number of rows the pass removed (a pruned session counts
// once, not with what it owned).
func (c RetentionCounts) Total() int64 { return c.Checkpoints + c.Sessions + c.Events + c.Deliveries }

// ApplyRetention runs one retention pass: ended sessions past their age
// become tombstones, then old events and deliveries go, then checkpoints
// beyond each session's latest KeepCheckpoints that no event refers to.
// Each batch is its own short transaction, so a pass never holds the write
// lock for long; a pass stopped between batches (ctx) leaves a consistent
// store, and the next pass goes on. It is safe to run in several replicas
// at once: every delete re-checks its condition. Errors: ErrInvalidRequest
// (the policy), ErrStoreUnavailable, ctx's error.
func (s *Store) ApplyRetention(ctx context.Context, p Retention) (RetentionCounts, error) {
	var c RetentionCounts
	if err := p.Validate(); err != nil {
		return c, err
	}
	if p.Batch == 0 {
		p.Batch = DefaultRetentionBatch
	}
	now := s.now()
	steps := []struct {
		on    bool
		count *int64
		batch func(ctx context.Context, cur *cursor) (int64, bool, error)
	}{
		{p.EndedSessionAge > 0, &c.Sessions, func(ctx context.Context, _ *cursor) (int64, bool, error) {
			return s.pruneEndedSessions(ctx, now, p.EndedSessionAge, max(1, p.Batch/10))
		}},
		{p.EventAge > 0, &c.Events, func(ctx context.Context, cur *cursor) (int64, bool, error) {
			return s.pruneEvents(ctx, cur, now.Add(-p.EventAge), p.Batch)
		}},
		{p.DeliveryAge > 0, &c.Deliveries, func(ctx context.Context, _ *cursor) (int64, bool, error) {
			return s.pruneDeliveries(ctx, now.Add(-p.DeliveryAge), p.Batch)
		}},
		{p.KeepCheckpoints > 0, &c.Checkpoints, func(ctx context.Context, cur *cursor) (int64, bool, error) {
			return s.pruneCheckpoints(ctx, cur, int64(p.KeepCheckpoints), p.Batch)
		}},
	}
	for _, st := range steps {
		if !st.on {
			continue
		}
		var cur cursor
		for {
			if err := ctx.Err(); err != nil {
				return c, err
			}
			n, more, err := st.batch(ctx, &cur)
			*st.count += n
			if n > 0 {
				c.Batches++
			}
			if err != nil {
				return c, err
			}
			if !more {
				break
			}
		}
	}
	return c, nil
}

// RetentionFirstPassDelay bounds how long after start RunRetention waits
// before its first pass: long enough to stay out of the reconnect burst of
// agents resuming after a restart, short enough that a daemon restarted
// more often than its interval still prunes.
const RetentionFirstPassDelay = 5 * time.Minute

// RunRetention applies p every interval until ctx ends; the first pass
// runs after the interval or RetentionFirstPassDelay, whichever is
// shorter. Errors are logged and the next tick tries again: a store outage
// must not stop the worker. It returns nil when ctx ends.
func (s *Store) RunRetention(ctx context.Context, p Retention, interval time.Duration) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if interval <= 0 {
		return fmt.Errorf("%w: the retention interval must be positive", checkpointd.ErrInvalidRequest)
	}
	for wait := min(interval, RetentionFirstPassDelay); ; wait = interval {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		start := time.Now()
		c, err := s.ApplyRetention(ctx, p)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			s.log.Warn("retention pass failed", slog.Any("err", err))
		}
		if c.Total() > 0 {
			s.log.Info("retention pass", slog.Int64("sessions", c.Sessions), slog.Int64("checkpoints", c.Checkpoints),
				slog.Int64("events", c.Events), slog.Int64("deliveries", c.Deliveries), slog.Int64("batches", c.Batches),
				slog.Duration("took", time.Since(start)))
		}
	}
}

// cursor walks a table in primary-key order across batches, so a pass reads
// each row once however many it keeps.
type cursor struct {
	sessionID string
	seq       int64
}

// keyPair is one (session_id, seq) row of checkpoints or events.
type keyPair struct {
	SessionID string `db:"session_id"`
	Seq       int64  `db:"seq"`
}

// pairsWhere matches exactly the listed rows.
func pairsWhere(rows []keyPair) (string, []any) {
	parts := make([]string, len(rows))
	args := make([]any, 0, 2*len(rows))
	for i, r := range rows {
		parts[i] = "(session_id = ? AND seq = ?)"
		args = append(args, r.SessionID, r.Seq)
	}
	return "(" + strings.Join(parts, " OR ") + ")", args
}

// afterCursor is the keyset condition past cur. It is a row-value
// comparison because PostgreSQL turns only that form into an index bound
// (Index Cond on the primary key); the equivalent OR form is a filter, so
// every batch would walk the index from its start. SQLite bounds its search
// by the row value too.
const afterCursor = `(session_id, seq) > (?, ?)`

// pruneCheckpoints deletes up to batch checkpoints that are neither among
// their session's latest keep nor referred to by an event. The candidates
// are read outside the transaction; the delete re-checks both conditions.
func (s *Store) pruneCheckpoints(ctx context.Context, cur *cursor, keep int64, batch int) (int64, bool, error) {
	const unreferenced = `NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = c.session_id AND e.checkpoint_seq = c.seq)`
	var rows []keyPair
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(`SELECT c.session_id, c.seq FROM checkpoints c
WHERE `+strings.ReplaceAll(afterCursor, "session_id", "c.session_id")+`
AND c.seq <= (SELECT s.checkpoint_seq FROM sessions s WHERE s.id = c.session_id) - ?
AND `+unreferenced+`
ORDER BY c.session_id, c.seq LIMIT ?`), cur.sessionID, cur.seq, keep, batch); err != nil {
		return 0, false, s.classify(err)
	}
	if len(rows) == 0 {
		return 0, false, nil
	}
	cur.sessionID, cur.seq = rows[len(rows)-1].SessionID, rows[len(rows)-1].Seq
	where, args := pairsWhere(rows)
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM checkpoints AS c WHERE `+where+`
AND c.seq <= (SELECT s.checkpoint_seq FROM sessions s WHERE s.id = c.session_id) - ?
AND `+unreferenced), append(args, keep)...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, len(rows) == batch, err
}

// pruneEvents deletes up to batch events older than before.
func (s *Store) pruneEvents(ctx context.Context, cur *cursor, before time.Time, batch int) (int64, bool, error) {
	var rows []keyPair
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(`SELECT session_id, seq FROM events
WHERE `+afterCursor+` AND at < ? ORDER BY session_id, seq LIMIT ?`),
		cur.sessionID, cur.seq, micros(before), batch); err != nil {
		return 0, false, s.classify(err)
	}
	if len(rows) == 0 {
		return 0, false, nil
	}
	cur.sessionID, cur.seq = rows[len(rows)-1].SessionID, rows[len(rows)-1].Seq
	where, args := pairsWhere(rows)
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM events WHERE `+where+` AND at < ?`), append(args, micros(before))...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, len(rows) == batch, err
}

// pruneDeliveries deletes up to batch delivery records received before
// before, oldest first.
func (s *Store) pruneDeliveries(ctx context.Context, before time.Time, batch int) (int64, bool, error) {
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM deliveries WHERE id IN (
SELECT id FROM deliveries WHERE received_at < ? ORDER BY received_at LIMIT ?)`), micros(before), batch)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, n == int64(batch), err
}

// pruneEndedSessions removes up to batch sessions that ended more than age
// before now, each with everything it owns, leaving tombstones of kind
// pruned.
func (s *Store) pruneEndedSessions(ctx context.Context, now time.Time, age time.Duration, batch int) (int64, bool, error) {
	before := now.Add(-age)
	var ids []string
	if err := s.rdb.SelectContext(ctx, &ids, s.rdb.Rebind(`SELECT id FROM sessions
WHERE state = 'ended' AND ended_at < ? ORDER BY ended_at, id LIMIT ?`), micros(before), batch); err != nil {
		return 0, false, s.classify(err)
	}
	if len(ids) == 0 {
		return 0, false, nil
	}
	reason := "ended more than " + age.String() + " before the retention pass"
	var n int64
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		victims, err := lockSessions(ctx, tx, `id IN (?) AND state = 'ended' AND ended_at < ?`, ids, micros(before))
		if err != nil || len(victims) == 0 {
			return err
		}
		ts, err := s.removeSessions(ctx, tx, victims, checkpointd.TombstonePruned, checkpointd.TombstoneRetention, reason, now)
		n = int64(len(ts))
		return err
	})
	if err != nil {
		n = 0
	}
	return n, len(ids) == batch, err
}
