package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestSessionsCommand drives `checkpointd sessions` against a running
// daemon with the operator token from the data directory: ls (filters,
// table, --json), show, and drop, which refuses without --yes, clears with
// it, and answers gone afterwards, as the API does to the old run.
func TestSessionsCommand(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		dir := t.TempDir()
		d := startServe(t, environ{}, storeArgs(dir, backendURL(t, b))...)
		op := readSecret(t, tokenPath(dir))
		a, other := newSession(t, d.URL, op), newSession(t, d.URL, op)
		call(t, "POST", d.URL+"/v1/sessions/"+a.id+"/checkpoints", op, checkpointDoc(a, "one")).expect(t, http.StatusCreated)
		call(t, "POST", d.URL+"/v1/sessions/"+other.id+"/end", op, map[string]any{"run_id": other.runID, "outcome": "completed"}).
			expect(t, http.StatusOK)
		cli := func(args ...string) (string, error) {
			t.Helper()
			out, _, err := runCLI(t, environ{}, append([]string{"sessions", args[0], "--url", d.URL, "--data-dir", dir}, args[1:]...)...)
			return out, err
		}

		// The fleet is what still runs: ended sessions only with --all.
		out, err := cli("ls")
		if err != nil || !strings.Contains(out, "SESSION") || row(out, a.id) == "" || row(out, other.id) != "" ||
			!strings.Contains(out, "#12 fix-12") {
			t.Errorf("sessions ls: %v\n%s", err, out)
		}
		out, err = cli("ls", "--all")
		if err != nil || row(out, a.id) == "" || !strings.Contains(row(out, other.id), "  ended  ") {
			t.Errorf("sessions ls --all: %v\n%s", err, out)
		}
		if _, err := cli("ls", "--all", "--state", "ended"); err == nil || !strings.Contains(err.Error(), "not with --state") {
			t.Errorf("sessions ls --all --state: %v", err)
		}
		out, err = cli("ls", "--state", "active", "--repo", "acme/widgets", "--validity", "unverified")
		if err != nil || row(out, a.id) == "" || row(out, other.id) != "" {
			t.Errorf("sessions ls with filters: %v\n%s", err, out)
		}
		out, err = cli("ls", "--limit", "1")
		if err != nil || !strings.Contains(out, "more: --cursor ") || strings.Count(strings.TrimSpace(out), "\n") != 2 { // the header, a session and the cursor
			t.Errorf("sessions ls --limit 1: %v\n%s", err, out)
		}
		if _, err := cli("ls", "--state", "sleeping"); err == nil || !strings.Contains(err.Error(), "422") {
			t.Errorf("sessions ls with a bad state: %v", err)
		}
		out, err = cli("ls", "--json", "--all")
		var page struct{ Items []struct{ ID string } }
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 2 {
			t.Errorf("sessions ls --json: %v\n%s", err, out)
		}

		// kubectl's -o and --no-headers.
		out, err = cli("ls", "-o", "name", "--all")
		if err != nil || strings.TrimSpace(out) == "" {
			t.Errorf("sessions ls -o name: %v\n%s", err, out)
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if !strings.HasPrefix(l, "session/ses_") || strings.Contains(l, " ") {
				t.Errorf("sessions ls -o name: line %q, want session/ID", l)
			}
		}
		if strings.Count(out, "\n") != 2 || !strings.Contains(out, "session/"+a.id+"\n") {
			t.Errorf("sessions ls -o name --all: want both sessions:\n%s", out)
		}
		out, err = cli("ls", "-o", "yaml", "--all")
		var ypage struct{ Items []struct{ ID string } }
		if err != nil || yaml.Unmarshal([]byte(out), &ypage) != nil || len(ypage.Items) != 2 || !strings.Contains(out, "items:") {
			t.Errorf("sessions ls -o yaml: %v\n%s", err, out)
		}
		out, err = cli("ls", "-o", "wide")
		if err != nil || !strings.Contains(strings.SplitN(out, "\n", 2)[0], "INSTANCE") {
			t.Errorf("sessions ls -o wide: %v\n%s", err, out)
		}
		out, err = cli("ls", "--no-headers")
		if err != nil || strings.Contains(out, "SESSION") || !strings.HasPrefix(out, present.ShortID(a.id)+" ") {
			t.Errorf("sessions ls --no-headers: %v\n%s", err, out)
		}
		if _, err := cli("ls", "-o", "xml"); err == nil || !strings.Contains(err.Error(), "want table, wide, json, yaml or name") {
			t.Errorf("sessions ls -o xml: %v", err)
		}
		if out, err = cli("show", a.id, "-o", "name"); err != nil || !strings.Contains(out, "session/"+a.id) {
			t.Errorf("sessions show -o name: %v\n%s", err, out)
		}

		// A unique start of an id names the session, as kubectl takes one.
		common := commonPrefix(a.id, other.id)
		short := a.id[:len(common)+1]
		if out, err = cli("show", short); err != nil || !strings.Contains(out, a.id) {
			t.Errorf("sessions show %s: %v\n%s", short, err, out)
		}
		if out, err = cli("show", strings.TrimPrefix(short, "ses_")); err != nil || !strings.Contains(out, a.id) {
			t.Errorf("sessions show without ses_: %v\n%s", err, out)
		}
		if _, err := cli("show", common); err == nil || !strings.HasPrefix(err.Error(), "sessions show: ") || !strings.Contains(err.Error(), "start of several session ids") ||
			!strings.Contains(err.Error(), a.id) || !strings.Contains(err.Error(), other.id) {
			t.Errorf("sessions show %s (ambiguous): %v", common, err)
		}
		if _, err := cli("show", "ses_ffff"); err == nil || !strings.Contains(err.Error(), "no session in the token's scope") {
			t.Errorf("sessions show ses_ffff: %v", err)
		}
		if _, err := cli("show", "SES-1"); err == nil || !strings.Contains(err.Error(), "not a session id nor the start of one") {
			t.Errorf("sessions show SES-1: %v", err)
		}

		out, err = cli("show", a.id)
		if err != nil || !strings.Contains(out, a.id) || !strings.Contains(out, "1 (complete)") ||
			!strings.Contains(out, "unverified") || !strings.Contains(out, a.runID) {
			t.Errorf("sessions show: %v\n%s", err, out)
		}
		if _, err := cli("show"); err == nil || !strings.Contains(err.Error(), "exactly one session id") {
			t.Errorf("sessions show without an id: %v", err)
		}

		out, err = cli("drop", a.id, "--reason", "stuck")
		if err == nil || !strings.Contains(err.Error(), "--yes") {
			t.Errorf("drop without --yes: %v\n%s", err, out)
		}
		call(t, "GET", d.URL+"/v1/sessions/"+a.id, op, nil).expect(t, http.StatusOK)
		if _, err := cli("drop", a.id, "--reason", "stuck", "--yes", "--token", "not-a-token"); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("drop with a bad token: %v", err)
		}
		out, err = cli("drop", a.id, "--reason", "stuck since the outage", "--yes")
		if err != nil || !strings.Contains(out, "cleared") {
			t.Fatalf("drop: %v\n%s", err, out)
		}
		r := call(t, "POST", d.URL+"/v1/sessions/"+a.id+"/checkpoints", op, checkpointDoc(a, "late")).expect(t, http.StatusGone)
		if r.str("code") != "gone" || r.str("kind") != "cleared" || r.str("at") == "" {
			t.Errorf("late write after the drop: %s", r.raw)
		}
		// The operator's token reads the whole tombstone.
		if _, err := cli("show", a.id); err == nil || !strings.Contains(err.Error(), "is gone: cleared") ||
			!strings.Contains(err.Error(), `by bootstrap-operator (reason: "stuck since the outage"); removed 1 checkpoints, 1 runs, 3 events, 0 leases (0 released)`) {
			t.Errorf("show after the drop: %v", err)
		}
		if _, err := cli("drop", a.id, "--reason", "again", "--yes"); err == nil || !strings.Contains(err.Error(), "is gone") {
			t.Errorf("drop twice: %v", err)
		}
		if _, err := cli("drop", "ses_00000000000000000000000000000000", "--reason", "x", "--yes"); err == nil || !strings.Contains(err.Error(), "404") {
			t.Errorf("drop of an unknown session: %v", err)
		}
		newSession(t, d.URL, op)
	})
}

// TestServeRetention: serve runs the retention worker with the configured
// policy (here from the environment): a session keeps its latest
// checkpoint only. Negative settings are refused at start.
func TestServeRetention(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, environ{"CHECKPOINTD_RETAIN_CHECKPOINTS": "1", "CHECKPOINTD_RETENTION_INTERVAL": "100ms"}, storeArgs(dir, "")...)
	op := readSecret(t, tokenPath(dir))
	s := newSession(t, d.URL, op)
	for _, note := range []string{"one", "two", "three"} {
		call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, note)).expect(t, http.StatusCreated)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		r := call(t, "GET", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, nil).expect(t, http.StatusOK)
		items, _ := r.get("items").([]any)
		if len(items) == 1 && items[0].(map[string]any)["seq"] == float64(3) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checkpoints not pruned to the latest: %s", r.raw)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if err := serveRefused(t, environ{}, append(storeArgs(dir, ""), "--retain-checkpoints", "-1")...); err == nil ||
		!strings.Contains(err.Error(), "--retain-checkpoints") {
		t.Errorf("serve with a negative retention: %v", err)
	}
	if err := serveRefused(t, environ{"CHECKPOINTD_RETAIN_TOMBSTONES": "-1h"}, storeArgs(dir, "")...); err == nil ||
		!strings.Contains(err.Error(), "--retain-tombstones") {
		t.Errorf("serve with a negative tombstone retention: %v", err)
	}
}

// commonPrefix is the longest start a and b share.
func commonPrefix(a, b string) string {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return a[:n]
}
