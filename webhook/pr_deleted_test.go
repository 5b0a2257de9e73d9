package webhook

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestDeletedPRInvalidates replays Gitea 1.25.4's deliveries for an open PR
// that was deleted: the deletion says "action": "deleted" with "state":
// "open", and must end the PR exactly as a close does — its sessions
// invalidated, its lease released, both in the event log — and no later
// delivery about the PR (a manual redelivery of its sync, a reopen) brings
// the session back.
func TestDeletedPRInvalidates(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		sc := newScenario(t, b)
		const branch = "probe-open-delete"
		head := sc.sha("41-pull_request-opened-pr8.json", "head")
		sess, err := sc.s.CreateSession(t.Context(), store.NewSession{Repo: "Operator/Demo", Role: "author", PR: 8, Branch: branch})
		if err != nil {
			t.Fatal(err)
		}
		l, err := sc.s.AcquireLease(t.Context(), store.NewLease{Resource: checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "operator/demo", Number: 8},
			SessionID: sess.ID, RunID: sess.CurrentRun.ID, TTL: 3600e9})
		if err != nil {
			t.Fatal(err)
		}
		sc.checkpointOn(sess, branch, head, checkpointd.LeaseRef{LeaseID: l.ID, FencingToken: l.FencingToken})

		sc.ok("41-pull_request-opened-pr8.json")
		sc.validity(sess, checkpointd.ValidityValid)
		sc.ok("42-pull_request-synchronized-pr8.json")
		sc.validity(sess, checkpointd.ValidityValid)

		deletion := loadFixture(t, "gitea/43-pull_request-deleted-open-pr8.json")
		if !strings.Contains(deletion.Body, `"action": "deleted"`) || !strings.Contains(deletion.Body, `"state": "open"`) {
			t.Fatal("fixture 43 is not an open PR's deletion")
		}
		body := sc.ok("43-pull_request-deleted-open-pr8.json")
		fx, _ := body["effects"].(map[string]any)
		if moved, _ := fx["sessions"].(map[string]any); fx["leases_released"] != 1.0 || moved["invalidated"] != 1.0 {
			t.Fatalf("deletion effects %v: want the lease released and the session invalidated", body)
		}
		sc.validity(sess, checkpointd.ValidityInvalidated)
		if got, err := sc.s.GetLease(t.Context(), l.ID); err != nil || got.State != checkpointd.LeaseReleased {
			t.Fatalf("PR lease after the deletion: %+v, %v", got, err)
		}
		wantDeletionEvents(t, sc.events(sess), deletion.Headers["X-Gitea-Delivery"], l.ID)

		// The same delivery again: no second effect.
		n := len(sc.events(sess))
		if _, dup := sc.deliver("43-pull_request-deleted-open-pr8.json"); dup["duplicate"] != true {
			t.Fatalf("the deletion delivered twice: %v", dup)
		}
		// A manual redelivery of the sync (new id, same body, as Gitea's
		// replay sends it) and a reopen of the PR: invalidated is one-way.
		sync := loadFixture(t, "gitea/42-pull_request-synchronized-pr8.json")
		replay := sync.request()
		replay.Header.Set("X-Gitea-Delivery", "6c7f0bb1-0000-4000-8000-00000000replay")
		if code, answer := sc.send(replay); code != http.StatusOK {
			t.Fatalf("redelivered sync: %d %v", code, answer)
		}
		opened := loadFixture(t, "gitea/41-pull_request-opened-pr8.json")
		reopenedBody := strings.Replace(opened.Body, `"action": "opened"`, `"action": "reopened"`, 1)
		if code, answer := sc.send(signedRequest(opened.Secret, "pull_request", reopenedBody)); code != http.StatusOK || answer["effects"] == nil {
			t.Fatalf("reopen: %d %v", code, answer)
		}
		sc.validity(sess, checkpointd.ValidityInvalidated)
		// Nor does a checkpoint at the PR's head.
		sc.checkpointOn(sess, branch, head)
		sc.validity(sess, checkpointd.ValidityInvalidated)
		for _, ev := range sc.events(sess)[n:] {
			if ev.Kind == checkpointd.EventValidity {
				t.Errorf("validity changed after the deletion: %s", ev.Data)
			}
		}
	})
}

// wantDeletionEvents checks the log shows the lease released and the
// session invalidated, with the deletion delivery as the evidence.
func wantDeletionEvents(t *testing.T, evs []checkpointd.Event, delivery, leaseID string) {
	t.Helper()
	var released, invalidated bool
	for _, ev := range evs {
		var data map[string]any
		if err := json.Unmarshal(ev.Data, &data); err != nil {
			t.Fatalf("event %s: %v", ev.Kind, err)
		}
		switch ev.Kind {
		case checkpointd.EventLeaseReleased:
			released = released || data["lease_id"] == leaseID
		case checkpointd.EventValidity:
			invalidated = invalidated || data["to"] == string(checkpointd.ValidityInvalidated) &&
				data["source"] == "webhook:"+delivery && data["ref"] == "pr:8"
		}
	}
	if !released || !invalidated {
		t.Fatalf("events: lease released %t, invalidated by webhook:%s %t", released, delivery, invalidated)
	}
}
