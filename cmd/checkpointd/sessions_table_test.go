package main

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
)

// TestSessionsTableFits: the default table cuts the widest values with an
// ellipsis until a line fits 120 columns, never the (short) id; --wide
// shows the whole id and cuts nothing; the stage and target keep what
// the old 36-character id took from them; LIVE says live, unresponsive with the last sighting's age,
// parked or ended.
func TestSessionsTableFits(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	seen := now.Add(-3 * time.Hour)
	yes, no := true, false
	long := strings.Repeat("x", 40)
	run := func(live *bool) *checkpointd.Run {
		return &checkpointd.Run{ID: "run_1", LastSeenAt: &seen, Live: live,
			Agent: checkpointd.Agent{Runtime: "claude-code", Model: "sonnet-4.5-" + long, Instance: "host-9/pid-1"}}
	}
	latest := &checkpointd.CheckpointSummary{Seq: 3, Stage: "review_requested", CreatedAt: now.Add(-12 * time.Minute), Complete: true}
	items := []checkpointd.Session{
		{ID: "ses_01a231b2b17775fa92f3592bfc9195ca", Repo: "acme/" + long, Branch: "feature-" + long, Issue: 12,
			State: checkpointd.SessionActive, CurrentRun: run(&no), Validity: checkpointd.ValidityStale, Latest: latest},
		{ID: "ses_01a231b2b18572f4a93f558610772718", Repo: "acme/widgets", State: checkpointd.SessionActive,
			CurrentRun: run(&yes), Validity: checkpointd.ValidityValid, Latest: latest},
		{ID: "ses_01a231b2b18f74aeb54be569b537359e", Repo: "acme/widgets", State: checkpointd.SessionActive, Parked: true,
			Validity: checkpointd.ValidityUnverified},
		{ID: "ses_01a231b2b1987d3f96ce3c3e7f293199", Repo: "acme/widgets", State: checkpointd.SessionEnded,
			Outcome: checkpointd.OutcomeAbandoned, Validity: checkpointd.ValidityUnverified},
	}
	var out bytes.Buffer
	printSessions(&out, items, now, false, false)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	var live []string
	at := strings.Index(lines[0], "LIVE")
	for _, l := range lines {
		if n := len([]rune(l)); n > lsWidth {
			t.Errorf("a line of %d columns: %s", n, l)
		}
		live = append(live, strings.Fields(string([]rune(l)[at:]))[0])
	}
	if diff := cmp.Diff([]string{"LIVE", "unresp", "live", "parked", "ended"}, live); diff != "" {
		t.Errorf("LIVE (-want +got):\n%s\n%s", diff, out.String())
	}
	for i, it := range items {
		if !strings.HasPrefix(lines[i+1], present.ShortID(it.ID)+"  ") || strings.Contains(out.String(), it.ID) {
			t.Errorf("id %s not short, cut or missing:\n%s", it.ID, out.String())
		}
	}
	if !strings.Contains(lines[1], "review_requested") || !strings.Contains(lines[1], "#12 feature-") {
		t.Errorf("the long row cut the stage or the target short: %s", lines[1])
	}
	if !strings.Contains(lines[1], "unresp 3h") || !strings.Contains(lines[1], "…") || !strings.Contains(lines[1], "12m") {
		t.Errorf("the long row is not cut, or lost its liveness or age: %s", lines[1])
	}
	out.Reset()
	printSessions(&out, items, now, true, false)
	if !strings.Contains(out.String(), "acme/"+long) || !strings.Contains(out.String(), "unresponsive (3h)") ||
		!strings.Contains(out.String(), "host-9/pid-1") || strings.Contains(out.String(), "…") || !strings.Contains(out.String(), items[0].ID+"  ") {
		t.Errorf("--wide:\n%s", out.String())
	}
}

// TestDaemonUnreachable: a daemon that does not answer is told as such,
// with the flag that names it.
func TestDaemonUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, _, err = runCLI(t, environ{}, "sessions", "ls", "--url", "http://"+addr, "--token", "t")
	if err == nil || !strings.Contains(err.Error(), "sessions ls: cannot reach the daemon (GET /v1/sessions)") ||
		!strings.Contains(err.Error(), "--url (CHECKPOINTD_URL)") || strings.Contains(err.Error(), "checkpointd:") {
		t.Errorf("sessions ls against nothing: %v", err)
	}
}

// TestDataSummary: an event's data in one line, cut to 100 characters.
func TestDataSummary(t *testing.T) {
	if got, want := dataSummary([]byte(`{"s":"`+strings.Repeat("y", 200)+`"}`)), "s="+strings.Repeat("y", 97)+"…"; got != want {
		t.Errorf("dataSummary = %q, want %q", got, want)
	}
}
