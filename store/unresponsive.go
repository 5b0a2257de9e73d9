package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// Liveness is judged when read (liveness.go): nothing is written when a run
// crosses --run-liveness. The change feed reports it anyway: a background
// pass, on one replica at a time, appends one run.unresponsive event per
// run once it is unheard for the window, and does nothing else — a run
// reads as unresponsive, it is never acted on.

// unresponsiveBatch bounds the sessions one pass marks in a transaction.
const unresponsiveBatch = 200

// selectUnresponsive reads the candidates over sessions_unmarked_seen
// (migration 00032), oldest sighting first: a range of the runs not yet
// reported whose recorded sighting is before the cutoff, not a scan of
// every active session. SQLite is told the index (as with the drain's).
const selectUnresponsive = `SELECT id, current_run_id, run_seen_at, checkpoint_at FROM sessions%s
WHERE state = 'active' AND current_run_id <> '' AND unresponsive_run <> current_run_id
  AND run_seen_at < ? AND checkpoint_at < ?
ORDER BY run_seen_at, id LIMIT ?`

const markUnresponsive = `UPDATE sessions SET unresponsive_run = current_run_id, event_seq = event_seq + 1
WHERE id = ? AND state = 'active' AND current_run_id = ? AND unresponsive_run <> current_run_id
  AND run_seen_at < ? AND checkpoint_at < ?
RETURNING event_seq`

// MarkUnresponsive records a run.unresponsive event for every current run
// unheard for the liveness window that has none yet, and returns how many
// it recorded. Errors: ErrStoreUnavailable.
func (s *Store) MarkUnresponsive(ctx context.Context) (int, error) {
	total := 0
	for {
		now, window := s.now(), s.liveness()
		cutoff := micros(now.Add(-window))
		n := 0
		err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
			n = 0
			var rows []struct {
				ID           string `db:"id"`
				Run          string `db:"current_run_id"`
				SeenAt       int64  `db:"run_seen_at"`
				CheckpointAt int64  `db:"checkpoint_at"`
			}
			if err := tx.SelectContext(ctx, &rows, tx.Rebind(fmt.Sprintf(selectUnresponsive, s.unmarked())), cutoff, cutoff, unresponsiveBatch); err != nil {
				return err
			}
			for _, r := range rows {
				var seq int64
				err := tx.QueryRowxContext(ctx, tx.Rebind(markUnresponsive), r.ID, r.Run, cutoff, cutoff).Scan(&seq)
				if errors.Is(err, sql.ErrNoRows) {
					continue // heard from since the read (or superseded): nothing to report
				}
				if err != nil {
					return err
				}
				seen := fromMicros(max(r.SeenAt, r.CheckpointAt))
				if err := insertEvent(ctx, tx, r.ID, seq, now, checkpointd.EventRunUnresponsive, r.Run, map[string]any{
					"last_seen_at": seen, "window_seconds": int64(window / time.Second)}); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		total += n
		if err != nil || n < unresponsiveBatch {
			return total, err
		}
	}
}

func (s *Store) unmarked() string {
	if s.dialect == migrations.SQLite {
		return ` INDEXED BY sessions_unmarked_seen`
	}
	return ""
}

// RunUnresponsive runs MarkUnresponsive every tenth of the liveness window
// (at least every second, at most every minute) until ctx ends. Run it
// under RunExclusive: one replica marks.
func (s *Store) RunUnresponsive(ctx context.Context) error {
	return every(ctx, min(max(checkpointd.SeenRefresh(s.liveness()), time.Second), time.Minute), func(ctx context.Context) {
		n, err := s.MarkUnresponsive(ctx)
		if err != nil && ctx.Err() == nil {
			s.log.Warn("run liveness pass failed", slog.String("err", err.Error()))
		}
		if n > 0 {
			s.log.Info("runs unresponsive", slog.Int("count", n))
		}
	})
}
