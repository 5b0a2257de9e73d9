package store

import (
	"context"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
)

// recordVerdict records a session's new verdict (one checkpointd.Rejudge
// found changed from from), with its evidence in the event log. The same
// validity for another reason (a new session's first checkpoint: still
// unverified, but no longer for want of a checkpoint) only updates the
// explanation: it is no transition, and the event of the write that caused
// it is its record. The row changes only while it holds from, the verdict
// that was judged.
func recordVerdict(ctx context.Context, tx *sqlx.Tx, ch *changes, sessionID string, at time.Time, from, to checkpointd.Verdict, evidence map[string]any) error {
	if from.Validity == to.Validity {
		_, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET validity_reason = ?
WHERE id = ? AND validity = ? AND validity_reason <> ?`), to.Reason, sessionID, string(to.Validity), to.Reason)
		return err
	}
	res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE sessions SET validity = ?, validity_reason = ?, validity_at = ? WHERE id = ? AND validity = ?`),
		string(to.Validity), to.Reason, micros(at), sessionID, string(from.Validity))
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	ch.validityMoved(to.Validity, 1)
	data := map[string]any{"from": from.Validity, "to": to.Validity, "reason": to.Reason}
	for k, v := range evidence {
		data[k] = v
	}
	return appendCheckpointEvent(ctx, tx, sessionID, at, checkpointd.EventValidity, data)
}

// setValidityMany moves many sessions from one validity to another (the
// verdict Rejudge gave each of them) with one statement per chunk and one
// multi-row event insert: a push can touch a thousand sessions and must
// still answer Gitea within its timeout. A row that no longer holds from
// is left alone.
func setValidityMany(ctx context.Context, tx *sqlx.Tx, ch *changes, ids []string, at time.Time, from, to checkpointd.Validity, reason string, evidence map[string]any) error {
	data := map[string]any{"from": from, "to": to, "reason": reason}
	for k, v := range evidence {
		data[k] = v
	}
	payload, err := jsonMarshal(data)
	if err != nil {
		return err
	}
	if tx.DriverName() == "postgres" {
		return setValidityManyPG(ctx, tx, ch, ids, at, from, to, reason, payload)
	}
	const chunk = 500
	for len(ids) > 0 {
		n := min(chunk, len(ids))
		part := ids[:n]
		ids = ids[n:]
		q, args, err := sqlx.In(`UPDATE sessions SET validity = ?, validity_reason = ?, validity_at = ?, event_seq = event_seq + 1
WHERE id IN (?) AND validity = ? RETURNING id, event_seq, checkpoint_seq`, string(to), reason, micros(at), part, string(from))
		if err != nil {
			return err
		}
		var seqs []struct {
			ID    string `db:"id"`
			Seq   int64  `db:"event_seq"`
			CkSeq int64  `db:"checkpoint_seq"`
		}
		if err := tx.SelectContext(ctx, &seqs, tx.Rebind(q), args...); err != nil {
			return err
		}
		if len(seqs) == 0 {
			continue
		}
		if from != to { // a new reason for the same validity is no transition
			ch.validityMoved(to, len(seqs))
		}
		values := make([]string, len(seqs))
		eargs := make([]any, 0, len(seqs)*7)
		for i, r := range seqs {
			values[i] = "(?, ?, ?, ?, ?, ?, ?)"
			eargs = append(eargs, r.ID, r.Seq, micros(at), checkpointd.EventValidity, "", payload, nullIfZero(r.CkSeq))
		}
		if _, err := tx.ExecContext(ctx, tx.Rebind(`INSERT INTO events (session_id, seq, at, kind, run_id, data, checkpoint_seq) VALUES `+strings.Join(values, ", ")), eargs...); err != nil {
			return err
		}
	}
	return nil
}

// setValidityManyPG is setValidityMany in one statement for any number of
// sessions: the events are made from the updated rows inside the server,
// so a thousand of them cost no parameters and no round trips.
func setValidityManyPG(ctx context.Context, tx *sqlx.Tx, ch *changes, ids []string, at time.Time, from, to checkpointd.Validity, reason, payload string) error {
	var n int
	err := tx.QueryRowxContext(ctx, `WITH moved AS (
    UPDATE sessions SET validity = $1, validity_reason = $2, validity_at = $3, event_seq = event_seq + 1
    WHERE id = ANY($4) AND validity = $7 RETURNING id, event_seq, checkpoint_seq
), logged AS (
    INSERT INTO events (session_id, seq, at, kind, run_id, data, checkpoint_seq)
    SELECT id, event_seq, $3, $5, '', $6, NULLIF(checkpoint_seq, 0) FROM moved RETURNING 1
)
SELECT COUNT(*) FROM logged`, string(to), reason, micros(at), pq.Array(ids), checkpointd.EventValidity, payload, string(from)).Scan(&n)
	if err != nil {
		return err
	}
	if from != to { // a new reason for the same validity is no transition
		ch.validityMoved(to, n)
	}
	return nil
}
