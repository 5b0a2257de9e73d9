package store_test

import (
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// BenchmarkAuthenticate is the lookup every request makes, 16 at a time
// as under the load test: on PostgreSQL mostly served by the 1 s cache.
func BenchmarkAuthenticate(b *testing.B) {
	eachBackend(b, func(b *testing.B, be storetest.Backend) {
		s := storetest.Open(b, be, checkpointd.SystemClock{})
		secret := checkpointd.NewTokenSecret()
		if _, err := s.CreateToken(b.Context(), checkpointd.TokenSpec{Name: "bench", Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}, checkpointd.HashToken(secret)); err != nil {
			b.Fatal(err)
		}
		hash := checkpointd.HashToken(secret)
		b.ReportAllocs()
		b.SetParallelism(8) // 16 on 2 cores
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Authenticate(b.Context(), hash); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
