package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
)

// TestRetryReason: contention is retried wherever it happens (the database
// refused the transaction, so nothing committed); a broken connection only
// before the commit, since a commit whose answer was lost may have landed;
// the transaction's own answers and cancellations never.
func TestRetryReason(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"deadlock", &pq.Error{Code: "40P01"}, RetryConflict},
		{"serialization failure", fmt.Errorf("update: %w", &pq.Error{Code: "40001"}), RetryConflict},
		{"lock timeout", &pq.Error{Code: "55P03"}, RetryConflict},
		{"serialization failure at the commit", commitError{&pq.Error{Code: "40001"}}, RetryConflict},
		{"ended by the server", &pq.Error{Code: "57P01"}, RetryConnection},
		{"connection failure", &pq.Error{Code: "08006"}, RetryConnection},
		{"dead pooled connection", driver.ErrBadConn, RetryConnection},
		{"closed connection", sql.ErrConnDone, RetryConnection},
		{"cut mid-read", io.ErrUnexpectedEOF, RetryConnection},
		{"cut at the commit", commitError{io.ErrUnexpectedEOF}, ""},
		{"ended at the commit", commitError{&pq.Error{Code: "57P01"}}, ""},
		{"unique violation", &pq.Error{Code: "23505"}, ""},
		{"disk full", &pq.Error{Code: "53100"}, ""},
		{"a domain answer", fmt.Errorf("%w: parked", checkpointd.ErrNoCurrentRun), ""},
		{"cancelled", errors.Join(io.EOF, context.Canceled), ""},
	} {
		if got := retryReason(c.err); got != c.want {
			t.Errorf("%s: retryReason(%v) = %q, want %q", c.name, c.err, got, c.want)
		}
	}
}
