package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// BenchmarkCheckpointWriteHTTP is the write path end to end in one
// process: 16 writers, each on its own session over its own keep-alive
// connection, POST a checkpoint through the real router, authentication,
// validation, redaction and store. For CPU profiles of the daemon's side
// (-cpuprofile; the client's net/http shows apart) and for before/after
// figures of a change (docs/performance.md).
func BenchmarkCheckpointWriteHTTP(b *testing.B) {
	for _, backend := range []storetest.Backend{storetest.SQLite, storetest.Postgres} {
		b.Run(string(backend), func(b *testing.B) {
			if backend == storetest.Postgres {
				storetest.RequirePostgres(b)
			}
			d := newBenchDaemon(b, backend)
			const writers = 16
			type writer struct {
				path string
				doc  map[string]any
			}
			ws := make([]writer, writers)
			for i := range ws {
				id, doc := d.session(b)
				ws[i] = writer{"/v1/sessions/" + id + "/checkpoints", doc}
			}
			var next atomic.Int64
			client := d.client
			b.ReportAllocs()
			b.SetParallelism((writers + 1) / 2) // GOMAXPROCS 2 here: 16 goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := ws[int(next.Add(1)-1)%writers]
				for n := 0; pb.Next(); n++ {
					w.doc["note"] = fmt.Sprint(n)
					raw, _ := json.Marshal(w.doc)
					req, _ := http.NewRequest("POST", d.url+w.path, bytes.NewReader(raw))
					req.Header.Set("Authorization", "Bearer "+d.token)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusCreated {
						b.Errorf("POST %s: %d", w.path, resp.StatusCode)
						return
					}
				}
			})
		})
	}
}
