package store

import (
	"cmp"
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/checkpointd/checkpointd"
)

// The replicas table is how a drain completion learns, across replicas and
// restarts, that no replica keeps a failed checkpoint write the store has
// not recorded (writefail keeps them). Times are each replica's
// own clock: only the confirmation numbers are compared.

const replicaColumns = `id, host, pid, version, started_at, heard_at, confirmed, pending, unknown`

type replicaRow struct {
	ID        string `db:"id"`
	Host      string `db:"host"`
	PID       int64  `db:"pid"`
	Version   string `db:"version"`
	StartedAt int64  `db:"started_at"`
	HeardAt   int64  `db:"heard_at"`
	Confirmed int64  `db:"confirmed"`
	Pending   int64  `db:"pending"`
	Unknown   string `db:"unknown"`
}

func (r replicaRow) replica() checkpointd.Replica {
	return checkpointd.Replica{ID: r.ID, Host: r.Host, PID: int(r.PID), Version: r.Version, StartedAt: fromMicros(r.StartedAt),
		HeardAt: fromMicros(r.HeardAt), Confirmed: r.Confirmed, Pending: int(r.Pending), Unknown: checkpointd.ReplicaReason(r.Unknown)}
}

// announceReplica keeps an unknown journal the replica reported before:
// only an operator's override forgets it. A start answers no confirmation
// request yet.
const announceReplica = `INSERT INTO replicas (` + replicaColumns + `) VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?)
ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, version = excluded.version,
    started_at = excluded.started_at, heard_at = excluded.heard_at, confirmed = 0, pending = excluded.pending,
    unknown = CASE WHEN excluded.unknown <> '' THEN excluded.unknown ELSE replicas.unknown END`

// AnnounceReplica registers r as serving the database (again, when its id
// is known: a restart). Errors: ErrStoreUnavailable.
func (s *Store) AnnounceReplica(ctx context.Context, r checkpointd.Replica) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(announceReplica), r.ID, r.Host, r.PID, r.Version, micros(r.StartedAt),
			micros(s.now()), r.Pending, string(r.Unknown))
		return err
	})
}

// ReportReplica records that replica id is alive and keeps pending failed
// writes; a confirmed above the one recorded answers that confirmation
// request (the replica then kept nothing). Errors: ErrNotFound (the
// replica is not registered: an override forgot it, so it announces itself
// again), ErrStoreUnavailable.
func (s *Store) ReportReplica(ctx context.Context, id string, pending int, confirmed int64) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, tx.Rebind(`UPDATE replicas SET heard_at = ?, pending = ?,
    confirmed = CASE WHEN confirmed < ? THEN ? ELSE confirmed END WHERE id = ?`), micros(s.now()), pending, confirmed, confirmed, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmp.Or(err, fmt.Errorf("replica %s is not registered: %w", id, checkpointd.ErrNotFound))
		}
		return nil
	})
}

// LeaveReplica forgets replica id as it stops with nothing kept. A replica
// whose journal was unknown stays: what it lost is still unknown.
// Errors: ErrStoreUnavailable.
func (s *Store) LeaveReplica(ctx context.Context, id string) error {
	return s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, tx.Rebind(`DELETE FROM replicas WHERE id = ? AND unknown = ''`), id)
		return err
	})
}

// RequestConfirmations opens a confirmation request and returns its number:
// every replica answers it by confirming it keeps nothing unrecorded.
// Errors: ErrStoreUnavailable.
func (s *Store) RequestConfirmations(ctx context.Context) (int64, error) {
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sqlx.Tx) error {
		return tx.GetContext(ctx, &n, `UPDATE drain_barrier SET request = request + 1 WHERE id = 1 RETURNING request`)
	})
	return n, err
}

// ConfirmationRequest returns the number of the latest confirmation
// request. Errors: ErrStoreUnavailable.
func (s *Store) ConfirmationRequest(ctx context.Context) (int64, error) {
	var n int64
	err := s.rdb.GetContext(ctx, &n, `SELECT request FROM drain_barrier WHERE id = 1`)
	return n, s.classify(err)
}

// Replicas returns every registered replica by id. Errors:
// ErrStoreUnavailable.
func (s *Store) Replicas(ctx context.Context) ([]checkpointd.Replica, error) {
	var rows []replicaRow
	if err := s.rdb.SelectContext(ctx, &rows, `SELECT `+replicaColumns+` FROM replicas ORDER BY id`); err != nil {
		return nil, s.classify(err)
	}
	return replicasOf(rows), nil
}

func replicasOf(rows []replicaRow) []checkpointd.Replica {
	out := make([]checkpointd.Replica, len(rows))
	for i, r := range rows {
		out[i] = r.replica()
	}
	return out
}

// unconfirmedReplicas reads, inside a decision, the replicas that did not
// answer confirmation request (checkpointd.ReplicaBlocks).
func unconfirmedReplicas(ctx context.Context, tx *sqlx.Tx, request int64) ([]checkpointd.UnconfirmedReplica, error) {
	var rows []replicaRow
	if err := tx.SelectContext(ctx, &rows, `SELECT `+replicaColumns+` FROM replicas ORDER BY id`); err != nil {
		return nil, err
	}
	var out []checkpointd.UnconfirmedReplica
	for _, r := range replicasOf(rows) {
		if u, blocks := checkpointd.ReplicaBlocks(r, request); blocks {
			out = append(out, u)
		}
	}
	return out, nil
}
