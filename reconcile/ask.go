package reconcile

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/reconcile/gitdir"
	"github.com/checkpointd/checkpointd/store"
)

// answer is the forge's word on one ref, or why there is none.
type answer struct {
	ref store.ActiveRef
	ans RefAnswer
	err error
}

// repoCheck asks once per pass whether a repository is visible, however
// many of its refs answered 404.
type repoCheck struct {
	once sync.Once
	ans  RepoAnswer
	err  error
}

// askReserve is the part of a pass's time it does not ask the forge in:
// what the last chunk's recording and the pass's summary take (a chunk of
// refs records in a second or two), so a pass with more refs than the
// forge's rate, or the store, lets it get through still records what it
// asked.
const askReserve = 0.2

// errDeferred is the answer to a ref the pass had no time left to ask
// about: no evidence either way, and no failure of the forge. Its sessions
// keep their validity (after a restart: unverified), and the next pass
// asks about it first among those it has evidence for.
var errDeferred = errors.New("not asked: the pass ran out of time before this ref's turn")

// askAll asks the forge about the refs, Concurrency at a time, in order
// (the order puts first what must be asked first), until askReserve of the
// pass's time is left: the refs not answered by then get errDeferred.
// Without a forge, or when it cannot be opened, every ref gets that as its
// error.
func (p *pass) askAll(ctx context.Context, refs []store.ActiveRef) []answer {
	out := make([]answer, len(refs))
	for i, ref := range refs {
		out[i].ref = ref
	}
	if p.r.Forge == nil {
		for i := range out {
			out[i].err = ErrForgeNotConfigured
		}
		return out
	}
	if p.askUntil.IsZero() {
		p.askUntil = time.Now().Add(24 * time.Hour)
		if deadline, ok := ctx.Deadline(); ok {
			p.askUntil = deadline.Add(-time.Duration(askReserve * float64(time.Until(deadline))))
		}
	}
	askCtx, cancel := context.WithDeadline(ctx, p.askUntil)
	defer cancel()
	// The forge's calls, and the waits for its rate, end with askCtx.
	f, err := p.r.Forge(askCtx, orDefault(p.r.CallTimeout, 10*time.Second))
	if err != nil {
		p.rep.Error = err.Error()
		for i := range out {
			out[i].err = err
		}
		return out
	}
	f = countedForge{f, p.r.Metrics}
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(orDefault(p.r.Concurrency, 4), max(len(refs), 1)) {
		wg.Go(func() {
			for i := range work {
				if askCtx.Err() != nil && ctx.Err() == nil {
					out[i].err = errDeferred
					continue
				}
				out[i].ans, out[i].err = p.askOne(askCtx, f, out[i].ref)
				if out[i].err != nil && askCtx.Err() != nil && ctx.Err() == nil {
					out[i].err = errDeferred
				}
			}
		})
	}
	for i := range out {
		work <- i
	}
	close(work)
	wg.Wait()
	p.rep.ForgeCalls += f.Calls()
	return out
}

// askOne asks about one ref, retrying with back-off what is worth it. A 404
// is only an ended ref when the repository itself is visible: a token that
// cannot see a private repository gets 404s too, and invalidated is final.
func (p *pass) askOne(ctx context.Context, f Forge, ref store.ActiveRef) (RefAnswer, error) {
	owner, name, ok := strings.Cut(ref.Repo, "/")
	if !ok {
		return RefAnswer{}, fmt.Errorf("repo %q is not owner/name", ref.Repo)
	}
	var a RefAnswer
	err := p.retry(ctx, func() (err error) {
		if ref.PR > 0 {
			a, err = f.PullRequest(owner, name, ref.PR)
		} else {
			a, err = f.Branch(owner, name, ref.Branch)
		}
		return err
	})
	if err != nil {
		return a, err
	}
	if a.RepoID > 0 && strings.EqualFold(a.RepoName, ref.Repo) {
		p.learn(ref.Repo, a.RepoID)
	}
	if !a.Gone {
		return a, nil
	}
	repo, err := p.repo(ctx, f, owner, name)
	switch {
	case err != nil:
		return a, fmt.Errorf("%s answered 404 and the repository could not be checked: %w", ref.Name(), err)
	case !repo.Exists:
		return a, errRepoNotVisible
	case ref.PR > 0:
		// Gitea does not delete pull requests; one that is not there is
		// no evidence that the work ended.
		return a, fmt.Errorf("pull request #%d is not found", ref.PR)
	}
	a.End = checkpointd.RefDeleted
	return a, nil
}

// errRepoNotVisible is a 404 for a ref whose repository is not there for
// the token either: no evidence that the ref ended.
var errRepoNotVisible = errors.New("the repository is not found or not visible to the token")

func (p *pass) learn(repo string, id int64) {
	p.mu.Lock()
	p.learned[strings.ToLower(repo)] = id
	p.mu.Unlock()
}

func (p *pass) repo(ctx context.Context, f Forge, owner, name string) (RepoAnswer, error) {
	key := strings.ToLower(owner + "/" + name)
	p.mu.Lock()
	c := p.repoChecks[key]
	if c == nil {
		c = &repoCheck{}
		p.repoChecks[key] = c
	}
	p.mu.Unlock()
	c.once.Do(func() {
		c.err = p.retry(ctx, func() (err error) {
			c.ans, err = f.Repo(owner, name)
			return err
		})
		if c.err == nil && c.ans.ID > 0 && strings.EqualFold(c.ans.FullName, owner+"/"+name) {
			p.learn(c.ans.FullName, c.ans.ID)
		}
	})
	return c.ans, c.err
}

// retry calls call until it succeeds, fails for good, or Attempts ran out,
// waiting Backoff between attempts.
func (p *pass) retry(ctx context.Context, call func() error) error {
	attempts := orDefault(p.r.Attempts, 3)
	for n := 1; ; n++ {
		err := call()
		var fe *ForgeError
		if err == nil || !errors.As(err, &fe) || !fe.Retryable() || n >= attempts {
			if err != nil && n > 1 {
				err = fmt.Errorf("%w (after %d attempts)", err, n)
			}
			return err
		}
		t := time.NewTimer(p.r.backoff(n, fe.RetryAfter))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (the pass ended while backing off)", err)
		case <-t.C:
		}
	}
}

// renames reports repos that the forge answered under another name (it
// redirects a renamed repository's old name) and those whose id a webhook
// recorded under another name.
func (p *pass) renames(ctx context.Context, repos []string, answers []answer) error {
	found := map[string]*Rename{} // lower(repo) → rename
	for _, a := range answers {
		if a.err != nil || a.ans.RepoName == "" || strings.EqualFold(a.ans.RepoName, a.ref.Repo) {
			continue
		}
		k := strings.ToLower(a.ref.Repo)
		if found[k] == nil {
			found[k] = &Rename{Repo: a.ref.Repo, NewName: a.ans.RepoName, Source: "forge"}
		}
		if found[k].RepoID == 0 {
			found[k].RepoID = a.ans.RepoID // only PR answers carry it
		}
	}
	known, err := p.r.Store.RepoRenames(ctx, repos, p.learned)
	if err != nil {
		return fmt.Errorf("repo renames: %w", err)
	}
	for _, k := range known {
		if found[strings.ToLower(k.Repo)] == nil {
			found[strings.ToLower(k.Repo)] = &Rename{Repo: k.Repo, RepoID: k.RepoID, NewName: k.NewName, Source: "webhook"}
		}
	}
	for _, r := range found {
		p.rep.Renames = append(p.rep.Renames, *r)
	}
	sort.Slice(p.rep.Renames, func(i, j int) bool { return p.rep.Renames[i].Repo < p.rep.Renames[j].Repo })
	return nil
}

// worktrees compares the worktrees found under the worktree roots with
// their checkpoints and the live heads of this pass, and reports the ones
// that drifted or could not be read. Without roots nothing is looked at.
func (p *pass) worktrees(ctx context.Context, wts []store.ActiveWorktree, answers []answer) {
	if len(p.r.WorktreeRoots) == 0 || len(wts) == 0 {
		return
	}
	live := map[string]string{}
	for _, a := range answers {
		if a.err == nil && a.ref.Branch != "" && a.ans.End == "" && !a.ans.Gone {
			live[strings.ToLower(a.ref.Repo)+"\x00"+a.ref.Branch] = a.ans.Head
		}
	}
	roots := gitdir.Open(p.r.WorktreeRoots)
	defer roots.Close()
	for _, w := range wts {
		if ctx.Err() != nil {
			return
		}
		got, ok := inspectWorktree(roots, w, live[strings.ToLower(w.Repo)+"\x00"+w.Branch])
		if ok {
			p.rep.WorktreesChecked++
		}
		if ok && (len(got.Findings) > 0 || got.Error != "") {
			p.rep.Worktrees = append(p.rep.Worktrees, got)
		}
	}
}
