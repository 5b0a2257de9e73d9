package store_test

import (
	"encoding/json"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// benchWriters is how many goroutines write at once, each on its own
// session: the 16 clients of the load test and the floors
// (scripts/floor/, docs/performance.md).
const benchWriters = 16

// benchDocument is the reference ~3 KB document (testdata/checkpoint-full.json)
// without its leases, which a benchmark session does not hold and which would
// only make every checkpoint incomplete.
func benchDocument(b *testing.B) []byte {
	b.Helper()
	raw, err := os.ReadFile("../testdata/checkpoint-full.json")
	if err != nil {
		b.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		b.Fatal(err)
	}
	delete(m, "leases")
	out, _ := json.Marshal(m)
	return out
}

// benchSessions opens a store on backend be and creates one active session
// per writer on the reference document's repo.
func benchSessions(b *testing.B, be storetest.Backend) (*store.Store, []*checkpointd.Session) {
	b.Helper()
	s := storetest.Open(b, be, checkpointd.SystemClock{})
	// RunParallel starts parallelism × GOMAXPROCS goroutines.
	par := (benchWriters + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0)
	sessions := make([]*checkpointd.Session, par*runtime.GOMAXPROCS(0))
	for i := range sessions {
		sess, err := s.CreateSession(b.Context(), store.NewSession{
			Repo: "acme/widgets", Role: "author", Issue: 12, Branch: "fix-12-null-deref",
			Agent: checkpointd.Agent{Runtime: "claude-code", Instance: "bench"},
		})
		if err != nil {
			b.Fatalf("CreateSession: %v", err)
		}
		sessions[i] = sess
	}
	b.SetParallelism(par)
	return s, sessions
}

// eachBackend runs fn as a sub-benchmark per backend; PostgreSQL is skipped
// when CHECKPOINTD_TEST_DATABASE_URL is unset.
func eachBackend(b *testing.B, fn func(b *testing.B, be storetest.Backend)) {
	for _, be := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		b.Run(string(be), func(b *testing.B) {
			if be == storetest.Postgres {
				storetest.RequirePostgres(b)
			}
			fn(b, be)
		})
	}
}

// BenchmarkWriteCheckpoint measures the store's half of a checkpoint write
// (one transaction: advance the session, insert the checkpoint with its
// sealed fields, insert the event) with 16 concurrent writers, each on its
// own session as agents are. Compare ns/op with 1/tps of the floors in
// scripts/floor/ to see what the store adds to the database.
func BenchmarkWriteCheckpoint(b *testing.B) {
	raw := benchDocument(b)
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		s, sessions := benchSessions(b, be)
		var next atomic.Int64
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			sess := sessions[next.Add(1)-1]
			var doc checkpointd.Document
			if err := json.Unmarshal(raw, &doc); err != nil {
				b.Error(err)
				return
			}
			doc.RunID, doc.FencingToken = sess.CurrentRun.ID, sess.CurrentRun.FencingToken
			w := store.CheckpointWrite{SessionID: sess.ID, Doc: &doc, Digest: "hmac-sha256:v1:00"}
			for pb.Next() {
				if _, err := s.WriteCheckpoint(b.Context(), w); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkPrepareAndWrite is the daemon's work for one write without HTTP:
// validate, digest, redact and decode the raw document
// (checkpointd.PrepareCheckpoint), then WriteCheckpoint. The difference to
// BenchmarkWriteCheckpoint is the CPU the domain spends per write.
func BenchmarkPrepareAndWrite(b *testing.B) {
	raw := benchDocument(b)
	wf := checkpointd.DefaultWorkflow()
	key := []byte("bench-digest-key")
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		s, sessions := benchSessions(b, be)
		var next atomic.Int64
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			sess := sessions[next.Add(1)-1]
			var m map[string]any
			_ = json.Unmarshal(raw, &m)
			m["run_id"], m["fencing_token"] = sess.CurrentRun.ID, sess.CurrentRun.FencingToken
			body, _ := json.Marshal(m)
			for pb.Next() {
				p, err := checkpointd.PrepareCheckpoint(body, wf, key)
				if err != nil {
					b.Error(err)
					return
				}
				if _, err := s.WriteCheckpoint(b.Context(), store.CheckpointWrite{SessionID: sess.ID, Doc: p.Doc,
					Digest: p.Digest, Redactions: p.Redactions}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
