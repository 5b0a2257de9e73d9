package webhook

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// scenario replays real Gitea deliveries against a real store and checks
// what they do to the sessions bound to their refs.
type scenario struct {
	t       *testing.T
	s       *store.Store
	handler *Handler
}

func newScenario(t *testing.T, b storetest.Backend) *scenario {
	s := storetest.Open(t, b, checkpointd.SystemClock{})
	// The gitea-type and gogs-type hooks have their own secrets, and so
	// has the later capture of PR #8 (re-signed): all are configured, as
	// during a rotation.
	v := &Verifier{}
	for _, name := range []string{"gitea/09-push-fast-forward.json", "gitea/10-push-fast-forward-gogs-hook.json",
		"gitea/41-pull_request-opened-pr8.json"} {
		v.Secrets = append(v.Secrets, []byte(loadFixture(t, name).Secret))
	}
	return &scenario{t: t, s: s, handler: &Handler{Verifier: v, Store: s, Log: slog.New(slog.DiscardHandler)}}
}

// deliver sends a fixture delivery byte for byte and returns the answer.
func (sc *scenario) deliver(name string) (int, map[string]any) {
	sc.t.Helper()
	return sc.send(loadFixture(sc.t, "gitea/"+name).request())
}

func (sc *scenario) send(r *http.Request) (int, map[string]any) {
	sc.t.Helper()
	rec := httptest.NewRecorder()
	sc.handler.ServeHTTP(rec, r)
	var body map[string]any
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return rec.Code, body
}

// sha reads a full SHA out of a fixture body: field is after, before or the
// PR head.
func (sc *scenario) sha(name, field string) string {
	sc.t.Helper()
	var p struct {
		Before, After string
		PullRequest   struct{ Head struct{ Sha string } } `json:"pull_request"`
	}
	if err := json.Unmarshal([]byte(loadFixture(sc.t, "gitea/"+name).Body), &p); err != nil {
		sc.t.Fatal(err)
	}
	switch field {
	case "before":
		return p.Before
	case "after":
		return p.After
	}
	return p.PullRequest.Head.Sha
}

func (sc *scenario) session(pr int64) *checkpointd.Session {
	sc.t.Helper()
	sess, err := sc.s.CreateSession(sc.t.Context(), store.NewSession{Repo: "Operator/Demo", Role: "author", PR: pr, Branch: "feature/alpha"})
	if err != nil {
		sc.t.Fatal(err)
	}
	return sess
}

func (sc *scenario) checkpoint(sess *checkpointd.Session, head string, leases ...checkpointd.LeaseRef) {
	sc.t.Helper()
	sc.checkpointOn(sess, "feature/alpha", head, leases...)
}

// checkpointOn writes a complete checkpoint whose workspace is head on branch.
func (sc *scenario) checkpointOn(sess *checkpointd.Session, branch, head string, leases ...checkpointd.LeaseRef) {
	sc.t.Helper()
	run := sess.CurrentRun
	d := &checkpointd.Document{SchemaVersion: 1, RunID: run.ID, FencingToken: run.FencingToken, Role: "author",
		Stage: "implementing", Workspace: &checkpointd.Workspace{Branch: branch, Head: head}, Leases: leases}
	if _, err := sc.s.WriteCheckpoint(sc.t.Context(), store.CheckpointWrite{SessionID: sess.ID, Doc: d, Digest: "d"}); err != nil {
		sc.t.Fatal(err)
	}
}

func (sc *scenario) validity(sess *checkpointd.Session, want checkpointd.Validity) {
	sc.t.Helper()
	// Read as the API reads: after Settled.
	if err := sc.s.Settled(sc.t.Context()); err != nil {
		sc.t.Fatal(err)
	}
	got, err := sc.s.GetSession(sc.t.Context(), sess.ID)
	if err != nil {
		sc.t.Fatal(err)
	}
	if got.Validity != want {
		sc.t.Fatalf("session validity %q (%s), want %q", got.Validity, got.ValidityReason, want)
	}
}

func (sc *scenario) events(sess *checkpointd.Session) []checkpointd.Event {
	sc.t.Helper()
	evs, err := sc.s.ListEvents(sc.t.Context(), sess.ID, 0, 500)
	if err != nil {
		sc.t.Fatal(err)
	}
	return evs
}

// ok delivers a fixture that must be accepted and returns the answer.
func (sc *scenario) ok(name string) map[string]any {
	sc.t.Helper()
	code, body := sc.deliver(name)
	if code != http.StatusOK {
		sc.t.Fatalf("%s: status %d: %v", name, code, body)
	}
	return body
}

func TestDeliveriesJudgeSessions(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := newScenario(t, b)
		branchSess := sc.session(0)
		sc.checkpoint(branchSess, sc.sha("07-push-new-branch.json", "after"))
		sc.validity(branchSess, checkpointd.ValidityUnverified)

		// The branch is created at the checkpoint's head: valid.
		body := sc.ok("07-push-new-branch.json")
		if fx := body["effects"].(map[string]any)["sessions"].(map[string]any); fx["valid"] != 1.0 {
			t.Fatalf("effects %v", body)
		}
		sc.validity(branchSess, checkpointd.ValidityValid)

		// A fast-forward moves the live head: stale, with the evidence.
		sc.ok("09-push-fast-forward.json")
		sc.validity(branchSess, checkpointd.ValidityStale)
		evs := sc.events(branchSess)
		last := evs[len(evs)-1]
		if last.Kind != checkpointd.EventValidity || !strings.Contains(string(last.Data), "webhook:") ||
			!strings.Contains(string(last.Data), sc.sha("09-push-fast-forward.json", "after")) {
			t.Fatalf("last event %s %s: want the validity change with the delivery and the observed head", last.Kind, last.Data)
		}

		// The same delivery again has no second effect.
		n := len(sc.events(branchSess))
		_, dup := sc.deliver("09-push-fast-forward.json")
		if dup["duplicate"] != true || len(sc.events(branchSess)) != n {
			t.Fatalf("duplicate delivery: %v, events %d → %d", dup, n, len(sc.events(branchSess)))
		}
		// The gogs-type hook's copy of the same push (new delivery id, same
		// body) is harmless: the head it reports is the one held.
		sc.ok("10-push-fast-forward-gogs-hook.json")
		sc.validity(branchSess, checkpointd.ValidityStale)

		// The agent checkpoints the new head: valid again.
		sc.checkpoint(branchSess, sc.sha("09-push-fast-forward.json", "after"))
		sc.validity(branchSess, checkpointd.ValidityValid)
		sc.ok("11-push-force.json")
		sc.validity(branchSess, checkpointd.ValidityStale)

		// A session on PR 1 holding the PR lease.
		prSess := sc.session(1)
		l, err := sc.s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "operator/demo", Number: 1},
			SessionID: prSess.ID, RunID: prSess.CurrentRun.ID, TTL: 3600e9})
		if err != nil {
			t.Fatal(err)
		}
		sc.checkpoint(prSess, sc.sha("13-pull_request-opened.json", "head"), checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken})
		sc.validity(prSess, checkpointd.ValidityValid) // the branch's live head is the PR head
		sc.ok("13-pull_request-opened.json")
		sc.validity(prSess, checkpointd.ValidityValid)
		sc.ok("15-push-fast-forward.json")
		sc.ok("16-pull_request-synchronized.json")
		sc.validity(prSess, checkpointd.ValidityStale)
		sc.checkpoint(prSess, sc.sha("16-pull_request-synchronized.json", "head"), checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken})
		sc.validity(prSess, checkpointd.ValidityValid)

		// Merged: invalidated for good, and the PR lease is released.
		body = sc.ok("20-pull_request-closed-merged.json")
		if body["effects"].(map[string]any)["leases_released"] != 1.0 {
			t.Fatalf("merge effects %v", body)
		}
		sc.validity(prSess, checkpointd.ValidityInvalidated)
		if got, _ := sc.s.GetLease(t.Context(), l.ID); got.State != checkpointd.LeaseReleased {
			t.Fatalf("PR lease after merge: %s", got.State)
		}
		sc.checkpoint(prSess, sc.sha("16-pull_request-synchronized.json", "head"))
		sc.validity(prSess, checkpointd.ValidityInvalidated)

		// The branch is deleted: its session is invalidated.
		sc.ok("22-delete-branch.json")
		sc.validity(branchSess, checkpointd.ValidityInvalidated)
	})
}

func TestRejectedDeliveriesHaveNoEffect(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := newScenario(t, b)
		sess := sc.session(0)
		sc.checkpoint(sess, sc.sha("07-push-new-branch.json", "after"))
		sc.ok("07-push-new-branch.json")
		sc.validity(sess, checkpointd.ValidityValid)
		n := len(sc.events(sess))

		f := loadFixture(t, "gitea/09-push-fast-forward.json")
		f.Body = strings.Replace(f.Body, `"after": "`, `"after":  "`, 1) // one byte more
		f.Headers["X-Gitea-Delivery"] = "tampered-1"
		if code, body := sc.send(f.request()); code != http.StatusUnauthorized || body["code"] != "bad_signature" {
			t.Fatalf("tampered delivery: %d %v", code, body)
		}
		unsigned := loadFixture(t, "gitea/09-push-fast-forward.json").request()
		for _, h := range []string{"X-Gitea-Signature", "X-Gogs-Signature", "X-Hub-Signature-256", "X-Hub-Signature"} {
			unsigned.Header.Del(h)
		}
		if code, body := sc.send(unsigned); code != http.StatusUnauthorized || body["code"] != "missing_signature" {
			t.Fatalf("unsigned delivery: %d %v", code, body)
		}
		sc.validity(sess, checkpointd.ValidityValid)
		if len(sc.events(sess)) != n {
			t.Fatal("a rejected delivery changed the event log")
		}
		// The genuine delivery still applies afterwards: nothing recorded
		// its id on the rejected attempts.
		sc.ok("09-push-fast-forward.json")
		sc.validity(sess, checkpointd.ValidityStale)

		// A test delivery (before == after) is acknowledged and ignored.
		code, body := sc.deliver("30-push-test-delivery.json")
		if code != http.StatusOK || body["ignored"] == nil {
			t.Fatalf("test delivery: %d %v", code, body)
		}
		sc.validity(sess, checkpointd.ValidityStale)
	})
}

func TestStoreDownAnswers503(t *testing.T) {
	sc := newScenario(t, storetest.SQLite)
	sc.s.Close()
	code, body := sc.deliver("09-push-fast-forward.json")
	if code != http.StatusServiceUnavailable || body["code"] != "store_unavailable" {
		t.Fatalf("store down: %d %v", code, body)
	}
}

// TestEditOfAClosedPRReadsClosed: an edit of a PR that already merged says
// so in pull_request.state and merged. With no earlier observation of the
// PR (its live ref went with retention, or its close was lost), the edit
// must record the PR as merged, not open: its sessions are invalidated,
// never judged valid against its head. Built from the captured edit by
// changing those two fields and signing it again.
func TestEditOfAClosedPRReadsClosed(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := newScenario(t, b)
		f := loadFixture(t, "gitea/17-pull_request-edited-title.json")
		sess, err := sc.s.CreateSession(t.Context(), store.NewSession{Repo: "Operator/Demo", Role: "author", PR: 1})
		if err != nil {
			t.Fatal(err)
		}
		sc.checkpoint(sess, sc.sha("17-pull_request-edited-title.json", "head"))
		body := strings.Replace(strings.Replace(f.Body, `"state": "open"`, `"state": "closed"`, 1), `"merged": false`, `"merged": true`, 1)
		if body == f.Body {
			t.Fatal("fixture: state and merged not found")
		}
		sc.handler.Verifier = &Verifier{Secrets: [][]byte{[]byte(f.Secret)}}
		code, answer := sc.send(signedRequest(f.Secret, "pull_request", body))
		if code != http.StatusOK {
			t.Fatalf("status %d: %v", code, answer)
		}
		sc.validity(sess, checkpointd.ValidityInvalidated)
		live, err := sc.s.LiveRef(t.Context(), sess)
		if err != nil || live == nil || live.State != checkpointd.RefMerged {
			t.Fatalf("live ref %+v (%v), want the PR merged", live, err)
		}
	})
}
