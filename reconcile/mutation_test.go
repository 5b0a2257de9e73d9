package reconcile_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/reconcile/forgetest"
)

const (
	mutRepo = "acme/widgets"
	headOld = "1111111111111111111111111111111111111111"
	headNew = "2222222222222222222222222222222222222222"
)

// mutationWorld is a fake Gitea with a repository, a resolver over the
// real SDK client, and a session bound to branch fix-12.
type mutationWorld struct {
	forge *forgetest.Server
	r     *reconcile.Resolver
	sess  *checkpointd.Session
	at    time.Time // when the checkpoints were written
}

func newMutationWorld(t *testing.T) *mutationWorld {
	f := forgetest.New(t)
	f.AddRepo(7, mutRepo)
	f.SetBranch(mutRepo, "fix-12", headOld)
	f.SetPull(mutRepo, forgetest.Pull{Number: 34, State: "open", HeadRef: "fix-12", HeadSHA: headOld})
	return &mutationWorld{forge: f, r: &reconcile.Resolver{Forge: reconcile.Gitea(f.URL, "", 0), Timeout: 5 * time.Second},
		sess: &checkpointd.Session{ID: "ses_1", Repo: mutRepo, Branch: "fix-12"}, at: time.Now().Add(-time.Minute)}
}

func (w *mutationWorld) resolve(t *testing.T, kind, target, key string) *checkpointd.MutationAnswer {
	t.Helper()
	cp := &checkpointd.Checkpoint{CreatedAt: w.at, Document: checkpointd.Document{
		Workspace:       &checkpointd.Workspace{Branch: "fix-12"},
		PendingMutation: &checkpointd.PendingMutation{Kind: kind, Target: target, IdempotencyKey: key}}}
	a := w.r.Resolve(t.Context(), w.sess, cp)
	if a == nil || a.CheckedAt.IsZero() || a.Reason == "" {
		t.Fatalf("%s %s: answer %+v, want one with checked_at and a reason", kind, target, a)
	}
	return a
}

func want(t *testing.T, a *checkpointd.MutationAnswer, outcome checkpointd.MutationOutcome, reasonHas string) {
	t.Helper()
	if a.Outcome != outcome || !strings.Contains(a.Reason, reasonHas) {
		t.Fatalf("answer %+v, want %s with a reason naming %q", a, outcome, reasonHas)
	}
}

// TestResolveEachKind: every kind the daemon knows, done and not done,
// with the evidence that shows it.
func TestResolveEachKind(t *testing.T) {
	w := newMutationWorld(t)
	now := time.Now()

	// gitea.pr.create: a PR from the branch, open or closed.
	w.r.CacheFor = time.Nanosecond
	a := w.resolve(t, checkpointd.MutationPRCreate, mutRepo, "")
	want(t, a, checkpointd.MutationDone, "#34")
	if a.Evidence == nil || a.Evidence.PR != 34 || !strings.HasSuffix(a.Evidence.URL, "/acme/widgets/pulls/34") || a.Evidence.State != "open" || a.Evidence.Head != headOld {
		t.Fatalf("pr.create evidence: %+v", a.Evidence)
	}
	w.sess.Branch = "fix-13"
	cp := &checkpointd.Checkpoint{CreatedAt: w.at, Document: checkpointd.Document{
		Workspace:       &checkpointd.Workspace{Branch: "fix-13"},
		PendingMutation: &checkpointd.PendingMutation{Kind: checkpointd.MutationPRCreate}}}
	want(t, w.r.Resolve(t.Context(), w.sess, cp), checkpointd.MutationNotDone, "fix-13")
	w.sess.Branch = "fix-12"

	// Comments on a PR or an issue, by marker.
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "reply-1"), checkpointd.MutationNotDone, "checkpointd:reply-1")
	w.forge.AddComment(mutRepo, 34, forgetest.Comment{ID: 501, Body: "LGTM <!-- checkpointd:reply-10 -->", Updated: now})
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "reply-1"), checkpointd.MutationNotDone, "checkpointd:reply-1")
	w.forge.AddComment(mutRepo, 34, forgetest.Comment{ID: 502, Body: "Fixed. <!-- checkpointd:reply-1 -->", Updated: now})
	a = w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "reply-1")
	want(t, a, checkpointd.MutationDone, "502")
	if a.Evidence == nil || a.Evidence.CommentID != 502 || !strings.Contains(a.Evidence.URL, "issuecomment-502") {
		t.Fatalf("comment evidence: %+v", a.Evidence)
	}
	w.forge.AddComment(mutRepo, 12, forgetest.Comment{ID: 601, Body: "old <!-- checkpointd:triage -->", Updated: w.at.Add(-time.Hour)})
	want(t, w.resolve(t, checkpointd.MutationIssueComment, mutRepo+"#12", "triage"), checkpointd.MutationNotDone, "checkpointd:triage")
	w.forge.AddComment(mutRepo, 12, forgetest.Comment{ID: 602, Body: "<!-- checkpointd:triage -->\nTriaged.", Updated: now})
	want(t, w.resolve(t, checkpointd.MutationIssueComment, mutRepo+"#12", "triage"), checkpointd.MutationDone, "602")

	// Reviews, by marker.
	want(t, w.resolve(t, checkpointd.MutationPRReview, mutRepo+"!34", "rev-1"), checkpointd.MutationNotDone, "checkpointd:rev-1")
	w.forge.AddReview(mutRepo, 34, forgetest.Comment{ID: 701, Body: "Approved <!-- checkpointd:rev-1 -->", Updated: now})
	a = w.resolve(t, checkpointd.MutationPRReview, mutRepo+"!34", "rev-1")
	want(t, a, checkpointd.MutationDone, "701")
	if a.Evidence == nil || a.Evidence.ReviewID != 701 || a.Evidence.PR != 34 {
		t.Fatalf("review evidence: %+v", a.Evidence)
	}

	// Merge: open, closed unmerged, merged.
	want(t, w.resolve(t, checkpointd.MutationPRMerge, mutRepo+"!34", "m"), checkpointd.MutationNotDone, "open")
	w.forge.SetPull(mutRepo, forgetest.Pull{Number: 34, State: "closed", HeadRef: "fix-12", HeadSHA: headOld})
	want(t, w.resolve(t, checkpointd.MutationPRMerge, mutRepo+"!34", "m"), checkpointd.MutationNotDone, "without being merged")
	w.forge.SetPull(mutRepo, forgetest.Pull{Number: 34, State: "closed", Merged: true, HeadRef: "fix-12", HeadSHA: headOld})
	a = w.resolve(t, checkpointd.MutationPRMerge, mutRepo+"!34", "m")
	want(t, a, checkpointd.MutationDone, "merged")
	if a.Evidence == nil || a.Evidence.State != "merged" || a.Evidence.PR != 34 {
		t.Fatalf("merge evidence: %+v", a.Evidence)
	}
	// A closed PR still counts as created.
	want(t, w.resolve(t, checkpointd.MutationPRCreate, mutRepo, ""), checkpointd.MutationDone, "merged")

	// git.push: the branch's head on the forge is the commit.
	a = w.resolve(t, checkpointd.MutationGitPush, headNew, "p")
	want(t, a, checkpointd.MutationNotDone, headOld)
	if a.Evidence == nil || a.Evidence.Head != headOld {
		t.Fatalf("push evidence: %+v", a.Evidence)
	}
	w.forge.SetBranch(mutRepo, "fix-12", headNew)
	a = w.resolve(t, checkpointd.MutationGitPush, strings.ToUpper(headNew), "p")
	want(t, a, checkpointd.MutationDone, headNew)
	w.forge.DeleteBranch(mutRepo, "fix-12")
	want(t, w.resolve(t, checkpointd.MutationGitPush, headNew, "p"), checkpointd.MutationUnknown, "no branch fix-12")
}

// TestResolvePagedLists: the marker on the third page is found; a list
// longer than the bound without it is not an answer; a fork's branch of
// the same name is not the session's.
func TestResolvePagedLists(t *testing.T) {
	w := newMutationWorld(t)
	now := time.Now()
	for i := range 120 {
		body := fmt.Sprintf("comment %d", i)
		if i == 110 {
			body += " <!-- checkpointd:deep -->"
		}
		w.forge.AddComment(mutRepo, 34, forgetest.Comment{ID: int64(1000 + i), Body: body, Updated: now})
	}
	w.forge.ResetCalls()
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "deep"), checkpointd.MutationDone, "1110")
	if n := w.forge.Calls(); n != 3 {
		t.Fatalf("the marker on page 3 took %d calls (%v), want 3", n, w.forge.Paths())
	}
	for i := range 200 {
		w.forge.AddComment(mutRepo, 34, forgetest.Comment{ID: int64(2000 + i), Body: "more", Updated: now})
	}
	w.forge.ResetCalls()
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "absent"), checkpointd.MutationUnknown, "more comments than the 250 read")
	if n := w.forge.Calls(); n != 5 {
		t.Fatalf("a search past the bound took %d calls, want 5", n)
	}
	// Sixty PRs from other branches, the session's branch's PR the oldest.
	for n := int64(100); n < 160; n++ {
		w.forge.SetPull(mutRepo, forgetest.Pull{Number: n, State: "open", HeadRef: fmt.Sprintf("other-%d", n), HeadSHA: headNew})
	}
	want(t, w.resolve(t, checkpointd.MutationPRCreate, mutRepo, ""), checkpointd.MutationDone, "#34")
}

// TestResolveUnknown: whenever the forge is not asked or cannot say, the
// answer is unknown with the reason, never a guess, and it is not kept.
func TestResolveUnknown(t *testing.T) {
	w := newMutationWorld(t)
	for _, c := range []struct{ kind, target, key, reason string }{
		{"gitea.label.add", mutRepo + "#12", "k", "cannot check gitea.label.add"},
		{checkpointd.MutationPRComment, "other/repo!34", "k", "not in the session's repository"},
		{checkpointd.MutationPRComment, "acme/widgets", "k", "names no pull request"},
		{checkpointd.MutationPRComment, mutRepo + "!34", "", "no idempotency_key"},
		{checkpointd.MutationPRReview, mutRepo + "#12", "k", "needs a pull request"},
		{checkpointd.MutationGitPush, "main", "k", "40 or 64 hex"},
	} {
		w.forge.ResetCalls()
		want(t, w.resolve(t, c.kind, c.target, c.key), checkpointd.MutationUnknown, c.reason)
		if n := w.forge.Calls(); n != 0 {
			t.Fatalf("%s %s asked the forge %d times", c.kind, c.target, n)
		}
	}
	// The forge down, then back: the unknown answer was not kept.
	w.forge.Intercept(forgetest.Status("/comments", http.StatusServiceUnavailable, ""))
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "k"), checkpointd.MutationUnknown, "503")
	w.forge.Intercept(nil)
	want(t, w.resolve(t, checkpointd.MutationPRComment, mutRepo+"!34", "k"), checkpointd.MutationNotDone, "checkpointd:k")
	// Too slow.
	w.r.Timeout = 200 * time.Millisecond
	w.forge.Intercept(func(http.ResponseWriter, *http.Request) bool { time.Sleep(time.Second); return false })
	want(t, w.resolve(t, checkpointd.MutationPRMerge, mutRepo+"!34", "m"), checkpointd.MutationUnknown, "did not answer")
	w.forge.Intercept(nil)
	// No forge configured.
	w.r.Forge = nil
	want(t, w.resolve(t, checkpointd.MutationPRMerge, mutRepo+"!34", "m"), checkpointd.MutationUnknown, "forge not configured")
}

// TestResolveCaches: a done answer is reused within CacheFor (its
// checked_at says when it was asked), and asked again after.
func TestResolveCaches(t *testing.T) {
	w := newMutationWorld(t)
	w.r.CacheFor = time.Hour
	first := w.resolve(t, checkpointd.MutationPRCreate, mutRepo, "")
	w.forge.ResetCalls()
	again := w.resolve(t, checkpointd.MutationPRCreate, mutRepo, "")
	if n := w.forge.Calls(); n != 0 || !again.CheckedAt.Equal(first.CheckedAt) {
		t.Fatalf("a cached answer asked the forge %d times; checked_at %v, first %v", n, again.CheckedAt, first.CheckedAt)
	}
	w.r.CacheFor = time.Nanosecond
	w.resolve(t, checkpointd.MutationPRCreate, mutRepo, "")
	if n := w.forge.Calls(); n != 1 {
		t.Fatalf("an expired answer asked the forge %d times, want 1", n)
	}
}
