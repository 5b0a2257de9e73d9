package main

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/store/storetest"
)

// The drain gate across restarts and replicas: a failed write
// the store could not record blocks every completion decided after the
// store is back — by the replica that answered it after any restart, and
// by every other replica.

const (
	drainSecret = "drain-replicas-secret"
	drainHead   = "0123456789abcdef0123456789abcdef01234567" // checkpointDoc's head
	drainBefore = "1111111111111111111111111111111111111111"
)

// terminate sends SIGTERM and waits for the daemon to exit.
func (c *child) terminate(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("SIGTERM: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(45 * time.Second):
		t.Fatalf("pid %d still running 45s after SIGTERM", c.cmd.Process.Pid)
	}
}

// drainBlocking is the blocking list of a 409 drain_blocked, as
// "session:reason,reason" strings, and its unconfirmed replicas' ids.
func drainBlocking(r response) (sessions, replicas []string) {
	for _, b := range asList(r.get("blocking")) {
		m := b.(map[string]any)
		var reasons []string
		for _, x := range asList(m["reasons"]) {
			reasons = append(reasons, fmt.Sprint(x))
		}
		sessions = append(sessions, fmt.Sprintf("%s:%s", m["session_id"], strings.Join(reasons, ",")))
	}
	for _, u := range asList(r.get("unconfirmed_replicas")) {
		replicas = append(replicas, fmt.Sprint(u.(map[string]any)["id"]))
	}
	return sessions, replicas
}

func asList(v any) []any { l, _ := v.([]any); return l }

// replicaIDs are the replicas GET /v1/drain lists.
func replicaIDs(t *testing.T, base, token string) []string {
	t.Helper()
	var ids []string
	for _, r := range asList(call(t, "GET", base+"/v1/drain", token, nil).expect(t, http.StatusOK).get("replicas")) {
		ids = append(ids, fmt.Sprint(r.(map[string]any)["id"]))
	}
	return ids
}

// TestDrainWriteFailureSurvivesRestart: a drain runs and nothing blocks
// it; the store goes away (PostgreSQL refuses connections; on SQLite every
// write fails, as on a full disk); a checkpoint write answers 503; the
// daemon is killed (SIGKILL, or stopped with SIGTERM while the store is
// still away); the store comes back, the daemon starts again and a push
// makes the session valid: the completion must still be refused for the
// failed write, until the agent writes again.
func TestDrainWriteFailureSurvivesRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills a real daemon")
	}
	bin := buildBinary(t)
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		for _, stop := range []string{"SIGKILL", "SIGTERM"} {
			t.Run(stop, func(t *testing.T) {
				dir := t.TempDir()
				var dbURL string
				var goAway func() (comeBack func())
				if b == storetest.Postgres {
					db := storetest.NewDatabase(t)
					dbURL = db.URL
					goAway = func() func() { db.Refuse(); return db.Allow }
				} else {
					goAway = func() func() {
						return storetest.FailWrites(t, storetest.SQLite, filepath.Join(dir, "checkpointd.db"))
					}
				}
				args := append(storeArgs(dir, dbURL), "--webhook-secret", drainSecret)
				d := startChild(t, bin, args...)
				op := readSecret(t, tokenPath(dir))
				s := newSession(t, d.URL, op)
				deliverPush(t, d.URL, drainSecret, "d-1", drainBefore, drainHead)
				call(t, "POST", d.URL+"/v1/drain", op, map[string]any{"reason": "deploy"}).expect(t, http.StatusCreated)
				call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, "ready")).expect(t, http.StatusCreated)
				if n := call(t, "GET", d.URL+"/v1/drain", op, nil).expect(t, http.StatusOK).num("counts", "blocking"); n != 0 {
					t.Fatalf("%d sessions block before the outage", n)
				}

				comeBack := goAway()
				call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, "during the outage")).
					expect(t, http.StatusServiceUnavailable)
				if stop == "SIGKILL" {
					d.kill(t)
				} else {
					d.terminate(t)
				}
				comeBack()

				d = startChild(t, bin, args...)
				deliverPush(t, d.URL, drainSecret, "d-2", drainBefore, drainHead) // valid again after the boot reset
				r := call(t, "POST", d.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusConflict)
				if got, _ := drainBlocking(r); len(got) != 1 || got[0] != s.id+":write_failed" {
					t.Fatalf("after the restart the completion is blocked by %v, want the failed write of %s: %s", got, s.id, r.raw)
				}
				call(t, "POST", d.URL+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, "after the restart")).expect(t, http.StatusCreated)
				call(t, "POST", d.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusOK)
			})
		}
	})
}

// TestDrainWriteFailureBlocksEveryReplica: two replicas on one PostgreSQL.
// A write through A fails while the database is unreachable; as soon as it
// is back, a completion through B must see the failure. A replica that
// cannot answer — killed, its failure still in its journal — blocks every
// completion, named, until it starts again on its journal (which then
// records the failure) or an operator overrides it (recorded).
func TestDrainWriteFailureBlocksEveryReplica(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real daemons")
	}
	storetest.RequirePostgres(t)
	bin := buildBinary(t)
	db := storetest.NewDatabase(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	argsA := append(storeArgs(dirA, db.URL), "--webhook-secret", drainSecret, "--drain-confirm-timeout", "2s")
	a := startChild(t, bin, argsA...)
	argsB := append(storeArgs(dirB, db.URL), "--webhook-secret", drainSecret, "--drain-confirm-timeout", "2s",
		"--key-file", keyPath(dirA))
	b := startChild(t, bin, argsB...)
	op := readSecret(t, tokenPath(dirA))
	s := newSession(t, a.URL, op)
	deliverPush(t, a.URL, drainSecret, "d-1", drainBefore, drainHead)
	write := func(base string, want int) {
		t.Helper()
		call(t, "POST", base+"/v1/sessions/"+s.id+"/checkpoints", op, checkpointDoc(s, time.Now().String())).expect(t, want)
	}
	drain := func() {
		t.Helper()
		call(t, "POST", b.URL+"/v1/drain", op, map[string]any{"reason": "deploy"}).expect(t, http.StatusCreated)
		write(b.URL, http.StatusCreated)
	}
	cancel := func() { call(t, "POST", b.URL+"/v1/drain/cancel", op, nil).expect(t, http.StatusOK) }

	drain()
	if ids := replicaIDs(t, b.URL, op); len(ids) != 2 {
		t.Fatalf("GET /v1/drain lists replicas %v, want both", ids)
	}
	db.Refuse()
	write(a.URL, http.StatusServiceUnavailable)
	db.Allow()
	r := call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusConflict)
	if got, reps := drainBlocking(r); len(got) != 1 || got[0] != s.id+":write_failed" || len(reps) != 0 {
		t.Fatalf("right after the outage B's completion is blocked by %v, replicas %v; want the failure A answered: %s", got, reps, r.raw)
	}
	cancel()

	t.Run("a killed replica blocks until it starts again", func(t *testing.T) {
		drain()
		db.Refuse()
		write(a.URL, http.StatusServiceUnavailable)
		a.kill(t)
		db.Allow()
		r := call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusConflict)
		got, reps := drainBlocking(r)
		if len(got) != 0 || len(reps) != 1 {
			t.Fatalf("with A dead the completion is blocked by sessions %v, replicas %v; want A alone: %s", got, reps, r.raw)
		}
		if detail := r.str("detail"); !strings.Contains(detail, reps[0]) || !strings.Contains(detail, "did not confirm") {
			t.Errorf("the refusal does not name the replica: %q", detail)
		}
		a = startChild(t, bin, argsA...) // replays its journal
		// B's hold on the serving lock went with the outage: A's start may
		// count as the first and reset validity (fail closed).
		deliverPush(t, a.URL, drainSecret, "d-2", drainBefore, drainHead)
		r = call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusConflict)
		if got, reps := drainBlocking(r); len(got) != 1 || got[0] != s.id+":write_failed" || len(reps) != 0 {
			t.Fatalf("after A restarted the completion is blocked by %v, replicas %v; want the failure A kept: %s", got, reps, r.raw)
		}
		write(b.URL, http.StatusCreated)
		call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusOK)
		cancel()
	})

	t.Run("an override passes a replica gone for good, and is recorded", func(t *testing.T) {
		drain()
		a.kill(t)
		r := call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusConflict)
		_, reps := drainBlocking(r)
		if len(reps) != 1 {
			t.Fatalf("with A dead: unconfirmed %v: %s", reps, r.raw)
		}
		call(t, "POST", b.URL+"/v1/drain/complete", op, map[string]any{"override_replicas": []string{"not-a-replica"}}).
			expect(t, http.StatusUnprocessableEntity)
		out, _, err := runCLI(t, nil, "drain", "complete", "--url", b.URL, "--data-dir", dirA, "--override-replica", reps[0])
		if err != nil {
			t.Fatalf("drain complete --override-replica: %v\n%s", err, out)
		}
		if !strings.Contains(out, "overridden") || !strings.Contains(out, reps[0]) {
			t.Errorf("the CLI does not say what was overridden:\n%s", out)
		}
		dr := call(t, "GET", b.URL+"/v1/drain", op, nil).expect(t, http.StatusOK)
		over := asList(dr.get("drain", "decision", "overridden_replicas"))
		if len(over) != 1 || over[0].(map[string]any)["id"] != reps[0] || over[0].(map[string]any)["reason"] != "not_confirmed" {
			t.Errorf("the decision does not record the override: %s", dr.raw)
		}
		// Forgotten: the next drain asks B alone.
		cancel()
		drain()
		if ids := replicaIDs(t, b.URL, op); len(ids) != 1 {
			t.Errorf("after the override the replicas are %v, want B alone", ids)
		}
		call(t, "POST", b.URL+"/v1/drain/complete", op, nil).expect(t, http.StatusOK)
	})
}
