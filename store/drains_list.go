package store

import (
	"context"

	"github.com/checkpointd/checkpointd"
)

// ListDrains lists drains newest first (by id, which sorts by start),
// before the id of the last drain of the previous page. Errors:
// ErrStoreUnavailable (also for a drain whose decision cannot be read).
func (s *Store) ListDrains(ctx context.Context, before string, limit int) ([]checkpointd.Drain, error) {
	q := `SELECT ` + drainColumns + ` FROM drains`
	args := []any{}
	if before != "" {
		q += ` WHERE id < ?`
		args = append(args, before)
	}
	q += ` ORDER BY id DESC LIMIT ?`
	args = append(args, limit)
	var rows []drainRow
	if err := s.rdb.SelectContext(ctx, &rows, s.rdb.Rebind(q), args...); err != nil {
		return nil, s.classify(err)
	}
	out := make([]checkpointd.Drain, 0, len(rows))
	for i := range rows {
		d, err := rows[i].drain()
		if err != nil {
			return nil, err
		}
		out = append(out, *d)
	}
	return out, nil
}
