package store_test

import (
	"testing"

	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// BenchmarkReconcileLeases measures the lease half of one reconcile pass
// over 100k active sessions (CHECKPOINTD_BENCH_DRAIN_SESSIONS), each run
// holding the lease its latest checkpoint names: expiry, the mismatch
// check, the sessions known to have lost a lease and the audit's slice
// (slice). Its peer, measured in the same run, is the same pass auditing
// every session at once (every-session), as each pass did before the
// audit went round in slices; compare the two.
func BenchmarkReconcileLeases(b *testing.B) {
	active, _ := drainBenchSize(b)
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		s := seedDrainURL(b, be, storetest.URL(b, be), active, 1<<40, true)
		ctx := b.Context()
		for _, c := range []struct {
			name  string
			chunk int
		}{{"slice", 0}, {"every-session", active}} {
			b.Run(c.name, func(b *testing.B) {
				if c.chunk > 0 {
					store.SetLeaseAuditChunk(b, c.chunk)
				}
				audited := 0
				for b.Loop() {
					got, err := s.ReconcileLeases(ctx, "reconcile:bench")
					if err != nil {
						b.Fatal(err)
					}
					if got != (store.LeaseReconcile{Audited: got.Audited}) || got.Audited == 0 {
						b.Fatalf("a pass over sessions that hold their leases: %+v", got)
					}
					audited += got.Audited
				}
				b.ReportMetric(float64(audited)/float64(b.N), "sessions-audited/op")
			})
		}
	})
}
