package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWriteFailureKeepsItsCause: when SQLite aborts the whole transaction
// for a job's error (SQLITE_FULL does), the batch's error is that cause,
// not the "no such savepoint" of the ROLLBACK TO that followed it, which
// used to hide "database or disk is full" from logs and answers.
func TestWriteFailureKeepsItsCause(t *testing.T) {
	ctx := t.Context()
	s := storetest.OpenURL(t, storetest.URL(t, storetest.SQLite), checkpointd.SystemClock{})
	sess := newSession(t, s, "owner/name")
	restore, err := store.LimitPages(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	defer restore()
	_, err = write(ctx, s, sess.ID, bigDoc(sess.CurrentRun, "implementing"))
	if !errors.Is(err, checkpointd.ErrStoreUnavailable) || !strings.Contains(err.Error(), "full") {
		t.Fatalf("write into a full database: %v; want ErrStoreUnavailable naming the full database", err)
	}
}
