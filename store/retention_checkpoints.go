package store

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"
)

// The checkpoint step is driven by sessions, not by the checkpoints table:
// each session row carries checkpoints_pruned_through, the seq up to which
// retention has gone through its checkpoints (every checkpoint at or below
// it is gone, or an event referred to it when retention passed it). A pass
// visits only sessions with checkpoints beyond their latest keep that it
// has not gone through yet (checkpoint_seq - keep > the mark), deletes the
// unreferenced ones in that range and advances the mark. A pass with
// nothing to prune reads the sessions and no checkpoint.
//
// A checkpoint kept because an event referred to it is reconsidered when
// that event is pruned: pruneEvents moves the mark back below it.

// sessionCursor walks sessions in id order across batches.
type sessionCursor struct {
	id string
	// inside: the last batch stopped inside session id, so the next one
	// starts with it again (its mark says where).
	inside bool
}

// pruneCandidate is a session with checkpoints to go through.
type pruneCandidate struct {
	ID            string `db:"id"`
	CheckpointSeq int64  `db:"checkpoint_seq"`
	PrunedThrough int64  `db:"checkpoints_pruned_through"`
}

// selectPruneCandidates walks the sessions' primary key from the cursor.
// "id >= ?" resumes inside a session, "id > ?" past it.
const selectPruneCandidates = `SELECT id, checkpoint_seq, checkpoints_pruned_through FROM sessions
WHERE id %s ? AND checkpoint_seq - checkpoints_pruned_through > ? ORDER BY id LIMIT ?`

// selectPruneRange lists the first checkpoints of a session's range, to
// end a batch inside a range that holds more than the batch.
const selectPruneRange = `SELECT seq FROM checkpoints
WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?`

// claimPruneRange advances a session's mark if it is still where the
// candidate read it. It takes the session's row lock before the delete, so
// an events batch that removes a reference in this range either committed
// before (the delete sees the reference gone) or waits and moves the mark
// back after (pruneEvents).
const claimPruneRange = `UPDATE sessions SET checkpoints_pruned_through = ?
WHERE id = ? AND checkpoints_pruned_through = ?`

// deletePruneRange deletes a session's checkpoints in (from, through] that
// are beyond its latest keep and that no event refers to, re-checking both
// inside the transaction.
const deletePruneRange = `DELETE FROM checkpoints AS c
WHERE c.session_id = ? AND c.seq > ? AND c.seq <= ?
AND c.seq <= (SELECT s.checkpoint_seq FROM sessions s WHERE s.id = c.session_id) - ?
AND NOT EXISTS (SELECT 1 FROM events e WHERE e.session_id = c.session_id AND e.checkpoint_seq = c.seq)`

// pruneCheckpoints goes through up to batch sessions after cur in one
// transaction, examining at most about batch checkpoints: a session whose
// range holds more stops the batch at the batch-th checkpoint, with its
// mark there, and the next batch resumes inside it. It returns what it
// deleted, how many sessions it visited and whether there may be more.
func (s *Store) pruneCheckpoints(ctx context.Context, cur *sessionCursor, keep int64, batch int) (n, visited int64, more bool, err error) {
	op := ">"
	if cur.inside {
		op = ">="
	}
	var cands []pruneCandidate
	if err := s.rdb.SelectContext(ctx, &cands, s.rdb.Rebind(fmt.Sprintf(selectPruneCandidates, op)), cur.id, keep, batch); err != nil {
		return 0, 0, false, s.classify(err)
	}
	if len(cands) == 0 {
		return 0, 0, false, nil
	}
	var next sessionCursor
	err = s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		n, visited, next = 0, 0, *cur
		budget := int64(batch)
		for _, c := range cands {
			if budget <= 0 {
				break
			}
			upto := c.CheckpointSeq - keep
			through, width := upto, upto-c.PrunedThrough
			if width > budget {
				// The range may hold more than the budget: find where the
				// budget ends, reading no more than it.
				var seqs []int64
				if err := tx.SelectContext(ctx, &seqs, tx.Rebind(selectPruneRange), c.ID, c.PrunedThrough, upto, budget); err != nil {
					return err
				}
				width = int64(len(seqs))
				if width == budget {
					through = seqs[len(seqs)-1]
				}
			}
			budget -= width
			next = sessionCursor{id: c.ID, inside: through < upto}
			res, err := tx.ExecContext(ctx, tx.Rebind(claimPruneRange), through, c.ID, c.PrunedThrough)
			if err != nil {
				return err
			}
			if claimed, err := res.RowsAffected(); err != nil || claimed == 0 {
				// Moved since the read (pruned events set it back, or
				// another pass went on): the next pass sees it again.
				next.inside = false
				if err != nil {
					return err
				}
				continue
			}
			visited++
			res, err = tx.ExecContext(ctx, tx.Rebind(deletePruneRange), c.ID, c.PrunedThrough, through, keep)
			if err != nil {
				return err
			}
			d, err := res.RowsAffected()
			if err != nil {
				return err
			}
			n += d
			if next.inside {
				break
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, false, err
	}
	more = next.inside || next.id != cands[len(cands)-1].ID || len(cands) == batch
	*cur = next
	return n, visited, more, nil
}
