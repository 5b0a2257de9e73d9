package store

import (
	"context"
	"log/slog"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// resetChunk is how many sessions one reset transaction takes: each is
// locked for a few milliseconds, not all of them for seconds.
const resetChunk = 1000

// ResetWrittenBefore sets drain_ready false on the sessions that block the
// running drain only because they wrote nothing since it started
// (writtenBeforeWhere), a chunk per transaction, until none is left; it
// returns how many it reset. It changes no answer — those sessions block
// either way (countDrain, selectBlockers) — but afterwards they are found
// in sessions_drain_blocking, and the range the gate reads through
// sessions_written_before is empty again. Each chunk checks the rows again
// under their locks, so a session that wrote since it was found keeps its
// readiness. Nothing is done while no drain runs, and it stops when the
// drain it started for ends. Errors:
// ErrStoreUnavailable.
func (s *Store) ResetWrittenBefore(ctx context.Context) (int, error) {
	row, err := openDrain(ctx, s.rdb)
	if err != nil {
		return 0, s.classify(err)
	}
	if row == nil || row.State != string(checkpointd.DrainRunning) {
		return 0, nil
	}
	total := 0
	for {
		var ids []string
		if err := s.rdb.SelectContext(ctx, &ids, s.rdb.Rebind(selectWrittenBefore(s.writtenBefore())), row.Epoch, resetChunk); err != nil {
			return total, s.classify(err)
		}
		if len(ids) == 0 {
			s.analyzeAfterReset(ctx, total)
			return total, nil
		}
		slices.Sort(ids)
		var n int64
		stopped := false
		err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
			// A drain cancelled (or completed) meanwhile needs no more.
			cur, err := openDrain(ctx, tx)
			if err != nil {
				return err
			}
			if stopped = cur == nil || cur.ID != row.ID || cur.State != string(checkpointd.DrainRunning); stopped {
				return nil
			}
			if s.dialect == migrations.Postgres {
				// Locked in id order, as settles and completions lock
				// sessions: the UPDATE may visit them in any order.
				var locked []string
				if err := selectIn(ctx, tx, &locked, `SELECT id FROM sessions WHERE id IN (?) ORDER BY id FOR UPDATE`, ids); err != nil {
					return err
				}
			}
			n, err = execIn(ctx, tx, `UPDATE sessions SET drain_ready = FALSE WHERE id IN (?) AND `+writtenBeforeWhere, ids, row.Epoch)
			return err
		})
		if err != nil || stopped {
			return total, err
		}
		total += int(n)
	}
}

// analyzeAfterReset has PostgreSQL analyze sessions once a reset moved as
// many sessions as autovacuum's analyze threshold at its defaults (50 and
// a tenth of the active ones). Until the statistics are fresh the planner
// takes every reset session for one written before the drain, and reads
// the emptied range of sessions_written_before by scanning the table: the
// drain status and each decision cost 110 ms at 100k instead of 4, for as
// long as autovacuum's next analyze takes to come (a minute and more, or
// never with autovacuum off). The reset's answer does not depend on it, so
// a failure is only logged; a lock held elsewhere (a vacuum of the table)
// is waited for briefly, and the analysis left to autovacuum.
func (s *Store) analyzeAfterReset(ctx context.Context, reset int) {
	if s.dialect != migrations.Postgres || reset == 0 {
		return
	}
	var active int64
	if err := s.rdb.GetContext(ctx, &active, `SELECT COALESCE(SUM(n), 0) FROM session_counts`); err != nil {
		s.log.Warn("drain: reading the active sessions to decide on analyzing them failed", slog.String("err", err.Error()))
		return
	}
	if int64(reset) < 50+active/10 {
		return
	}
	start := time.Now()
	err := func() error {
		tx, err := s.wdb.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, `SET LOCAL lock_timeout = '2s'`); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `ANALYZE sessions`); err != nil {
			return err
		}
		return tx.Commit()
	}()
	if err != nil {
		s.log.Warn("drain: analyzing the sessions after resetting them failed; the drain status reads them slower until autovacuum analyzes",
			slog.Int("reset", reset), slog.String("err", err.Error()))
		return
	}
	s.log.Info("drain: sessions analyzed after the reset", slog.Int("reset", reset), slog.Duration("took", time.Since(start)))
}

// resetEvery is how often RunResetWrittenBefore looks for a drain whose
// sessions are left to reset: one indexed read of the drain row and one of
// an empty index range while nothing is left.
const resetEvery = time.Second

// RunResetWrittenBefore runs ResetWrittenBefore every second until ctx
// ends. Run it under RunExclusive: one replica resets.
func (s *Store) RunResetWrittenBefore(ctx context.Context) error {
	return every(ctx, resetEvery, func(ctx context.Context) {
		start := time.Now()
		n, err := s.ResetWrittenBefore(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("drain: resetting the sessions written before the drain failed; they block it meanwhile, and the next pass resumes",
				slog.String("err", err.Error()))
		}
		if n > 0 {
			s.log.Info("drain: sessions written before the drain reset", slog.Int("count", n), slog.Duration("took", time.Since(start)))
		}
	})
}
