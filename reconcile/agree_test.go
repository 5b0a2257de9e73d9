package reconcile_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook"
)

// delivery is a real Gitea 1.25.4 delivery (testdata/gitea, copied byte
// for byte from the shared fixtures).
type delivery struct {
	Method, Path string
	Headers      map[string]string
	Body, Secret string
}

func loadDelivery(t *testing.T, name string) delivery {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "gitea", name))
	if err != nil {
		t.Fatal(err)
	}
	var d delivery
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// payload is what the forge state after the delivery is, read from it.
type payload struct {
	Ref, After  string
	RefType     string `json:"ref_type"`
	PullRequest *struct {
		Number int64
		State  string
		Merged bool
		Head   struct{ Ref, Sha string }
	} `json:"pull_request"`
}

// TestWebhookAndReconcileAgree: the same forge event judged from its real
// webhook delivery, or found by a reconcile pass asking the forge, gives
// the same validity, the same reason and the same lease outcome — both go
// through checkpointd.JudgeValidity in the store, and nothing else decides.
func TestWebhookAndReconcileAgree(t *testing.T) {
	const first = "2d180d0b5a6ae702d5efc399f36073d5952b6c59" // feature/alpha as 07 created it
	cases := []struct {
		name, delivery string
		pr             int64 // the session is bound to PR 1 instead of the branch
		head           string
		want           checkpointd.Validity
	}{
		{"push at the checkpoint's head", "07-push-new-branch.json", 0, first, checkpointd.ValidityValid},
		{"push past the checkpoint's head", "09-push-fast-forward.json", 0, first, checkpointd.ValidityStale},
		{"PR opened at the checkpoint's head", "13-pull_request-opened.json", 1, "8c7cc07de608f0199412420c337fc86ce21b58c5", checkpointd.ValidityValid},
		{"PR opened elsewhere", "13-pull_request-opened.json", 1, first, checkpointd.ValidityStale},
		{"PR closed", "18-pull_request-closed.json", 1, first, checkpointd.ValidityInvalidated},
		{"PR merged", "20-pull_request-closed-merged.json", 1, first, checkpointd.ValidityInvalidated},
		{"branch deleted", "22-delete-branch.json", 0, first, checkpointd.ValidityInvalidated},
	}
	type outcome struct {
		Validity checkpointd.Validity
		Reason   string
		Lease    checkpointd.LeaseState
	}
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				d := loadDelivery(t, c.delivery)
				var p payload
				if err := json.Unmarshal([]byte(d.Body), &p); err != nil {
					t.Fatal(err)
				}
				judge := func(e *env, apply func()) outcome {
					branch, res := "feature/alpha", checkpointd.Resource{Kind: checkpointd.ResourceBranch, Repo: "operator/demo", Branch: "feature/alpha"}
					if c.pr > 0 {
						branch, res = "", checkpointd.Resource{Kind: checkpointd.ResourcePR, Repo: "operator/demo", Number: c.pr}
					}
					sess := e.session("operator/demo", branch, c.pr, c.head)
					l, ref := e.lease(sess, res)
					e.checkpoint(sess, c.head, ref)
					apply()
					got := e.get(sess)
					lease, err := e.s.GetLease(t.Context(), l.ID)
					if err != nil {
						t.Fatal(err)
					}
					return outcome{got.Validity, got.ValidityReason, lease.State}
				}

				hooked := newEnv(t, b)
				viaWebhook := judge(hooked, func() {
					h := &webhook.Handler{Verifier: &webhook.Verifier{Secrets: [][]byte{[]byte(d.Secret)}}, Store: hooked.s,
						Log: slog.New(slog.DiscardHandler)}
					r := httptest.NewRequest(d.Method, d.Path, strings.NewReader(d.Body))
					for k, v := range d.Headers {
						r.Header.Set(k, v)
					}
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, r)
					if rec.Code != http.StatusOK {
						t.Fatalf("delivery %s: %d %s", c.delivery, rec.Code, rec.Body)
					}
				})

				asked := newEnv(t, b)
				asked.forge.AddRepo(1, "operator/demo")
				switch {
				case p.PullRequest != nil:
					pr := p.PullRequest
					asked.forge.SetPull("operator/demo", forgetestPull(pr.Number, pr.State, pr.Merged, pr.Head.Ref, pr.Head.Sha))
				case p.RefType == "branch": // deleted: the forge has no such branch
				default:
					asked.forge.SetBranch("operator/demo", strings.TrimPrefix(p.Ref, "refs/heads/"), p.After)
				}
				viaReconcile := judge(asked, func() { asked.pass() })

				if viaWebhook.Validity != c.want {
					t.Errorf("via webhook: %+v, want %s", viaWebhook, c.want)
				}
				if diff := cmp.Diff(viaWebhook, viaReconcile); diff != "" {
					t.Errorf("webhook and reconcile disagree (-webhook +reconcile):\n%s", diff)
				}
			})
		}
	})
}
