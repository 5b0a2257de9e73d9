package store

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/migrations"
)

// errDrainRaced reports a session that stopped being ready between the
// first count and the count under the readiness lock, or a delivery not
// settled yet; the decision is taken again.
var errDrainRaced = fmt.Errorf("%w: sessions kept changing while the drain was being completed; try again", checkpointd.ErrStoreUnavailable)

// DrainCompletion is a request to complete the open drain.
type DrainCompletion struct {
	// By is the token that asks.
	By string
	// Limit bounds the blocking list of a blocked decision.
	Limit int
	// Request is the confirmation request (RequestConfirmations) every
	// registered replica must have answered: one that did not blocks.
	Request int64
	// Override names unconfirmed replicas the operator completes past:
	// recorded in the decision, and forgotten by a completion.
	Override []string
}

// CompleteDrain asks the gate to complete the open drain. It answers the
// drain with the decision taken: completed when no active session blocks it
// and every registered replica answered c.Request or was overridden (the
// drain is then completed), blocked otherwise, with the counts, the first
// c.Limit blocking sessions by id and the unconfirmed replicas. Either way the decision is stored on
// the drain. A completion keeps the sessions active at its commit with the
// latest checkpoint it read back of each (drain_vouches: vouchCut), which
// NoteDrainCompleted records in their logs after it committed; a blocked
// decision is recorded in every active session's log by
// NoteDrainBlocked. The caller runs either after it answered. A completion
// counts again under the readiness lock (PostgreSQL; SQLite's one writer),
// so no session that stopped being ready concurrently is passed. A
// completed drain is answered as it is.
// Errors: ErrNotFound (no open drain), ErrStoreUnavailable: no decision is
// taken from state that could not be read.
func (s *Store) CompleteDrain(ctx context.Context, c DrainCompletion) (*checkpointd.Drain, error) {
	raced, marked := 0, 0
	for {
		if err := s.Settled(ctx); err != nil {
			return nil, err
		}
		d, err := s.decideDrain(ctx, c)
		var unreadable *unreadableError
		switch {
		case errors.As(err, &unreadable) && marked < 3:
			// Those sessions block as unknown from now on: decide again.
			marked++
			if err := s.markUnreadable(ctx, unreadable.latest); err != nil {
				return nil, err
			}
			continue
		case errors.Is(err, errDrainRaced) && raced < 3:
			raced++
			continue
		}
		return d, err
	}
}

func (s *Store) decideDrain(ctx context.Context, c DrainCompletion) (*checkpointd.Drain, error) {
	now := s.now()
	var out *checkpointd.Drain
	err := s.change(ctx, CauseLease, func(ctx context.Context, tx *sqlx.Tx, ch *changes) error {
		// Locking the drain row serialises decisions and cancels of a drain.
		var row drainRow
		err := tx.GetContext(ctx, &row, `UPDATE drains SET decisions = decisions + 1
WHERE is_open = 1 AND state = 'running' RETURNING `+drainColumns)
		if errors.Is(err, sql.ErrNoRows) {
			cur, err := openDrain(ctx, tx)
			if err != nil {
				return err
			}
			if cur == nil {
				return fmt.Errorf("no drain is open: %w", checkpointd.ErrNotFound)
			}
			out, err = cur.drain()
			return err
		}
		if err != nil {
			return err
		}
		// A lease whose time ran out by now is lost now, though the reads
		// before the decision found it held a moment ago.
		if err := s.expireOverdue(ctx, tx, ch, now); err != nil {
			return err
		}
		start := fromMicros(row.StartedAt)
		dec := checkpointd.DrainDecision{At: now, By: c.By, Blocking: []checkpointd.DrainBlocker{}}
		counts, err := s.countDrain(ctx, tx, row.Epoch)
		if err != nil {
			return err
		}
		unconfirmed, err := unconfirmedReplicas(ctx, tx, c.Request)
		if err != nil {
			return err
		}
		for _, u := range unconfirmed {
			if slices.Contains(c.Override, u.ID) {
				dec.Overridden = append(dec.Overridden, u)
			} else {
				dec.Unconfirmed = append(dec.Unconfirmed, u)
			}
		}
		if counts.Blocking > 0 || len(dec.Unconfirmed) > 0 {
			// The blocking sessions' logs are told afterwards
			// (NoteDrainBlocked): the decision does not wait on 5k events.
			dec.Outcome, dec.Counts = checkpointd.DrainOutcomeBlocked, counts
			head, err := s.selectBlockers(ctx, tx, row.Epoch, "", nil, c.Limit)
			if err != nil {
				return err
			}
			for i := range head {
				dec.Blocking = append(dec.Blocking, head[i].blocker(start, row.Epoch, now, s.liveness()))
			}
		} else {
			// Nothing blocks. On PostgreSQL, wait for the changes that
			// made a ready session block and hold off the next ones to
			// this commit, and count again: what is counted then holds at
			// commit.
			if s.dialect == migrations.Postgres {
				if _, err := tx.ExecContext(ctx, lockReadiness, readinessLock); err != nil {
					return err
				}
				again, err := s.countDrain(ctx, tx, row.Epoch)
				if err != nil {
					return err
				}
				if again.Blocking > 0 {
					return errDrainRaced
				}
			}
			n, err := s.vouchCut(ctx, tx, row.Epoch)
			if err != nil {
				return err
			}
			// A delivery that committed before this point and whose
			// sessions are not re-judged yet may have made one of them
			// stale: settle it and decide again.
			if pending, err := unsettledBound(ctx, tx); err != nil || pending {
				return cmp.Or(err, errDrainRaced)
			}
			if err := forgetReplicas(ctx, tx, dec.Overridden); err != nil {
				return err
			}
			dec.Counts = checkpointd.DrainCounts{Active: n, Ready: n}
			dec.Outcome = checkpointd.DrainOutcomeCompleted
			row.State, row.EndedAt, row.EndedBy = string(checkpointd.DrainCompleted), sql.NullInt64{Int64: micros(now), Valid: true}, c.By
		}
		decJSON, err := jsonMarshal(dec)
		if err != nil {
			return err
		}
		row.Decision = decJSON
		if _, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE drains SET state = ?, ended_at = ?, ended_by = ?, decision = ? WHERE id = ?`),
			row.State, row.EndedAt, row.EndedBy, row.Decision, row.ID); err != nil {
			return err
		}
		out, err = row.drain()
		return err
	})
	return out, err
}

// decisionChunk is how many sessions a decision's notes record per
// statement: memory stays bounded however many sessions are active.
const decisionChunk = 1000

type completedEvent struct {
	DrainID string                   `json:"drain_id"`
	Outcome checkpointd.DrainOutcome `json:"outcome"`
	// CheckpointSeq is the checkpoint the completion vouched for: what
	// the session resumes from after the restart.
	CheckpointSeq int64 `json:"checkpoint_seq"`
}

// forgetReplicas drops the replicas a completion was told to pass: the
// operator vouched for them, and one that is alive announces itself again.
func forgetReplicas(ctx context.Context, tx *sqlx.Tx, rs []checkpointd.UnconfirmedReplica) error {
	for _, r := range rs {
		if _, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM replicas WHERE id = ?`), r.ID); err != nil {
			return err
		}
	}
	return nil
}
