package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"code.gitea.io/sdk/gitea"
	"golang.org/x/time/rate"

	"github.com/checkpointd/checkpointd"
)

// Forge is what a pass asks the forge. Each method makes one API call
// (plus any redirect the forge answers with); an error that is not evidence
// — unreachable, timed out, rate limited, 5xx, refused, malformed — is a
// *ForgeError.
type Forge interface {
	// Branch returns the branch's head, or Gone when the forge answers 404.
	Branch(owner, repo, branch string) (RefAnswer, error)
	// PullRequest returns the PR's head and whether it closed or merged,
	// or Gone when the forge answers 404.
	PullRequest(owner, repo string, number int64) (RefAnswer, error)
	// Repo tells whether the token can see the repository: a 404 of a
	// branch only means the branch is gone when the repository is there.
	Repo(owner, repo string) (RepoAnswer, error)
	// PullFromBranch finds a pull request, open or closed, whose head is
	// branch of the same repository (forge_lists.go).
	PullFromBranch(owner, repo, branch string) (Found, error)
	// CommentWithMarker finds a comment on issue or pull request number,
	// updated since, whose body carries the marker of key.
	CommentWithMarker(owner, repo string, number int64, since time.Time, key string) (Found, error)
	// ReviewWithMarker finds a review of pull request pr whose body
	// carries the marker of key.
	ReviewWithMarker(owner, repo string, pr int64, key string) (Found, error)
	// PostStatus sets the commit status context on commit sha.
	PostStatus(owner, repo, sha string, st StatusPost) error
	// Calls is how many HTTP requests this client made.
	Calls() int
}

// StatusPost is a commit status to set.
type StatusPost struct {
	Context, State, Description, TargetURL string
}

// RefAnswer is what the forge said about one ref.
type RefAnswer struct {
	Head string                   // lower-case hex
	End  checkpointd.LiveRefState // RefClosed or RefMerged for an ended PR
	Gone bool                     // 404
	// RepoName is the owner/name the forge answered under; after a rename
	// the forge redirects the old name, so it differs from the one asked.
	RepoName string
	RepoID   int64 // the repository id, when the answer carries it
}

// RepoAnswer is what the forge said about a repository.
type RepoAnswer struct {
	Exists   bool
	ID       int64
	FullName string
}

// ForgeError is a forge answer that says nothing about the ref: sessions
// on it stay unverified, with Error() as the reason.
type ForgeError struct {
	Status     int           // the HTTP status; 0 when no answer arrived
	Timeout    bool          // no answer within the call timeout
	RetryAfter time.Duration // what a 429 or 503 asked for
	Err        error
}

func (e *ForgeError) Error() string {
	switch {
	case e.Timeout:
		return "the forge did not answer within the call timeout"
	case e.Status != 0:
		return fmt.Sprintf("the forge answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return "the forge is unreachable: " + e.Err.Error()
}

func (e *ForgeError) Unwrap() error { return e.Err }

// Retryable reports a failure worth another attempt after a back-off: rate
// limiting, a server error, or a connection that failed fast. A timeout is
// not retried: it already cost a whole call timeout.
func (e *ForgeError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status >= 500 || (e.Status == 0 && !e.Timeout)
}

// ForgeFactory opens a Forge for one pass: ctx ends every call of the
// pass, callTimeout bounds each one.
type ForgeFactory func(ctx context.Context, callTimeout time.Duration) (Forge, error)

// Gitea returns a ForgeFactory over the Gitea SDK (code.gitea.io/sdk/gitea),
// which also speaks to Forgejo. Each pass gets a fresh client with the
// pass's context and no version probe (SetGiteaVersion("")): building it
// makes no request, and no call is gated on a version string that Forgejo
// and dev builds spell in their own way. token may be empty for public
// repositories. perSecond bounds the requests to the forge (0: the
// default, DefaultForgeRate). The factory fails only when the SDK rejects
// its options.
func Gitea(baseURL, token string, perSecond float64) ForgeFactory {
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 8
	// One budget for everything that asks this forge: reconcile passes,
	// the answers about pending mutations and commit statuses.
	limiter := rate.NewLimiter(rate.Limit(cmp.Or(perSecond, DefaultForgeRate)), forgeBurst)
	return func(ctx context.Context, callTimeout time.Duration) (Forge, error) {
		g := &giteaForge{}
		hc := &http.Client{Timeout: callTimeout, Transport: countingTransport{limitedTransport{transport, limiter}, &g.calls},
			CheckRedirect: func(_ *http.Request, via []*http.Request) error {
				if len(via) >= 5 {
					return errors.New("too many redirects")
				}
				return nil
			}}
		opts := []gitea.ClientOption{gitea.SetGiteaVersion(""), gitea.SetHTTPClient(hc), gitea.SetContext(ctx),
			gitea.SetUserAgent("checkpointd-reconcile")}
		if token != "" {
			opts = append(opts, gitea.SetToken(token))
		}
		c, err := gitea.NewClient(baseURL, opts...)
		if err != nil {
			return nil, fmt.Errorf("gitea client: %w", err)
		}
		g.c = c
		return g, nil
	}
}

type giteaForge struct {
	c     *gitea.Client
	calls atomic.Int64
}

func (g *giteaForge) Calls() int { return int(g.calls.Load()) }

func (g *giteaForge) Branch(owner, repo, branch string) (RefAnswer, error) {
	b, resp, err := g.c.GetRepoBranch(owner, repo, branch)
	if status(resp) == http.StatusNotFound {
		return RefAnswer{Gone: true, RepoName: answeredAs(resp)}, nil
	}
	if err != nil {
		return RefAnswer{}, forgeError(resp, err)
	}
	if b == nil || b.Commit == nil || !checkpointd.ValidCommitID(b.Commit.ID) {
		return RefAnswer{}, &ForgeError{Status: status(resp), Err: errors.New("the branch answer carries no commit id")}
	}
	return RefAnswer{Head: strings.ToLower(b.Commit.ID), RepoName: answeredAs(resp)}, nil
}

func (g *giteaForge) PullRequest(owner, repo string, number int64) (RefAnswer, error) {
	pr, resp, err := g.c.GetPullRequest(owner, repo, number)
	// On 404 the SDK returns an empty PR with the error: the status decides.
	if status(resp) == http.StatusNotFound {
		return RefAnswer{Gone: true, RepoName: answeredAs(resp)}, nil
	}
	if err != nil {
		return RefAnswer{}, forgeError(resp, err)
	}
	if pr == nil || pr.Head == nil || !checkpointd.ValidCommitID(pr.Head.Sha) {
		return RefAnswer{}, &ForgeError{Status: status(resp), Err: errors.New("the pull request answer carries no head sha")}
	}
	a := RefAnswer{Head: strings.ToLower(pr.Head.Sha), RepoName: answeredAs(resp)}
	if pr.Base != nil && pr.Base.Repository != nil && pr.Base.Repository.FullName != "" {
		a.RepoName, a.RepoID = pr.Base.Repository.FullName, pr.Base.Repository.ID
	}
	switch {
	case pr.HasMerged:
		a.End = checkpointd.RefMerged
	case pr.State == gitea.StateClosed:
		a.End = checkpointd.RefClosed
	case pr.State != gitea.StateOpen:
		return RefAnswer{}, &ForgeError{Status: status(resp), Err: fmt.Errorf("unknown pull request state %q", pr.State)}
	}
	return a, nil
}

func (g *giteaForge) Repo(owner, repo string) (RepoAnswer, error) {
	r, resp, err := g.c.GetRepo(owner, repo)
	if status(resp) == http.StatusNotFound {
		return RepoAnswer{}, nil
	}
	if err != nil {
		return RepoAnswer{}, forgeError(resp, err)
	}
	return RepoAnswer{Exists: true, ID: r.ID, FullName: r.FullName}, nil
}

func (g *giteaForge) PostStatus(owner, repo, sha string, st StatusPost) error {
	_, resp, err := g.c.CreateStatus(owner, repo, sha, gitea.CreateStatusOption{State: gitea.StatusState(st.State),
		TargetURL: st.TargetURL, Description: st.Description, Context: st.Context})
	if err != nil {
		return forgeError(resp, err)
	}
	return nil
}

func status(resp *gitea.Response) int {
	if resp == nil || resp.Response == nil {
		return 0
	}
	return resp.StatusCode
}

// forgeError classifies a failed call by its status, never by the SDK's
// message text.
func forgeError(resp *gitea.Response, err error) *ForgeError {
	fe := &ForgeError{Status: status(resp), Err: err}
	if fe.Status != 0 {
		fe.RetryAfter = retryAfter(resp.Header.Get("Retry-After"))
		return fe
	}
	var ne net.Error
	fe.Timeout = errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	// url.Error repeats the request URL; the cause is what an operator needs.
	var ue *url.Error
	if errors.As(err, &ue) {
		fe.Err = ue.Err
	}
	return fe
}

// retryAfter reads a Retry-After header in seconds (the HTTP-date form is
// rare from forges and proxies; it falls back to the default back-off).
func retryAfter(h string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}

// answeredAs is the owner/name of the request that finally answered, after
// redirects: /…/api/v1/repos/{owner}/{name}/….
func answeredAs(resp *gitea.Response) string {
	if resp == nil || resp.Response == nil || resp.Request == nil {
		return ""
	}
	_, rest, ok := strings.Cut(resp.Request.URL.Path, "/api/v1/repos/")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 2 {
		return ""
	}
	return parts[0] + "/" + parts[1]
}

// DefaultForgeRate and forgeBurst bound the requests a daemon sends its
// forge, whoever asks: well under what Gitea's and Forgejo's own rate
// limiters allow when an operator turns them on. At 50 a second a pass
// of the default 5 minutes asks about some 10 000 refs (until askReserve
// of its time is left); a fleet with more goes round them over several
// passes, or its operator raises the rate (--gitea-rate).
const (
	DefaultForgeRate = 50
	forgeBurst       = 50
)

// limitedTransport waits for the forge's budget before each request; a
// request whose context ends first is not sent.
type limitedTransport struct {
	base    http.RoundTripper
	limiter *rate.Limiter
}

func (t limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if err := t.limiter.Wait(r.Context()); err != nil {
		return nil, err
	}
	return t.base.RoundTrip(r)
}

// countingTransport counts the HTTP requests of one pass, redirects and
// retries included: what the forge actually served.
type countingTransport struct {
	base http.RoundTripper
	n    *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.n.Add(1)
	return t.base.RoundTrip(r)
}
