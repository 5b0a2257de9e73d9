package store_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// BenchmarkLeaseAcquireRenew measures the lease fast path with 16 agents at
// once, each on its own session: "distinct" acquires a fresh resource and
// renews it (two transactions per op); "renew" renews one held lease per
// agent (one transaction per op).
func BenchmarkLeaseAcquireRenew(b *testing.B) {
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		b.Run("distinct", func(b *testing.B) {
			s, sessions := benchSessions(b, be)
			var next, number atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				sess := sessions[next.Add(1)-1]
				for pb.Next() {
					res := checkpointd.Resource{Kind: checkpointd.ResourceIssue, Repo: "acme/widgets", Number: number.Add(1)}
					l, err := s.AcquireLease(b.Context(), store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					if _, err := s.RenewLease(b.Context(), l.ID, sess.CurrentRun.ID, time.Minute); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
		b.Run("renew", func(b *testing.B) {
			s, sessions := benchSessions(b, be)
			leases := make([]*checkpointd.Lease, len(sessions))
			for i, sess := range sessions {
				l, err := s.AcquireLease(b.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "acme/widgets", Number: int64(i + 1)},
					SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Minute})
				if err != nil {
					b.Fatal(err)
				}
				leases[i] = l
			}
			var next atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := next.Add(1) - 1
				sess, l := sessions[i], leases[i]
				for pb.Next() {
					if _, err := s.RenewLease(b.Context(), l.ID, sess.CurrentRun.ID, time.Minute); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	})
}

// BenchmarkLeaseContention has 16 agents fight over one branch: each op is
// an acquire that either wins (then renews and releases, so the next op can
// win) or is refused with lease_held. It reports the share of ops that won;
// every refusal must be lease_held, nothing else.
func BenchmarkLeaseContention(b *testing.B) {
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		s, sessions := benchSessions(b, be)
		res := checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "acme/widgets", Branch: "main"}
		var next, wins, lastToken atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			sess := sessions[next.Add(1)-1]
			for pb.Next() {
				l, err := s.AcquireLease(b.Context(), store.NewLease{Resource: res, SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: time.Minute})
				if errors.Is(err, checkpointd.ErrLeaseHeld) {
					continue
				}
				if err != nil {
					b.Error(err)
					return
				}
				wins.Add(1)
				if prev := lastToken.Swap(l.FencingToken); prev >= l.FencingToken {
					b.Errorf("token %d granted after %d", l.FencingToken, prev)
				}
				if _, err := s.RenewLease(b.Context(), l.ID, sess.CurrentRun.ID, time.Minute); err != nil {
					b.Error(err)
					return
				}
				if err := s.ReleaseLease(b.Context(), l.ID, sess.CurrentRun.ID, false); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(wins.Load())/float64(b.N), "wins/op")
	})
}
