package api_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestWatchResumesAcrossARestart: a client that had events up to an id,
// then lost its stream while the daemon restarted (and changes went on
// before and after the restart), resumes with Last-Event-ID on the
// restarted daemon — and, on PostgreSQL, on another replica too — and gets
// exactly what it missed, in order, once each, without a reset.
func TestWatchResumesAcrossARestart(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		url := storetest.URL(t, b)
		before := storetest.OpenURL(t, url, checkpointd.SystemClock{})
		a := newWatchServer(t, before, nil)
		operator, agent := a.operator, a.agent // in the database: good on every replica and after the restart
		st := a.watch(operator, "", "")
		sess := a.agentSession("a", "acme/widgets", "author", "fix-a")
		st.until(isType("run", "started"))
		id := st.lastID
		st.close()
		const head = "0123456789abcdef0123456789abcdef01234567"
		a.checkpoint(sess, sess.doc(head)).expect(t, 201, "") // missed before the restart

		// The restart: the server and its store go, new ones come up.
		a.shutdown()
		a.srv.Close()
		if err := before.Close(); err != nil {
			t.Fatal(err)
		}
		after := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
		after.do("POST", "/v1/sessions/"+sess.id+"/checkpoints", agent, sess.doc(head)).expect(t, 201, "") // after it
		after.do("POST", "/v1/sessions/"+sess.id+"/heartbeat", agent, map[string]any{"run_id": sess.run})

		labels := map[string]string{sess.id: "A"}
		want := []string{"checkpoint A", "checkpoint A"}
		resume := func(w *watchServer, where string) {
			t.Helper()
			r := w.watch(operator, "", id)
			got := r.until(func(e sseEvent) bool { return e.Type == "checkpoint" && e.json(t)["seq"] == float64(2) })
			if diff := cmp.Diff(want, summaries(t, got, labels)); diff != "" {
				t.Errorf("resumed %s (-want +got):\n%s", where, diff)
			}
			if e, quiet := r.quiet(500 * time.Millisecond); !quiet {
				t.Errorf("resumed %s: then %+v (a duplicate?)", where, e)
			}
		}
		resume(after, "on the restarted daemon")
		if b == storetest.Postgres {
			other := newWatchServer(t, storetest.OpenURL(t, url, checkpointd.SystemClock{}), nil)
			resume(other, "on another replica")
		}
	})
}
