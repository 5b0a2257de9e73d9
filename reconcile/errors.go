package reconcile

import (
	"errors"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
)

// Failure codes of durable reconcile errors and outcomes of forge calls:
// a fixed set, so metrics and stored codes never carry a message.
const (
	codeOK            = "ok"
	codeNotFound      = "not_found"
	codeRateLimited   = "rate_limited"
	codeServerError   = "server_error"
	codeClientError   = "client_error"
	codeTimeout       = "timeout"
	codeUnreachable   = "unreachable"
	codeError         = "error"
	codeNotVisible    = "repo_not_visible"
	codePassFailed    = "pass_failed"
	codeForgeFailedAs = "forge_" // prefix of a repo's stored code
)

// callOutcome classifies one forge call.
func callOutcome(err error, gone bool) string {
	var fe *ForgeError
	switch {
	case err == nil && gone:
		return codeNotFound
	case err == nil:
		return codeOK
	case !errors.As(err, &fe):
		return codeError
	case fe.Timeout:
		return codeTimeout
	case fe.Status == http.StatusTooManyRequests:
		return codeRateLimited
	case fe.Status >= 500:
		return codeServerError
	case fe.Status != 0:
		return codeClientError
	}
	return codeUnreachable
}

// failureCode is the stored code of a ref the forge could not answer:
// forge_<class> for forge failures, repo_not_visible or forge_error for
// the answers that were no evidence.
func failureCode(err error) string {
	var fe *ForgeError
	if errors.As(err, &fe) {
		return codeForgeFailedAs + callOutcome(err, false)
	}
	if errors.Is(err, errRepoNotVisible) {
		return codeNotVisible
	}
	return codeForgeFailedAs + codeError
}

// outcome is the pass's outcome for the metrics.
func (p *pass) outcome(err error) string {
	switch {
	case err != nil:
		return metrics.PassFailed
	case p.r.Forge == nil:
		return metrics.PassNoForge
	case len(p.rep.ErrorsByRepo) > 0 || p.rep.Error != "":
		return metrics.PassForgeErrors
	}
	return metrics.PassOK
}

// durableErrors are the pass's durable errors: one per repository the
// forge could not answer about (its refs and reasons in the detail), and
// one for a pass that stopped early. A missing forge configuration is no
// error of any repository: the report says so.
func (p *pass) durableErrors(err error) []checkpointd.ErrorRecord {
	var out []checkpointd.ErrorRecord
	if err != nil {
		out = append(out, checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceReconcile, Code: codePassFailed,
			Detail: p.rep.ID + ": " + err.Error()})
	}
	repos := make([]string, 0, len(p.rep.ErrorsByRepo))
	for repo := range p.rep.ErrorsByRepo {
		repos = append(repos, repo)
	}
	sort.Strings(repos)
	for _, repo := range repos {
		code := p.repoCodes[repo]
		if code == "" {
			code = codeForgeFailedAs + codeError
		}
		out = append(out, checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceReconcile, Code: code, Repo: repo,
			Detail: p.rep.ID + ": " + strings.Join(p.rep.ErrorsByRepo[repo], "; ")})
	}
	return out
}

// countedForge counts every call of a pass by outcome.
type countedForge struct {
	Forge
	m *metrics.Metrics
}

func (f countedForge) Branch(owner, repo, branch string) (RefAnswer, error) {
	a, err := f.Forge.Branch(owner, repo, branch)
	f.m.ForgeCall(callOutcome(err, a.Gone))
	return a, err
}

func (f countedForge) PullRequest(owner, repo string, number int64) (RefAnswer, error) {
	a, err := f.Forge.PullRequest(owner, repo, number)
	f.m.ForgeCall(callOutcome(err, a.Gone))
	return a, err
}

func (f countedForge) PullFromBranch(owner, repo, branch string) (Found, error) {
	a, err := f.Forge.PullFromBranch(owner, repo, branch)
	f.m.ForgeCall(callOutcome(err, false))
	return a, err
}

func (f countedForge) CommentWithMarker(owner, repo string, number int64, since time.Time, key string) (Found, error) {
	a, err := f.Forge.CommentWithMarker(owner, repo, number, since, key)
	f.m.ForgeCall(callOutcome(err, false))
	return a, err
}

func (f countedForge) ReviewWithMarker(owner, repo string, pr int64, key string) (Found, error) {
	a, err := f.Forge.ReviewWithMarker(owner, repo, pr, key)
	f.m.ForgeCall(callOutcome(err, false))
	return a, err
}

func (f countedForge) PostStatus(owner, repo, sha string, st StatusPost) error {
	err := f.Forge.PostStatus(owner, repo, sha, st)
	f.m.ForgeCall(callOutcome(err, false))
	return err
}

func (f countedForge) Repo(owner, repo string) (RepoAnswer, error) {
	a, err := f.Forge.Repo(owner, repo)
	f.m.ForgeCall(callOutcome(err, err == nil && !a.Exists))
	return a, err
}
