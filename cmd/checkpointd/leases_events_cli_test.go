package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestLeasesCommand: leases ls with its filters and --json, a forced
// release by the operator, and its failures.
func TestLeasesCommand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, b)
		out, err := f.cli(t, "leases", "ls")
		if err != nil || !strings.Contains(out, "LEASE") || !strings.Contains(row(out, f.leaseID), "acme/widgets!7") ||
			!strings.Contains(row(out, f.leaseID), present.ShortID(f.stale.id)) || !strings.Contains(row(out, f.leaseID), "held") ||
			strings.Contains(out, f.leaseID) || strings.Contains(out, f.stale.id) {
			t.Errorf("leases ls (ids short): %v\n%s", err, out)
		}
		out, err = f.cli(t, "leases", "ls", "-o", "wide")
		if err != nil || !strings.Contains(row(out, f.leaseID), f.leaseID+"  ") || !strings.Contains(row(out, f.leaseID), f.stale.id) {
			t.Errorf("leases ls -o wide (ids whole): %v\n%s", err, out)
		}
		out, err = f.cli(t, "leases", "ls", "--session", present.ShortID(f.stale.id), "--json")
		if err != nil || !strings.Contains(out, f.leaseID) {
			t.Errorf("leases ls --session SHORT: %v\n%s", err, out)
		}
		out, err = f.cli(t, "leases", "ls", "--session", f.l.id)
		if err != nil || strings.TrimSpace(out) != "no leases" {
			t.Errorf("leases ls --session of a session without leases: %v\n%s", err, out)
		}
		out, err = f.cli(t, "leases", "ls", "--session", f.stale.id, "--repo", "acme/widgets", "--state", "held", "--json")
		var page struct{ Items []checkpointd.Lease }
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || page.Items[0].ID != f.leaseID {
			t.Errorf("leases ls --json: %v\n%s", err, out)
		}
		if _, err := f.cli(t, "leases", "ls", "--state", "lost"); err == nil || !strings.Contains(err.Error(), "422 invalid_request") {
			t.Errorf("leases ls --state lost: %v", err)
		}
		if _, err := f.cli(t, "leases", "release", f.leaseID, "--token", f.reader); err == nil || !strings.Contains(err.Error(), "403") {
			t.Errorf("leases release with a reader token: %v", err)
		}
		if _, err := f.cli(t, "leases", "release", "0123"); err == nil || !strings.Contains(err.Error(), "no lease in the token's scope has an id that begins with lse_0123") {
			t.Errorf("leases release of a prefix nothing has: %v", err)
		}
		if _, err := f.cli(t, "leases", "release", "lse_xyz"); err == nil || !strings.Contains(err.Error(), `"lse_xyz" is not a lease id nor the start of one`) {
			t.Errorf("leases release of no id: %v", err)
		}
		out, err = f.cli(t, "leases", "release", present.ShortID(f.leaseID))
		if err != nil || !strings.Contains(out, "lease "+f.leaseID+" released") {
			t.Fatalf("leases release: %v\n%s", err, out)
		}
		out, err = f.cli(t, "leases", "ls", "--state", "released")
		if err != nil || !strings.Contains(row(out, f.leaseID), "released") {
			t.Errorf("leases ls --state released: %v\n%s", err, out)
		}
		if _, err := f.cli(t, "leases", "release", "lse_00000000000000000000000000000000"); err == nil ||
			!strings.Contains(err.Error(), "no lease lse_00000000000000000000000000000000") {
			t.Errorf("leases release of an unknown lease: %v", err)
		}
	})
}

// eventSeqRE finds the seq at the start of an event line.
var eventSeqRE = regexp.MustCompile(`(?m)^\s*(\d+)  `)

// TestEventsFollow: `events --follow` prints the log, then every event
// appended while it runs, each exactly once, and stops cleanly when its
// context ends; --json prints one object per line; --after skips.
func TestEventsFollow(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir := t.TempDir()
		d := startServe(t, environ{}, storeArgs(dir, backendURL(t, b))...)
		op := readSecret(t, tokenPath(dir))
		s := newSession(t, d.URL, op)
		args := []string{"checkpointd", "events", s.id, "--url", d.URL, "--data-dir", dir}

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		out := &syncBuffer{}
		done := make(chan error, 1)
		go func() {
			done <- run(ctx, append(args, "--follow", "--interval", "20ms"), environ{}.get, out, &syncBuffer{})
		}()
		const writes = 5
		for i := range writes {
			call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, fmt.Sprint("w", i))).expect(t, http.StatusCreated)
			time.Sleep(time.Duration(i) * 15 * time.Millisecond) // some writes land between polls, some within one
		}
		r := call(t, "GET", d.URL+"/v1/sessions/"+s.id+"/events?limit=500", op, nil).expect(t, http.StatusOK)
		items, _ := r.get("items").([]any)
		last := int64(items[len(items)-1].(map[string]any)["seq"].(float64))
		deadline := time.Now().Add(10 * time.Second)
		for !strings.Contains(out.String(), fmt.Sprintf("%5d  ", last)) {
			if time.Now().After(deadline) {
				t.Fatalf("event %d not printed within 10s:\n%s", last, out)
			}
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(100 * time.Millisecond) // a few more polls: nothing may come twice
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("events --follow stopped with %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("events --follow did not stop when its context ended")
		}
		var seqs []int64
		for _, m := range eventSeqRE.FindAllStringSubmatch(out.String(), -1) {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			seqs = append(seqs, n)
		}
		for i, n := range seqs {
			if n != int64(i+1) {
				t.Fatalf("events --follow printed seqs %v; want 1..%d once each:\n%s", seqs, last, out)
			}
		}
		if int64(len(seqs)) != last || strings.Count(out.String(), "checkpoint.written") != writes {
			t.Errorf("events --follow printed seqs %v, want 1..%d with %d writes:\n%s", seqs, last, writes, out)
		}

		stdout, _, err := runCLI(t, environ{}, append(args[1:], "--json", "--after", "2")...)
		lines := strings.Split(strings.TrimSpace(stdout), "\n")
		if err != nil || int64(len(lines)) != last-2 {
			t.Fatalf("events --json --after 2: %v\n%s", err, stdout)
		}
		for i, l := range lines {
			var e checkpointd.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq != int64(i+3) || e.SessionID != s.id {
				t.Errorf("events --json line %d: %v %s", i, err, l)
			}
		}
		if _, _, err := runCLI(t, environ{}, "events", "ses_00000000000000000000000000000000", "--url", d.URL, "--data-dir", dir); err == nil ||
			!strings.Contains(err.Error(), "404 not_found") {
			t.Errorf("events of an unknown session: %v", err)
		}
	})
}

// TestErrorsCommand: a refused checkpoint write is in the error log, as a
// line for a person, filtered by source and session, and as JSON.
func TestErrorsCommand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir := t.TempDir()
		d := startServe(t, environ{}, storeArgs(dir, backendURL(t, b))...)
		op := readSecret(t, tokenPath(dir))
		s, other := newSession(t, d.URL, op), newSession(t, d.URL, op)
		for _, id := range []session{s, other} {
			bad := checkpointDoc(id, "bad")
			bad["stage"] = "daydreaming"
			call(t, "POST", d.URL+"/v1/sessions/"+id.id+"/checkpoints", op, bad).expect(t, http.StatusUnprocessableEntity)
		}
		cli := func(args ...string) (string, error) {
			out, _, err := runCLI(t, environ{}, append([]string{"errors", "--url", d.URL, "--data-dir", dir}, args...)...)
			return out, err
		}
		out, err := cli()
		if err != nil || !strings.Contains(row(out, s.id), "checkpoint_write") || !strings.Contains(row(out, s.id), "invalid_checkpoint") ||
			!strings.Contains(row(out, other.id), "checkpoint_write") {
			t.Errorf("errors: %v\n%s", err, out)
		}
		out, err = cli("--session", s.id, "--source", "checkpoint_write", "--since", "1h")
		if err != nil || row(out, s.id) == "" || row(out, other.id) != "" {
			t.Errorf("errors --session: %v\n%s", err, out)
		}
		out, err = cli("--source", "webhook")
		if err != nil || strings.TrimSpace(out) != "no errors" {
			t.Errorf("errors --source webhook: %v\n%s", err, out)
		}
		out, err = cli("--json", "--limit", "1")
		var page struct {
			Items      []checkpointd.ErrorRecord `json:"items"`
			NextCursor string                    `json:"next_cursor"`
		}
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || page.Items[0].SessionID != other.id || page.NextCursor == "" {
			t.Errorf("errors --json --limit 1: %v\n%s", err, out)
		}
		if _, err := cli("--source", "disk"); err == nil || !strings.Contains(err.Error(), "422 invalid_request") {
			t.Errorf("errors --source disk: %v", err)
		}
		if _, err := cli("--since", "yesterday"); err == nil || !strings.Contains(err.Error(), "--since") {
			t.Errorf("errors --since yesterday: %v", err)
		}
	})
}
