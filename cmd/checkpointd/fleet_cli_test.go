package main

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// fleet is a daemon with one session of each kind an operator meets:
// stale and unresponsive with a blocked checkpoint and a held lease,
// parked, ended on behalf, and live.
type fleet struct {
	d                       *daemon
	dir, dbURL, op, reader  string
	stale, parked, ended, l session
	leaseID                 string
}

// fleetLiveness is the --run-liveness of a fleet: short, so a run falls
// unresponsive within the test.
const fleetLiveness = 400 * time.Millisecond

func newFleet(t *testing.T, b storetest.Backend) *fleet {
	t.Helper()
	f := &fleet{dir: t.TempDir(), dbURL: backendURL(t, b)}
	f.d = startServe(t, environ{}, append(storeArgs(f.dir, f.dbURL), "--run-liveness", fleetLiveness.String())...)
	f.op = readSecret(t, tokenPath(f.dir))
	out, _, err := runCLI(t, environ{}, append([]string{"token", "create", "--role", "reader", "--name", "fleet-reader"},
		storeArgs(f.dir, f.dbURL)...)...)
	if err != nil {
		t.Fatal(err)
	}
	_, f.reader = lastLine(t, out)
	f.stale, f.parked, f.ended, f.l = newSession(t, f.d.URL, f.op), newSession(t, f.d.URL, f.op), newSession(t, f.d.URL, f.op), newSession(t, f.d.URL, f.op)

	r := call(t, "POST", f.d.URL+"/v1/leases", f.op, map[string]any{
		"resource":   map[string]any{"kind": "pr", "repo": "acme/widgets", "number": 7},
		"session_id": f.stale.id, "run_id": f.stale.runID, "ttl_seconds": 600,
	}).expect(t, http.StatusCreated)
	f.leaseID = r.str("lease", "id")
	doc := checkpointDoc(f.stale, "blocked")
	doc["stage"] = "blocked"
	doc["blocker"] = map[string]any{"kind": "needs_decision", "summary": "which API to keep", "waiting_on": "operator"}
	doc["next_action"] = map[string]any{"actor": "operator", "action": "decide between v1 and v2", "prompt": "Ask the operator which API to keep."}
	doc["recovery"] = map[string]any{"instructions": "fetch the branch first", "commands": []string{"git fetch origin", "git checkout fix-12"}}
	doc["pending_mutation"] = map[string]any{"kind": "gitea.pr.comment", "target": "acme/widgets!7", "idempotency_key": "reply-7"}
	call(t, "POST", f.d.URL+"/v1/sessions/"+f.stale.id+"/checkpoints", f.op, doc).expect(t, http.StatusCreated)
	// The forge saw another head: the checkpoint is stale.
	side := storetest.OpenURL(t, sideURL(f.dir, f.dbURL), checkpointd.SystemClock{})
	if _, err := side.Observe(t.Context(), []checkpointd.Observation{{Repo: "acme/widgets", Branch: "fix-12",
		Head: "fedcba9876543210fedcba9876543210fedcba98", Authoritative: true, Source: "test"}}); err != nil {
		t.Fatal(err)
	}
	live := checkpointDoc(f.l, "live") // at the observed head: valid
	live["workspace"] = map[string]any{"branch": "fix-12", "head": "fedcba9876543210fedcba9876543210fedcba98"}
	call(t, "POST", f.d.URL+"/v1/sessions/"+f.l.id+"/checkpoints", f.op, live).expect(t, http.StatusCreated)

	if out, err := f.cli(t, "sessions", "park", f.parked.id, "--reason", "agent host died"); err != nil || !strings.Contains(out, "parked") {
		t.Fatalf("sessions park: %v\n%s", err, out)
	}
	if out, err := f.cli(t, "sessions", "end", f.ended.id, "--outcome", "abandoned", "--reason", "issue closed"); err != nil ||
		!strings.Contains(out, "ended (abandoned)") {
		t.Fatalf("sessions end: %v\n%s", err, out)
	}
	time.Sleep(fleetLiveness + 200*time.Millisecond)
	call(t, "POST", f.d.URL+"/v1/sessions/"+f.l.id+"/heartbeat", f.op, map[string]any{"run_id": f.l.runID}).expect(t, http.StatusOK)
	return f
}

// cli runs a daemon command against the fleet's daemon (the operator
// token from the data directory unless args give --token).
func (f *fleet) cli(t *testing.T, args ...string) (string, error) {
	t.Helper()
	n := 1
	if args[0] == "sessions" || args[0] == "leases" || args[0] == "drain" {
		n = 2
	}
	argv := append(append([]string{}, args[:n]...), append([]string{"--url", f.d.URL, "--data-dir", f.dir}, args[n:]...)...)
	out, _, err := runCLI(t, environ{}, argv...)
	return out, err
}

// row is the line of out that names id, whole or short (the default
// table's present.ShortID, which the whole id contains).
func row(out, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, present.ShortID(id)) {
			return l
		}
	}
	return ""
}

// TestSessionsFleetView: `sessions ls` shows each session as what it is
// (unresponsive and stale, parked, ended, live) within 120 columns, the
// filters reach the daemon, --json is the daemon's page; `sessions show`
// tells everything about the blocked session, and a reader token gets the
// validity instead of the resume verdict, saying why.
func TestSessionsFleetView(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, b)
		out, err := f.cli(t, "sessions", "ls", "--all")
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []struct{ id, words string }{
			{f.stale.id, "unresp"}, {f.stale.id, "stale"}, {f.stale.id, "blocked"},
			{f.parked.id, "parked"}, {f.ended.id, "ended"}, {f.l.id, "live"}, {f.l.id, "valid"},
		} {
			if !strings.Contains(row(out, want.id), want.words) {
				t.Errorf("sessions ls: the row of %s lacks %q:\n%s", want.id, want.words, out)
			}
		}
		for _, h := range []string{"SESSION", "REPO", "TARGET", "AGENT", "LIVE", "STAGE", "AGE", "VALIDITY", "WAITING"} {
			if !strings.Contains(strings.SplitN(out, "\n", 2)[0], h) {
				t.Errorf("sessions ls: no %s column:\n%s", h, out)
			}
		}
		for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
			if n := len([]rune(l)); n > lsWidth {
				t.Errorf("sessions ls: a line of %d columns:\n%s", n, l)
			}
		}
		wide, err := f.cli(t, "sessions", "ls", "--wide")
		if err != nil || !strings.Contains(wide, "INSTANCE") || !strings.Contains(row(wide, f.l.id), "host-7/pid-1") ||
			!strings.Contains(row(wide, f.l.id), "claude-code/m") ||
			!strings.Contains(row(wide, f.stale.id), "unresponsive (") {
			t.Errorf("sessions ls --wide: %v\n%s", err, wide)
		}

		if !strings.Contains(row(out, f.stale.id), "operator") {
			t.Errorf("sessions ls: the blocked session does not say it waits on the operator:\n%s", out)
		}
		wideRow := strings.Fields(row(wide, f.stale.id))
		if n := len(wideRow); n < 2 || wideRow[n-2] != "operator" || wideRow[n-1] != "1" {
			t.Errorf("sessions ls --wide: the blocked session's NEXT and LEASES are not operator and 1: %q", wideRow)
		}
		// The fleet filters reach the daemon: each leaves the sessions it names.
		for _, tc := range []struct {
			args []string
			want []string
		}{
			{[]string{"--repo", "acme/*", "--state", "active"}, []string{f.stale.id, f.parked.id, f.l.id}},
			{[]string{"--stage", "blocked"}, []string{f.stale.id}},
			{[]string{"--waiting-on", "operator"}, []string{f.stale.id}},
			{[]string{"--live", "false"}, []string{f.stale.id}},
			{[]string{"--live", "true"}, []string{f.l.id}},
			{[]string{"--repo", "other/*"}, nil},
		} {
			if slices.Contains(tc.args, "--live") {
				// Heard from just now, however long the cases before took
				// on a loaded machine.
				call(t, "POST", f.d.URL+"/v1/sessions/"+f.l.id+"/heartbeat", f.op, map[string]any{"run_id": f.l.runID}).expect(t, http.StatusOK)
			}
			out, err := f.cli(t, append([]string{"sessions", "ls", "--json"}, tc.args...)...)
			var page struct{ Items []checkpointd.Session }
			if err != nil || json.Unmarshal([]byte(out), &page) != nil {
				t.Errorf("sessions ls %v: %v\n%s", tc.args, err, out)
				continue
			}
			var got []string
			for _, s := range page.Items {
				got = append(got, s.ID)
			}
			if diff := cmp.Diff(tc.want, got, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("sessions ls %v (-want +got):\n%s", tc.args, diff)
			}
		}
		// The person's table asks the same (through the client's typed List).
		out, err = f.cli(t, "sessions", "ls", "--repo", "acme/*", "--waiting-on", "operator", "--live", "false", "--stage", "blocked")
		if err != nil || row(out, f.stale.id) == "" || row(out, f.l.id) != "" || row(out, f.parked.id) != "" {
			t.Errorf("sessions ls with the fleet filters: %v\n%s", err, out)
		}
		out, err = f.cli(t, "sessions", "ls", "--sort", "created")
		if lines := strings.Split(out, "\n"); err != nil || len(lines) < 2 || !strings.HasPrefix(lines[1], present.ShortID(f.l.id)+" ") {
			t.Errorf("sessions ls --sort created: the newest session is not first: %v\n%s", err, out)
		}
		if _, err := f.cli(t, "sessions", "ls", "--sort", "oldest"); err == nil || !strings.Contains(err.Error(), "422 invalid_request") {
			t.Errorf("sessions ls --sort oldest: %v", err)
		}

		out, err = f.cli(t, "sessions", "ls", "--state", "active", "--validity", "stale", "--json")
		var page struct {
			Items []checkpointd.Session `json:"items"`
		}
		if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.Items) != 1 || page.Items[0].ID != f.stale.id {
			t.Errorf("sessions ls --validity stale --json: %v\n%s", err, out)
		}
		if _, err := f.cli(t, "sessions", "ls", "--live", "maybe"); err == nil || !strings.Contains(err.Error(), "--live must be true or false") {
			t.Errorf("sessions ls --live maybe: %v", err)
		}
		if out, err := f.cli(t, "sessions", "ls", "--token", f.reader); err != nil || row(out, f.stale.id) == "" {
			t.Errorf("sessions ls with a reader token: %v\n%s", err, out)
		}

		out, err = f.cli(t, "sessions", "show", f.stale.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{
			"agent       claude-code (anthropic/m) on host-7/pid-1", "unresponsive, last seen", "sessions park " + f.stale.id,
			"validity    stale", "1 (complete)", "stage     blocked",
			"blocker     needs_decision: which API to keep (waiting on operator)",
			"next action  operator: decide between v1 and v2", "Ask the operator which API to keep.",
			"recovery    fetch the branch first", "$ git fetch origin",
			"resume      not resumable: stale", "gitea.pr.comment on acme/widgets!7", "reply-7",
			"leases held: 1", f.leaseID, "acme/widgets!7",
			"latest events", "checkpoint.written", "lease.acquired",
		} {
			if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
				t.Errorf("sessions show lacks %q:\n%s", want, out)
			}
		}
		out, err = f.cli(t, "sessions", "show", f.parked.id)
		if err != nil || !strings.Contains(out, "none: the session is parked") || !strings.Contains(out, "run.parked") {
			t.Errorf("sessions show of a parked session: %v\n%s", err, out)
		}
		out, err = f.cli(t, "sessions", "show", f.stale.id, "--token", f.reader)
		if err != nil || !strings.Contains(out, "not read: the token may not read it (GET …/resume needs an agent or operator token); validity stale, so not resumable") ||
			!strings.Contains(out, "reply-7") {
			t.Errorf("sessions show with a reader token: %v\n%s", err, out)
		}
		out, err = f.cli(t, "sessions", "show", f.stale.id, "--json")
		var v struct {
			Session    checkpointd.Session    `json:"session"`
			Checkpoint checkpointd.Checkpoint `json:"checkpoint"`
			Resume     struct {
				Resumable bool     `json:"resumable"`
				Reasons   []string `json:"reasons"`
			} `json:"resume"`
			Leases []checkpointd.Lease `json:"leases"`
			Events []checkpointd.Event `json:"events"`
		}
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Session.ID != f.stale.id || v.Checkpoint.Stage != "blocked" ||
			v.Resume.Resumable || len(v.Leases) != 1 || v.Leases[0].ID != f.leaseID || len(v.Events) == 0 {
			t.Errorf("sessions show --json: %v\n%s", err, out)
		}
		if _, err := f.cli(t, "sessions", "show", "ses_00000000000000000000000000000000"); err == nil ||
			!strings.Contains(err.Error(), "no session ses_00000000000000000000000000000000 in the token's scope (404 not_found)") {
			t.Errorf("sessions show of an unknown id: %v", err)
		}
	})
}

// TestSessionsParkEnd: park and end as an operator (the person's output
// is in newFleet), their failures told with what to do, and --json.
func TestSessionsParkEnd(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		f := newFleet(t, b)
		if _, err := f.cli(t, "sessions", "park", f.l.id, "--reason", "r", "--token", f.reader); err == nil ||
			!strings.Contains(err.Error(), "403 forbidden") || !strings.Contains(err.Error(), "use an operator token") {
			t.Errorf("park with a reader token: %v", err)
		}
		if _, err := f.cli(t, "sessions", "park", f.parked.id, "--reason", "again"); err == nil ||
			!strings.Contains(err.Error(), "409 no_current_run") || !strings.Contains(err.Error(), "sessions end "+f.parked.id) {
			t.Errorf("park of a parked session: %v", err)
		}
		if _, err := f.cli(t, "sessions", "park", "ses_00000000000000000000000000000000", "--reason", "r"); err == nil ||
			!strings.Contains(err.Error(), "404 not_found") {
			t.Errorf("park of an unknown session: %v", err)
		}
		if _, err := f.cli(t, "sessions", "end", f.l.id, "--outcome", "finished", "--reason", "r"); err == nil ||
			!strings.Contains(err.Error(), "--outcome must be abandoned or completed") {
			t.Errorf("end with a bad outcome: %v", err)
		}
		if _, err := f.cli(t, "sessions", "end", f.ended.id, "--outcome", "abandoned", "--reason", "r"); err == nil ||
			!strings.Contains(err.Error(), "already ended") {
			t.Errorf("end of an ended session: %v", err)
		}
		out, err := f.cli(t, "sessions", "park", f.l.id, "--reason", "maintenance", "--json")
		var r struct{ Session checkpointd.Session }
		if err != nil || json.Unmarshal([]byte(out), &r) != nil || !r.Session.Parked || r.Session.CurrentRun != nil {
			t.Errorf("park --json: %v\n%s", err, out)
		}
		// The parked run is fenced off: its next write is refused.
		call(t, "POST", f.d.URL+"/v1/sessions/"+f.l.id+"/checkpoints", f.op, checkpointDoc(f.l, "late")).expect(t, http.StatusConflict)
		out, err = f.cli(t, "sessions", "end", f.l.id, "--outcome", "completed", "--reason", "done by hand", "--json")
		if err != nil || json.Unmarshal([]byte(out), &r) != nil || r.Session.State != checkpointd.SessionEnded || r.Session.Outcome != checkpointd.OutcomeCompleted {
			t.Errorf("end --json: %v\n%s", err, out)
		}
		out, err = f.cli(t, "events", f.l.id)
		if err != nil || !strings.Contains(out, "run.parked") || !strings.Contains(out, "session.ended") || !strings.Contains(out, "done by hand") {
			t.Errorf("events after park and end: %v\n%s", err, out)
		}
	})
}
