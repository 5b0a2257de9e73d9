package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// keyed is a checkpoint write sent with an Idempotency-Key.
type keyed struct {
	key string
	doc map[string]any
}

// TestCrashLeavesNoClaimBehind: writers send checkpoints with an
// Idempotency-Key each while the daemon is SIGKILLed. Every request the
// kill cut off, retried with its key on the daemon that starts next (a
// restart on SQLite, another process on the same PostgreSQL), runs at once:
// 201, or 200 replaying a write that had committed — never 409
// idempotency_in_flight for the claim TTL, though many of them had claimed
// their key when the process died.
func TestCrashLeavesNoClaimBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds and kills a real daemon")
	}
	bin := buildBinary(t)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir, dbURL := t.TempDir(), backendURL(t, b)
		args := storeArgs(dir, dbURL)
		d := startChild(t, bin, args...)
		operator := readSecret(t, tokenPath(dir))
		s := newSession(t, d.URL, operator)
		cut := writeKeyedUntilKilled(t, d, s, operator)
		if len(cut) == 0 {
			t.Fatal("the kill cut off no request")
		}

		d = startChild(t, bin, args...)
		statuses := map[int]int{}
		for _, k := range cut {
			r, err := keyedCall(d.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, k)
			if err != nil {
				t.Fatalf("retry of %s: %v", k.key, err)
			}
			statuses[r.status]++
			if r.status != http.StatusCreated && r.status != http.StatusOK {
				t.Errorf("retry of %s after the crash: status %d: %s", k.key, r.status, r.raw)
			}
		}
		t.Logf("%s: %d requests cut off by SIGKILL; their retries answered %v", b, len(cut), statuses)
	})
}

// writeKeyedUntilKilled runs 16 writers back to back, each write with a
// key of its own, and SIGKILLs the daemon after 1.5 s. It returns the
// requests the kill cut off.
func writeKeyedUntilKilled(t *testing.T, d *child, s session, token string) []keyed {
	t.Helper()
	const writers = 16
	var (
		mu       sync.Mutex
		cut      []keyed
		wg       sync.WaitGroup
		stop     = make(chan struct{})
		endpoint = d.URL + "/v1/sessions/" + s.id + "/checkpoints"
	)
	for w := range writers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := keyed{key: fmt.Sprintf("writer-%d-%d", w, i)}
				k.doc = checkpointDoc(s, k.key)
				r, err := keyedCall(endpoint, token, k)
				switch {
				case err != nil:
					mu.Lock()
					cut = append(cut, k)
					mu.Unlock()
					return
				case r.status == http.StatusCreated:
				case r.status == http.StatusServiceUnavailable && r.str("code") == "store_unavailable":
					// Refused and released (a database short of
					// connections); the next write takes a new key.
				default:
					t.Errorf("writer %d: status %d: %s", w, r.status, r.raw)
					return
				}
			}
		})
	}
	time.Sleep(1500 * time.Millisecond)
	d.kill(t)
	close(stop)
	wg.Wait()
	return cut
}

var keyedClient = &http.Client{Timeout: 5 * time.Second}

func keyedCall(url, token string, k keyed) (response, error) {
	j, err := json.Marshal(k.doc)
	if err != nil {
		return response{}, err
	}
	req, err := http.NewRequest("POST", url, bytes.NewReader(j))
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", k.key)
	return send(keyedClient, req)
}
