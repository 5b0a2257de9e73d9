package reconcile

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
)

// Resolver answers whether a checkpoint's pending mutation happened, by
// asking the forge: one bounded search per mutation, the
// answer kept a short while per mutation, and "unknown" with the reason
// whenever the forge was not asked or could not say. It never guesses.
type Resolver struct {
	// Forge opens the forge; nil means none is configured.
	Forge ForgeFactory
	// Timeout bounds one answer, every page of its search included
	// (default 5s).
	Timeout time.Duration
	// CacheFor is how long a done or not_done answer is reused (default
	// 30s). An unknown one never is.
	CacheFor time.Duration
	Clock    checkpointd.Clock
	Metrics  *metrics.Metrics

	mu    sync.Mutex
	cache map[mutationKey]checkpointd.MutationAnswer
}

// mutationKey names one question to the forge.
type mutationKey struct {
	kind, repo, target, key, branch string
}

// maxCachedMutations bounds the cache; when full it starts over.
const maxCachedMutations = 4096

// commentSlack is how long before the checkpoint that recorded it a
// comment may have been made and still be found: the clocks of the forge
// and the daemon differ.
const commentSlack = 10 * time.Minute

// Resolve answers for cp's pending mutation, for session sess; nil when
// cp records none.
func (r *Resolver) Resolve(ctx context.Context, sess *checkpointd.Session, cp *checkpointd.Checkpoint) *checkpointd.MutationAnswer {
	pm := cp.PendingMutation
	if pm == nil {
		return nil
	}
	clock := r.Clock
	if clock == nil {
		clock = checkpointd.SystemClock{}
	}
	branch := sess.Branch
	if cp.Workspace != nil && cp.Workspace.Branch != "" {
		branch = cp.Workspace.Branch
	}
	k := mutationKey{kind: pm.Kind, repo: strings.ToLower(sess.Repo), target: pm.Target, key: pm.IdempotencyKey, branch: branch}
	if a, ok := r.cached(k, clock.Now()); ok {
		return &a
	}
	a := r.ask(ctx, sess.Repo, k, cp.CreatedAt)
	a.CheckedAt = clock.Now().UTC()
	if a.Outcome != checkpointd.MutationUnknown {
		r.keep(k, a)
	}
	return &a
}

func (r *Resolver) cached(k mutationKey, now time.Time) (checkpointd.MutationAnswer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.cache[k]
	if !ok || now.Sub(a.CheckedAt) >= orDefault(r.CacheFor, 30*time.Second) {
		return checkpointd.MutationAnswer{}, false
	}
	return a, true
}

func (r *Resolver) keep(k mutationKey, a checkpointd.MutationAnswer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil || len(r.cache) >= maxCachedMutations {
		r.cache = map[mutationKey]checkpointd.MutationAnswer{}
	}
	r.cache[k] = a
}

func unknown(format string, args ...any) checkpointd.MutationAnswer {
	return checkpointd.MutationAnswer{Outcome: checkpointd.MutationUnknown, Reason: fmt.Sprintf(format, args...)}
}

// ask puts one question to the forge. repo is the session's: a mutation
// of another repository is not looked up, so a session's agent learns
// nothing through the daemon's forge token about a repository it is not
// bound to.
func (r *Resolver) ask(ctx context.Context, repo string, k mutationKey, recorded time.Time) checkpointd.MutationAnswer {
	var target checkpointd.MutationTarget
	switch k.kind {
	case checkpointd.MutationPRCreate:
		if k.branch == "" {
			return unknown("the checkpoint names no workspace.branch to look for a pull request from")
		}
	case checkpointd.MutationPRComment, checkpointd.MutationIssueComment, checkpointd.MutationPRReview, checkpointd.MutationPRMerge:
		t, err := checkpointd.ParseMutationTarget(k.target)
		if err != nil {
			return unknown("%v", err)
		}
		if !strings.EqualFold(t.Repo, repo) {
			return unknown("the target %s is not in the session's repository %s: not looked up", k.target, repo)
		}
		if !t.PR && (k.kind == checkpointd.MutationPRReview || k.kind == checkpointd.MutationPRMerge) {
			return unknown("%s needs a pull request as target (owner/name!N), not %q", k.kind, k.target)
		}
		if k.key == "" && k.kind != checkpointd.MutationPRMerge {
			return unknown("no idempotency_key: nothing to find the %s by", k.kind)
		}
		target = t
	case checkpointd.MutationGitPush:
		if k.branch == "" {
			return unknown("the checkpoint names no workspace.branch to compare the pushed commit with")
		}
		if !checkpointd.ValidCommitID(k.target) {
			return unknown("a git.push target must be the pushed commit (40 or 64 hex digits), not %q", k.target)
		}
	default:
		return unknown("checkpointd cannot check %s against the forge: check it yourself by its idempotency key", k.kind)
	}
	if r.Forge == nil {
		return unknown("%v", ErrForgeNotConfigured)
	}
	ctx, cancel := context.WithTimeout(ctx, orDefault(r.Timeout, 5*time.Second))
	defer cancel()
	f, err := r.Forge(ctx, orDefault(r.Timeout, 5*time.Second))
	if err != nil {
		return unknown("%v", err)
	}
	f = countedForge{f, r.Metrics}
	owner, name, _ := strings.Cut(repo, "/")
	a, err := r.answer(f, owner, name, k, target, recorded)
	var fe *ForgeError
	switch {
	case errors.As(err, &fe):
		return unknown("%s", fe.Error())
	case err != nil:
		return unknown("the forge could not be asked: %v", err)
	}
	return a
}

func (r *Resolver) answer(f Forge, owner, name string, k mutationKey, t checkpointd.MutationTarget, recorded time.Time) (checkpointd.MutationAnswer, error) {
	done := func(e checkpointd.MutationEvidence, why string) checkpointd.MutationAnswer {
		return checkpointd.MutationAnswer{Outcome: checkpointd.MutationDone, Evidence: &e, Reason: why}
	}
	notDone := func(why string) checkpointd.MutationAnswer {
		return checkpointd.MutationAnswer{Outcome: checkpointd.MutationNotDone, Reason: why}
	}
	searched := func(found Found, what string, e checkpointd.MutationEvidence, why string) checkpointd.MutationAnswer {
		switch {
		case found.Exists:
			return done(e, why)
		case found.Truncated:
			return unknown("the forge lists more %s than the %d read, and none of those carries the marker", what, listPages*listPageSize)
		}
		return notDone(fmt.Sprintf("no %s on %s carries the marker %s", strings.TrimSuffix(what, "s"), k.target, checkpointd.MutationMarker(k.key)))
	}
	switch k.kind {
	case checkpointd.MutationPRCreate:
		found, err := f.PullFromBranch(owner, name, k.branch)
		if err != nil {
			return checkpointd.MutationAnswer{}, err
		}
		if found.Truncated {
			return unknown("the forge lists more pull requests than the %d read, and none of those is from %s", listPages*listPageSize, k.branch), nil
		}
		if !found.Exists {
			return notDone(fmt.Sprintf("no pull request from branch %s in %s", k.branch, k.repo)), nil
		}
		return done(checkpointd.MutationEvidence{PR: found.Number, URL: found.URL, State: found.State, Head: found.Head},
			fmt.Sprintf("pull request #%d (%s) is from branch %s", found.Number, found.State, k.branch)), nil
	case checkpointd.MutationPRComment, checkpointd.MutationIssueComment:
		found, err := f.CommentWithMarker(owner, name, t.Number, recorded.Add(-commentSlack), k.key)
		if err != nil {
			return checkpointd.MutationAnswer{}, err
		}
		return searched(found, "comments", checkpointd.MutationEvidence{CommentID: found.ID, URL: found.URL},
			fmt.Sprintf("comment %d on %s carries the marker", found.ID, k.target)), nil
	case checkpointd.MutationPRReview:
		found, err := f.ReviewWithMarker(owner, name, t.Number, k.key)
		if err != nil {
			return checkpointd.MutationAnswer{}, err
		}
		return searched(found, "reviews", checkpointd.MutationEvidence{ReviewID: found.ID, URL: found.URL, PR: t.Number},
			fmt.Sprintf("review %d of %s carries the marker", found.ID, k.target)), nil
	case checkpointd.MutationPRMerge:
		pr, err := f.PullRequest(owner, name, t.Number)
		switch {
		case err != nil:
			return checkpointd.MutationAnswer{}, err
		case pr.Gone:
			return unknown("the forge shows no pull request %s", k.target), nil
		case pr.End == checkpointd.RefMerged:
			return done(checkpointd.MutationEvidence{PR: t.Number, State: "merged", Head: pr.Head}, fmt.Sprintf("%s is merged", k.target)), nil
		case pr.End == checkpointd.RefClosed:
			return notDone(fmt.Sprintf("%s was closed without being merged", k.target)), nil
		}
		return notDone(fmt.Sprintf("%s is open, not merged", k.target)), nil
	default: // git.push
		b, err := f.Branch(owner, name, k.branch)
		switch {
		case err != nil:
			return checkpointd.MutationAnswer{}, err
		case b.Gone:
			return unknown("the forge shows no branch %s: whether it was never pushed or deleted since cannot be told", k.branch), nil
		case strings.EqualFold(b.Head, k.target):
			return done(checkpointd.MutationEvidence{Head: b.Head}, fmt.Sprintf("branch %s is at %s", k.branch, b.Head)), nil
		}
		return checkpointd.MutationAnswer{Outcome: checkpointd.MutationNotDone, Evidence: &checkpointd.MutationEvidence{Head: b.Head},
			Reason: fmt.Sprintf("branch %s is at %s, not %s", k.branch, b.Head, strings.ToLower(k.target))}, nil
	}
}
