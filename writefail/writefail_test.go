package writefail_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/writefail"
)

// world is a store with a running drain and one active session, a token
// that may write to it, and a journal path.
type world struct {
	s     *store.Store
	st    *away
	sess  *checkpointd.Session
	agent *checkpointd.Principal
	path  string
}

// away is the real store whose recording fails while down is set, as an
// unreachable store's does.
type away struct {
	*store.Store
	down atomic.Bool
}

var errAway = errors.New("the store cannot be reached")

func (a *away) RecordWriteFailure(ctx context.Context, f store.WriteFailure) (bool, error) {
	if a.down.Load() {
		return false, errAway
	}
	return a.Store.RecordWriteFailure(ctx, f)
}

func (a *away) ReportReplica(ctx context.Context, id string, pending int, confirmed int64) error {
	if a.down.Load() {
		return errAway
	}
	return a.Store.ReportReplica(ctx, id, pending, confirmed)
}

func newWorld(t *testing.T, b storetest.Backend) *world {
	t.Helper()
	s := storetest.Open(t, b, checkpointd.SystemClock{})
	ctx := t.Context()
	sess, err := s.CreateSession(ctx, store.NewSession{Repo: "acme/widgets", Role: "author", Issue: 1, Agent: checkpointd.Agent{Runtime: "claude-code"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.StartDrain(ctx, "deploy", "tok_op"); err != nil {
		t.Fatal(err)
	}
	return &world{s: s, st: &away{Store: s}, sess: sess, path: filepath.Join(t.TempDir(), "write-failures.journal"),
		agent: &checkpointd.Principal{TokenID: "tok_agent", Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}}
}

func (w *world) open(t *testing.T, max int) *writefail.Journal {
	t.Helper()
	j, err := writefail.Open(w.path, w.st, nil, max)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

func (w *world) failure(code string) writefail.Failure {
	return writefail.Failure{SessionID: w.sess.ID, RunID: w.sess.CurrentRun.ID, Code: code, Principal: w.agent, At: time.Now()}
}

// writeFailed is the failed write the store holds for the session, if any.
func (w *world) writeFailed(t *testing.T) string {
	t.Helper()
	st, err := w.s.DrainStatus(t.Context(), store.DrainQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range st.Blocking {
		if b.SessionID == w.sess.ID {
			return b.WriteFailure
		}
	}
	return ""
}

// TestJournalSurvivesRestart: what a journal noted is there after the
// process that noted it is gone (the file is reopened as a restart does)
// and is recorded then; recorded, it is gone from the journal, which is
// cut back to its header and keeps the replica's id.
func TestJournalSurvivesRestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := newWorld(t, b)
		j := w.open(t, 0)
		id := j.ID()
		w.st.down.Store(true)
		j.Note(t.Context(), w.failure("store_unavailable"))
		if err := j.Record(t.Context(), ""); err == nil {
			t.Fatal("recorded while the store is away")
		}
		j.Close() // as a kill: nothing else runs

		w.st.down.Store(false)
		j = w.open(t, 0)
		if j.ID() != id || j.Pending() != 1 {
			t.Fatalf("reopened: id %s (was %s), %d pending, want 1", j.ID(), id, j.Pending())
		}
		if got := w.writeFailed(t); got != "" {
			t.Fatalf("the store holds %q before the replay is recorded", got)
		}
		if err := j.Record(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
		if got := w.writeFailed(t); got != "store_unavailable" {
			t.Errorf("after the replay the store holds %q, want store_unavailable", got)
		}
		header, err := os.ReadFile(w.path)
		if err != nil {
			t.Fatal(err)
		}
		if n := strings.Count(string(header), "\n"); n != 1 || !strings.Contains(string(header), id) {
			t.Errorf("recorded, the journal is %q; want its header alone", header)
		}
		j.Close()
		if j = w.open(t, 0); j.Pending() != 0 || j.ID() != id {
			t.Errorf("reopened after recording: %d pending, id %s", j.Pending(), j.ID())
		}
	})
}

// TestJournalTornTail: a last line cut short (a crash during its write,
// before the failure was answered) is dropped, and what came before kept.
func TestJournalTornTail(t *testing.T) {
	w := newWorld(t, storetest.SQLite)
	j := w.open(t, 0)
	w.st.down.Store(true)
	j.Note(t.Context(), w.failure("store_unavailable"))
	j.Close()
	f, err := os.OpenFile(w.path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"note":9,"failure":{"sess`)
	f.Close()
	j = w.open(t, 0)
	if j.Pending() != 1 {
		t.Fatalf("%d pending after a torn tail, want the one note before it", j.Pending())
	}
	j.Note(t.Context(), writefail.Failure{SessionID: "ses_other", Code: "invalid_checkpoint", Principal: w.agent, At: time.Now()})
	j.Close()
	if j = w.open(t, 0); j.Pending() != 2 {
		t.Errorf("%d pending after appending past the torn tail, want 2", j.Pending())
	}
}

// TestJournalUnreadable: a journal damaged other than at its tail cannot
// be trusted: its replica announces itself as unknown — every completion
// is blocked by it, named — and the file is set aside for a fresh one.
func TestJournalUnreadable(t *testing.T) {
	w := newWorld(t, storetest.SQLite)
	j := w.open(t, 0)
	id := j.ID()
	w.st.down.Store(true)
	j.Note(t.Context(), w.failure("store_unavailable"))
	j.Close()
	data, _ := os.ReadFile(w.path)
	lines := strings.SplitAfter(string(data), "\n")
	os.WriteFile(w.path, []byte(lines[0]+"garbage\n"+strings.Join(lines[1:], "")), 0o600)
	w.st.down.Store(false)

	j = w.open(t, 0)
	if err := j.Announce(t.Context(), "test"); err != nil {
		t.Fatal(err)
	}
	if j.ID() != id {
		t.Errorf("the readable header's id %s was not kept: %s", id, j.ID())
	}
	aside, _ := filepath.Glob(w.path + ".unreadable-*")
	if len(aside) != 1 {
		t.Errorf("set aside: %v, want one file", aside)
	}
	d, err := w.s.CompleteDrain(t.Context(), store.DrainCompletion{By: "tok_op", Limit: 10, Request: 1})
	if err != nil {
		t.Fatal(err)
	}
	if d.Decision.Outcome != checkpointd.DrainOutcomeBlocked || len(d.Decision.Unconfirmed) != 1 ||
		d.Decision.Unconfirmed[0].Reason != checkpointd.ReplicaJournalUnreadable || d.Decision.Unconfirmed[0].ID != id {
		t.Fatalf("decision with an unreadable journal: %+v", d.Decision)
	}
	// Confirming does not clear it; an override does, recorded.
	if err := w.s.ReportReplica(t.Context(), id, 0, 5); err != nil {
		t.Fatal(err)
	}
	if d, _ := w.s.CompleteDrain(t.Context(), store.DrainCompletion{By: "tok_op", Limit: 10, Request: 5}); d.Decision.Outcome != checkpointd.DrainOutcomeBlocked {
		t.Fatalf("a confirmation cleared an unreadable journal: %+v", d.Decision)
	}
}

// TestJournalBound: past its bound a journal keeps only the count, and
// recording it marks every active session of the running drain failed.
func TestJournalBound(t *testing.T) {
	w := newWorld(t, storetest.SQLite)
	j := w.open(t, 1)
	w.st.down.Store(true)
	j.Note(t.Context(), writefail.Failure{SessionID: "ses_a", Code: "invalid_checkpoint", Principal: w.agent, At: time.Now()})
	j.Note(t.Context(), writefail.Failure{SessionID: "ses_b", Code: "invalid_checkpoint", Principal: w.agent, At: time.Now()})
	j.Close()
	w.st.down.Store(false)
	j = w.open(t, 1)
	if err := j.Record(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if got := w.writeFailed(t); got != writefail.CodeLost {
		t.Errorf("after an overflow the session holds %q, want %s", got, writefail.CodeLost)
	}
}

// TestJournalSuperseded: a successful write drops the failures noted before
// it started, from the file too; one noted after its mark is kept.
func TestJournalSuperseded(t *testing.T) {
	w := newWorld(t, storetest.SQLite)
	j := w.open(t, 0)
	w.st.down.Store(true)
	j.Note(t.Context(), w.failure("store_unavailable"))
	mark := j.Mark()
	other := w.failure("invalid_checkpoint")
	other.Principal = &checkpointd.Principal{TokenID: "tok_other", Role: checkpointd.RoleAgent}
	j.Note(t.Context(), other)
	j.Superseded(w.sess.ID, mark)
	j.Close()
	if j = w.open(t, 0); j.Pending() != 1 {
		t.Errorf("%d pending, want the one noted after the mark", j.Pending())
	}
}

// TestJournalLocked: two replicas cannot share a journal.
func TestJournalLocked(t *testing.T) {
	w := newWorld(t, storetest.SQLite)
	w.open(t, 0)
	if _, err := writefail.Open(w.path, w.st, nil, 0); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("a second open of the journal: %v, want refused as locked", err)
	}
}
