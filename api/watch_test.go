package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// summary is an event as "type/change label", the session named by label.
func summary(t *testing.T, e sseEvent, labels map[string]string) string {
	t.Helper()
	d := e.json(t)
	s := e.Type
	if c, ok := d["change"].(string); ok {
		s += "/" + c
	}
	if id, ok := d["session_id"].(string); ok {
		s += " " + labels[id]
	}
	return s
}

func summaries(t *testing.T, evs []sseEvent, labels map[string]string) []string {
	t.Helper()
	var out []string
	for _, e := range evs {
		out = append(out, summary(t, e, labels))
	}
	return out
}

func isType(typ, change string) func(sseEvent) bool {
	return func(e sseEvent) bool {
		return e.Type == typ && strings.Contains(e.Data, `"change":"`+change+`"`)
	}
}

// opSession creates a session with the operator's token (any repo).
func (h *harness) opSession(repo, branch string) *agentSession {
	h.t.Helper()
	r := h.do("POST", "/v1/sessions", h.operator, map[string]any{"repo": repo, "role": "author", "issue": 7, "branch": branch,
		"agent": map[string]any{"runtime": "claude-code"}}).expect(h.t, 201, "")
	return &agentSession{id: r.str("session", "id"), run: r.str("run", "id"), token: r.num("run", "fencing_token"),
		repo: repo, role: "author", branch: branch}
}

// TestWatchDeliversChanges: checkpoint writes, leases, runs, a park and a
// drain reach every watcher whose token and filters cover them, with
// their type and data, and nothing else does: a scoped reader never sees
// another repo, a session filter sees that session and the drain (once).
func TestWatchDeliversChanges(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		w := newWatchServer(t, storetest.Open(t, b, checkpointd.SystemClock{}), nil)
		all := w.watch(w.operator, "", "")
		reader := w.watch(w.reader, "", "") // scoped to acme/widgets
		others := w.watch(w.operator, "?repo=other/*", "")
		exact := w.watch(w.operator, "?repo=acme/widgets", "")
		a := w.agentSession("a", "acme/widgets", "author", "fix-a")
		// A stream starts where this replica's feed reader is: once the
		// creation reached a watcher, a new one starts after it.
		pre := all.until(isType("run", "started"))
		one := w.watch(w.reader, "?session="+a.id, "")
		b2 := w.opSession("other/thing", "fix-b")
		labels := map[string]string{a.id: "A", b2.id: "B"}

		head := "0123456789abcdef0123456789abcdef01234567"
		w.checkpoint(a, a.doc(head)).expect(t, 201, "")
		l := w.do("POST", "/v1/leases", w.agent, map[string]any{"resource": map[string]any{"kind": "issue", "repo": "acme/widgets", "number": 7},
			"session_id": a.id, "run_id": a.run, "ttl_seconds": 60}).expect(t, 201, "")
		w.do("DELETE", "/v1/leases/"+l.str("lease", "id")+"?run_id="+a.run, w.agent, nil).expect(t, 204, "")
		w.do("POST", "/v1/sessions/"+a.id+"/park", w.operator, map[string]any{"reason": "stop"}).expect(t, 200, "")
		w.do("POST", "/v1/drain", w.operator, map[string]any{"reason": "deploy"}).expect(t, 201, "")
		w.do("POST", "/v1/drain/cancel", w.operator, nil).expect(t, 200, "")

		aEvents := []string{"checkpoint A", "lease/acquired A", "lease/released A", "run/parked A"}
		drain := []string{"drain/started", "drain/cancelled"}
		cat := func(parts ...[]string) []string {
			var out []string
			for _, p := range parts {
				out = append(out, p...)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			s    *stream
			want []string
		}{
			{"operator", all, cat([]string{"session/created A", "run/started A", "session/created B", "run/started B"}, aEvents, drain)},
			{"scoped reader", reader, cat([]string{"session/created A", "run/started A"}, aEvents, drain)},
			{"repo=other/*", others, cat([]string{"session/created B", "run/started B"}, drain)},
			{"repo=acme/widgets", exact, cat([]string{"session/created A", "run/started A"}, aEvents, drain)},
			{"session=A", one, cat(aEvents, drain)},
		} {
			evs := tc.s.until(isType("drain", "cancelled"))
			if tc.s == all {
				evs = append(pre, evs...)
			}
			got := summaries(t, evs, labels)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("%s: events (-want +got):\n%s", tc.name, diff)
			}
		}

		// The data is what the log says, with the session on top.
		s := w.watch(w.operator, "?session="+a.id, "")
		w.checkpoint(a, a.doc(head)).expect(t, 409, "") // parked: no current run
		takeover := w.do("POST", "/v1/sessions/"+a.id+"/runs", w.agent, map[string]any{"takeover": true, "reason": "resume"}).expect(t, 201, "")
		newRun := takeover.str("run", "id")
		doc := checkpointDoc(newRun, takeover.num("run", "fencing_token"), func(d map[string]any) {
			d["target"] = map[string]any{"repo": a.repo, "issue": 7}
			d["workspace"] = map[string]any{"branch": a.branch, "head": head}
		})
		w.checkpoint(a, doc).expect(t, 201, "")
		evs := s.until(func(e sseEvent) bool { return e.Type == "checkpoint" })
		if diff := cmp.Diff([]string{"run/unparked A", "run/started A", "checkpoint A"}, summaries(t, evs, labels)); diff != "" {
			t.Fatalf("after the takeover (-want +got):\n%s", diff)
		}
		cp := evs[2].json(t)
		if cp["repo"] != "acme/widgets" || cp["run_id"] != newRun || cp["seq"] != float64(2) || cp["complete"] != true ||
			cp["stage"] != "implementing" || evs[2].ID == "" {
			t.Errorf("checkpoint event %s (id %q)", evs[2].Data, evs[2].ID)
		}
	})
}

// TestWatchValidityFromWebhook: a signed push that moves a session's
// branch reaches its watcher as a validity event with from, to, reason
// and evidence.
func TestWatchValidityFromWebhook(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		first := loadDelivery(t, "07-push-new-branch.json")
		w := newWatchServer(t, storetest.Open(t, b, checkpointd.SystemClock{}), withWebhook(first.Secret))
		var push struct{ After string }
		_ = json.Unmarshal([]byte(first.Body), &push)
		s := w.opSession("operator/demo", "feature/alpha")
		doc := checkpointDoc(s.run, s.token, func(d map[string]any) {
			d["target"] = map[string]any{"repo": "operator/demo"}
			d["workspace"] = map[string]any{"branch": "feature/alpha", "head": push.After}
		})
		w.do("POST", "/v1/sessions/"+s.id+"/checkpoints", w.operator, doc).expect(t, 201, "")
		st := w.watch(w.operator, "?session="+s.id, "")
		w.deliver(first)
		w.deliver(loadDelivery(t, "09-push-fast-forward.json"))
		var got []map[string]any
		for _, e := range st.until(func(e sseEvent) bool { return strings.Contains(e.Data, `"to":"stale"`) }) {
			if e.Type == "validity" {
				got = append(got, e.json(t))
			}
		}
		if len(got) != 2 || got[0]["from"] != "unverified" || got[0]["to"] != "valid" || got[1]["from"] != "valid" {
			t.Fatalf("validity events %v", got)
		}
		stale := got[1]
		ev, _ := stale["evidence"].(map[string]any)
		if stale["reason"] == "" || ev == nil || len(ev) == 0 || stale["session_id"] != s.id || stale["repo"] != "operator/demo" {
			t.Errorf("stale event %v: want a reason and evidence", stale)
		}
	})
}

// TestWatchResume: a client that reconnects with the id of the last event
// it got gets every change it missed, once, in order, then the live ones;
// also from a new store and handler on the same database (a restart).
func TestWatchResume(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		w := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
		s := w.watch(w.operator, "", "")
		a := w.agentSession("a", "acme/widgets", "author", "fix-a")
		got := s.until(isType("run", "started"))
		resumeFrom := got[0].ID // after session/created: run/started is missed too
		s.close()

		head := "0123456789abcdef0123456789abcdef01234567"
		w.checkpoint(a, a.doc(head)).expect(t, 201, "")
		w.do("POST", "/v1/sessions/"+a.id+"/runs", w.agent, map[string]any{"takeover": true, "reason": "crash"}).expect(t, 201, "")
		want := []string{"run/started A", "checkpoint A", "run/superseded A", "run/started A"}
		labels := map[string]string{a.id: "A"}

		for _, tc := range []struct {
			name string
			srv  *watchServer
		}{
			{"same daemon", w},
			{"restarted", newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)},
		} {
			r := tc.srv.watch(tc.srv.operator, "", resumeFrom)
			var evs []sseEvent
			for range want {
				e, ok := r.next(5 * time.Second)
				if !ok {
					t.Fatalf("%s: stalled after %v", tc.name, summaries(t, evs, labels))
				}
				evs = append(evs, e)
			}
			if diff := cmp.Diff(want, summaries(t, evs, labels)); diff != "" {
				t.Fatalf("%s: missed events (-want +got):\n%s", tc.name, diff)
			}
			if e, quiet := r.quiet(200 * time.Millisecond); !quiet {
				t.Fatalf("%s: a duplicate or extra event %+v", tc.name, e)
			}
			if tc.srv == w {
				// Live changes follow the backlog.
				w.do("POST", "/v1/sessions/"+a.id+"/end", w.operator, map[string]any{"outcome": "abandoned"}).expect(t, 200, "")
				if e, ok := r.next(5 * time.Second); !ok || summary(t, e, labels) != "session/ended A" {
					t.Fatalf("%s: live event %+v", tc.name, e)
				}
				want = append(want, "session/ended A")
			}
			// Resuming from the last event sees nothing new.
			again := tc.srv.watch(tc.srv.operator, "", r.lastID)
			if e, quiet := again.quiet(200 * time.Millisecond); !quiet {
				t.Fatalf("%s: resume from the last id got %+v", tc.name, e)
			}
		}
	})
}

// TestWatchReset: an id that cannot be resumed from (garbage, another
// database's, older than the backlog) gets a reset event with the reason,
// then one session event per active session in scope, the last with an
// id to resume from; then live changes.
func TestWatchReset(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		clock := checkpointd.NewManualClock(time.Now())
		st := storetest.Open(t, b, clock)
		w := newWatchServer(t, st, nil)
		a := w.agentSession("a", "acme/widgets", "author", "fix-a")
		w.agentSession("other", "acme/gadgets", "author", "fix-g") // outside the reader's scope
		ended := w.agentSession("ended", "acme/widgets", "author", "fix-e")
		w.do("POST", "/v1/sessions/"+ended.id+"/end", w.operator, map[string]any{"outcome": "abandoned"}).expect(t, 200, "")
		old := w.watch(w.reader, "", "")
		w.checkpoint(a, a.doc("0123456789abcdef0123456789abcdef01234567")).expect(t, 201, "")
		e, _ := old.next(5 * time.Second)
		oldID := e.ID
		other := newWatchServer(t, storetest.Open(t, b, clock), nil)
		otherID := other.watch(other.operator, "", "")
		other.opSession("x/y", "b")
		oe, _ := otherID.next(5 * time.Second)

		for _, tc := range []struct {
			name, id, reason string
			advance          time.Duration
		}{
			{"garbage", "not-an-id", "unparsable", 0},
			{"another database", oe.ID, "other_feed", 0},
			{"older than the backlog", oldID, "too_old", 25 * time.Hour},
		} {
			clock.Advance(tc.advance)
			s := w.watch(w.reader, "", tc.id)
			reset, _ := s.next(5 * time.Second)
			if reset.Type != "reset" || reset.json(t)["reason"] != tc.reason || reset.ID != "" {
				t.Fatalf("%s: first event %+v, want reset %s without id", tc.name, reset, tc.reason)
			}
			state, _ := s.next(5 * time.Second)
			d := state.json(t)
			if state.Type != "session" || d["change"] != "current" || d["session_id"] != a.id || state.ID == "" {
				t.Fatalf("%s: state %+v, want session %s (the one active in scope) with an id", tc.name, state, a.id)
			}
			if e, quiet := s.quiet(200 * time.Millisecond); !quiet {
				t.Fatalf("%s: more than the state: %+v", tc.name, e)
			}
			w.checkpoint(a, a.doc("0123456789abcdef0123456789abcdef01234567")).expect(t, 201, "")
			if e, ok := s.next(5 * time.Second); !ok || e.Type != "checkpoint" {
				t.Fatalf("%s: live event %+v", tc.name, e)
			}
		}
	})
}
