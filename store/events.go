package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

const insertEventSQL = `INSERT INTO events (session_id, seq, at, kind, run_id, data) VALUES (?, ?, ?, ?, ?, ?)`

// insertEvent appends one event at a seq the caller reserved on the session
// row in the same transaction (sessions.event_seq), so events of a session
// never collide and a state change is never committed without its event.
func insertEvent(ctx context.Context, tx *sqlx.Tx, sessionID string, seq int64, at time.Time, kind, runID string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, tx.Rebind(insertEventSQL), sessionID, seq, micros(at), kind, runID, string(b))
	return err
}

type eventRow struct {
	SessionID string `db:"session_id"`
	Seq       int64  `db:"seq"`
	At        int64  `db:"at"`
	Kind      string `db:"kind"`
	RunID     string `db:"run_id"`
	Data      string `db:"data"`
}

const selectEvents = `
SELECT session_id, seq, at, kind, run_id, data FROM events
WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`

// ListEvents returns a session's events with seq > after, oldest first.
// Errors: checkpointd.ErrNotFound (no such session), ErrStoreUnavailable.
func (s *Store) ListEvents(ctx context.Context, sessionID string, after int64, limit int) ([]checkpointd.Event, error) {
	if err := s.sessionExists(ctx, sessionID); err != nil {
		return nil, err
	}
	var rows []eventRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(selectEvents), sessionID, after, limit); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.Event, len(rows))
	for i, r := range rows {
		out[i] = checkpointd.Event{SessionID: r.SessionID, Seq: r.Seq, At: fromMicros(r.At), Kind: r.Kind,
			RunID: r.RunID, Data: json.RawMessage(r.Data)}
	}
	return out, nil
}

// sessionExists answers ErrNotFound for an unknown session, so that an empty
// list is never mistaken for a missing session.
func (s *Store) sessionExists(ctx context.Context, id string) error {
	var n int
	if err := s.rdb.GetContext(ctx, &n, s.rdb.Rebind(`SELECT COUNT(*) FROM sessions WHERE id = ?`), id); err != nil {
		return s.classify(err)
	}
	if n == 0 {
		return checkpointd.ErrNotFound
	}
	return nil
}

// appendEvent reserves the session's next event seq and appends the event,
// in the caller's transaction. The reserving update also locks the session
// row, so events of one session are written one at a time.
func appendEvent(ctx context.Context, tx *sqlx.Tx, sessionID string, at time.Time, kind, runID string, data any) error {
	var seq int64
	if err := tx.QueryRowxContext(ctx, tx.Rebind(`UPDATE sessions SET event_seq = event_seq + 1 WHERE id = ? RETURNING event_seq`), sessionID).Scan(&seq); err != nil {
		return err
	}
	return insertEvent(ctx, tx, sessionID, seq, at, kind, runID, data)
}
