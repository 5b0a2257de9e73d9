package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"strings"
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
	SessionID     string        `db:"session_id"`
	Seq           int64         `db:"seq"`
	At            int64         `db:"at"`
	Kind          string        `db:"kind"`
	RunID         string        `db:"run_id"`
	Data          string        `db:"data"`
	CheckpointSeq sql.NullInt64 `db:"checkpoint_seq"`
}

const selectEvents = `
SELECT session_id, seq, at, kind, run_id, data, checkpoint_seq FROM events
WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?`

// ListEvents returns a session's events with seq > after, oldest first.
// Errors: checkpointd.ErrNotFound (no such session), ErrGone (cleared or
// pruned), ErrStoreUnavailable.
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
		if r.CheckpointSeq.Valid {
			out[i].CheckpointSeq = &r.CheckpointSeq.Int64
		}
	}
	return out, nil
}

// sessionExists answers ErrNotFound for an unknown session (ErrGone for a
// cleared or pruned one), so that an empty list is never mistaken for a
// missing session.
func (s *Store) sessionExists(ctx context.Context, id string) error {
	var n int
	if err := s.rdb.GetContext(ctx, &n, s.rdb.Rebind(`SELECT COUNT(*) FROM sessions WHERE id = ?`), id); err != nil {
		return s.classify(err)
	}
	if n == 0 {
		return s.classify(notFoundOrGone(ctx, s.rdb, id))
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

// appendCheckpointEvent is appendEvent for an event that refers to the
// session's latest checkpoint (a validity change): the event records its
// seq, and retention keeps that checkpoint while the event is kept.
func appendCheckpointEvent(ctx context.Context, tx *sqlx.Tx, sessionID string, at time.Time, kind string, data any) error {
	var seq, ck int64
	if err := tx.QueryRowxContext(ctx, tx.Rebind(`UPDATE sessions SET event_seq = event_seq + 1 WHERE id = ?
RETURNING event_seq, checkpoint_seq`), sessionID).Scan(&seq, &ck); err != nil {
		return err
	}
	return insertEvents(ctx, tx, at, []eventInsert{{sessionID: sessionID, seq: seq, kind: kind, data: data, checkpointSeq: ck}})
}

// eventInsert is one event at a seq already reserved on its session row.
type eventInsert struct {
	sessionID string
	seq       int64
	kind      string
	runID     string
	data      any
	// checkpointSeq is the checkpoint the event refers to (0: none).
	checkpointSeq int64
}

// insertEvents appends events with multi-row inserts: a drain decision may
// concern every active session.
func insertEvents(ctx context.Context, tx *sqlx.Tx, at time.Time, evs []eventInsert) error {
	const chunk = 500
	for len(evs) > 0 {
		part := evs[:min(chunk, len(evs))]
		evs = evs[len(part):]
		values := make([]string, len(part))
		args := make([]any, 0, len(part)*7)
		for i, e := range part {
			data, err := jsonMarshal(e.data)
			if err != nil {
				return err
			}
			values[i] = "(?, ?, ?, ?, ?, ?, ?)"
			args = append(args, e.sessionID, e.seq, micros(at), e.kind, e.runID, data, nullIfZero(e.checkpointSeq))
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO events (session_id, seq, at, kind, run_id, data, checkpoint_seq) VALUES `+
			strings.Join(values, ", ")), args...); err != nil {
			return err
		}
	}
	return nil
}
