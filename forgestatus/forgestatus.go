// Package forgestatus keeps a commit status on the heads of every session's
// branch (--forge-status): success, pending or failure, as
// checkpointd.SessionStatus says, so that people who review and merge see
// on the pull request whether the agent behind it works from a valid view,
// and a branch protection rule can require it.
//
// One replica at a time publishes (Publish under store.RunExclusive). It follows the
// change feed: a validity change, a checkpoint, a run or a session ending
// re-judges that session's branch at once; a sweep every Sweep re-judges
// every active session's, which also retries what failed. What was last set
// on each commit is stored, so an update that changes nothing costs no call,
// across restarts and replicas. A status the forge refuses is a durable
// error (errlog), never a failed API request: nothing here is on a
// request's path.
package forgestatus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
)

// Store is what the publisher needs of persistence.
type Store interface {
	FeedHead(ctx context.Context) (store.FeedPos, error)
	ReadFeed(ctx context.Context, from, to store.FeedPos, limit int) ([]store.FeedEvent, store.FeedPos, bool, error)
	FeedWakeups(ctx context.Context) (<-chan struct{}, error)
	Settled(ctx context.Context) error
	GetSession(ctx context.Context, id string) (*checkpointd.Session, error)
	ListSessions(ctx context.Context, f store.SessionFilter) ([]checkpointd.Session, error)
	LiveRef(ctx context.Context, sess *checkpointd.Session) (*checkpointd.LiveRef, error)
	PostedStatus(ctx context.Context, repo, sha string) (store.PostedStatus, bool, error)
	RecordStatus(ctx context.Context, repo, sha string, st store.PostedStatus) error
	PruneStatuses(ctx context.Context, before time.Time) (int64, error)
}

// Publisher sets the commit statuses. Forge must be set.
type Publisher struct {
	Store Store
	Forge reconcile.ForgeFactory
	// ConsoleURL is the console's external base URL: a status links to
	// the session's page there (none when empty).
	ConsoleURL string
	// CallTimeout bounds one call to the forge (default 10s).
	CallTimeout time.Duration
	// Attempts is how many times a status is tried before it waits for
	// the next sweep (default 3); Backoff the wait after attempt n
	// (default 500ms·2ⁿ⁻¹).
	Attempts int
	Backoff  func(n int) time.Duration
	// Sweep is how often every active session's branch is re-judged
	// (default 10m).
	Sweep  time.Duration
	Clock  checkpointd.Clock
	Log    *slog.Logger
	Errors *errlog.Recorder
}

// keepStatuses is how long what was set on a commit is remembered: a
// commit that old is long behind its branch.
const keepStatuses = 30 * 24 * time.Hour

// feedPage is how many feed events one read takes.
const feedPage = 500

// maxSessionsPerRef bounds the sessions a branch's status is judged over.
const maxSessionsPerRef = 50

// ref is a branch of a repository: what a status is judged for.
type ref struct{ repo, branch string }

// Publish sets statuses until ctx ends; run it on one replica at a time
// (store.RunExclusive). It returns an error when the store fails, to be
// run again.
func (p *Publisher) Publish(ctx context.Context) error {
	wake, err := p.Store.FeedWakeups(ctx)
	if err != nil {
		return err
	}
	pos, err := p.Store.FeedHead(ctx)
	if err != nil {
		return err
	}
	if err := p.sweep(ctx); err != nil {
		return err
	}
	sweep := time.NewTicker(cmp.Or(p.Sweep, 10*time.Minute))
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sweep.C:
			if err := p.sweep(ctx); err != nil {
				return err
			}
			continue
		case <-wake:
		}
		if pos, err = p.follow(ctx, pos); err != nil {
			return err
		}
	}
}

// follow re-judges the branches of the sessions the feed names after pos.
func (p *Publisher) follow(ctx context.Context, pos store.FeedPos) (store.FeedPos, error) {
	to, err := p.Store.FeedHead(ctx)
	if err != nil {
		return pos, err
	}
	touched := map[string]bool{}
	for {
		evs, next, more, err := p.Store.ReadFeed(ctx, pos, to, feedPage)
		if err != nil {
			return pos, err
		}
		for _, ev := range evs {
			if kind, ok := checkpointd.FeedKindOf(ev.Kind); ok && kind.Type != checkpointd.FeedLease && ev.SessionID != "" {
				touched[ev.SessionID] = true
			}
		}
		pos = next
		if !more {
			break
		}
	}
	refs := map[ref]*checkpointd.Session{}
	for id := range touched {
		sess, err := p.Store.GetSession(ctx, id)
		if errors.Is(err, checkpointd.ErrNotFound) || errors.Is(err, checkpointd.ErrGone) {
			continue
		}
		if err != nil {
			return pos, err
		}
		if sess.Branch != "" {
			refs[ref{sess.Repo, sess.Branch}] = sess
		}
	}
	for r, sess := range refs {
		if err := p.publish(ctx, r, sess); err != nil {
			return pos, err
		}
	}
	return pos, nil
}

// sweep re-judges every active session's branch, and forgets statuses
// of commits long gone.
func (p *Publisher) sweep(ctx context.Context) error {
	done := map[ref]bool{}
	f := store.SessionFilter{State: checkpointd.SessionActive, Limit: 500}
	for {
		page, err := p.Store.ListSessions(ctx, f)
		if err != nil {
			return err
		}
		for i := range page {
			s := &page[i]
			if r := (ref{s.Repo, s.Branch}); s.Branch != "" && !done[r] {
				done[r] = true
				if err := p.publish(ctx, r, s); err != nil {
					return err
				}
			}
		}
		if len(page) < f.Limit {
			break
		}
		f.Before = page[len(page)-1].ID
	}
	_, err := p.Store.PruneStatuses(ctx, p.now().Add(-keepStatuses))
	return err
}

func (p *Publisher) now() time.Time {
	if p.Clock == nil {
		return time.Now().UTC()
	}
	return p.Clock.Now()
}

// publish judges branch r over its active sessions (or, when none is
// active any more, over the session that ended: its last word) and sets
// that status on each session's recorded head and, unless it is success,
// on the branch's live head. Several sessions on one branch give one
// status: the worst.
func (p *Publisher) publish(ctx context.Context, r ref, trigger *checkpointd.Session) error {
	if err := p.Store.Settled(ctx); err != nil {
		return err
	}
	sessions, err := p.Store.ListSessions(ctx, store.SessionFilter{State: checkpointd.SessionActive, Repo: r.repo, Branch: r.branch, Limit: maxSessionsPerRef})
	if err != nil {
		return err
	}
	if len(sessions) == 0 {
		sessions = []checkpointd.Session{*trigger}
	}
	var worst *checkpointd.Session
	var state checkpointd.StatusState
	var why string
	shas := map[string]bool{}
	for i := range sessions {
		s := &sessions[i]
		st, w := checkpointd.SessionStatus(s)
		if worst == nil || st.Worse(state) {
			worst, state, why = s, st, w
		}
		if s.Latest != nil && checkpointd.ValidCommitID(s.Latest.Head) {
			shas[strings.ToLower(s.Latest.Head)] = true
		}
	}
	if len(sessions) > 1 {
		why = worst.Role + ": " + why
	}
	live, err := p.Store.LiveRef(ctx, worst)
	if err != nil {
		return err
	}
	// Success goes only on heads a session's checkpoint names. A live head
	// none names came after the sessions were read (a push not yet
	// judged): it gets pending or failure, the safe way, and its own
	// judgement follows on the feed.
	if live != nil && live.State == checkpointd.RefOpen && checkpointd.ValidCommitID(live.Head) && state != checkpointd.StatusSuccess {
		shas[strings.ToLower(live.Head)] = true
	}
	post := reconcile.StatusPost{Context: checkpointd.StatusContext, State: string(state), Description: why}
	if p.ConsoleURL != "" {
		post.TargetURL = strings.TrimRight(p.ConsoleURL, "/") + "/ui/sessions/" + worst.ID
	}
	for sha := range shas {
		if err := p.set(ctx, r.repo, sha, worst.ID, post); err != nil {
			return err
		}
	}
	return nil
}

// set puts post on commit sha unless it is what was set there last. Only
// a store failure is returned: the forge's are durable errors.
func (p *Publisher) set(ctx context.Context, repo, sha, sessionID string, post reconcile.StatusPost) error {
	prev, ok, err := p.Store.PostedStatus(ctx, repo, sha)
	if err != nil {
		return err
	}
	if ok && prev.State == post.State && prev.Description == post.Description && prev.TargetURL == post.TargetURL {
		return nil
	}
	owner, name, _ := strings.Cut(repo, "/")
	var ferr error
	for n := 1; n <= cmp.Or(p.Attempts, 3); n++ {
		if ferr = p.post(ctx, owner, name, sha, post); ferr == nil {
			return p.Store.RecordStatus(ctx, repo, sha, store.PostedStatus{State: post.State, Description: post.Description,
				TargetURL: post.TargetURL, PostedAt: p.now()})
		}
		var fe *reconcile.ForgeError
		if errors.As(ferr, &fe) && !fe.Retryable() {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.backoff(n)):
		}
	}
	code := "forge_status_failed"
	var fe *reconcile.ForgeError
	if errors.As(ferr, &fe) && fe.Status >= 400 && fe.Status < 500 && fe.Status != http.StatusTooManyRequests {
		code = "forge_status_refused"
	}
	p.log().WarnContext(ctx, "the forge did not take a commit status", slog.String("repo", repo), slog.String("sha", sha),
		slog.String("state", post.State), slog.Any("err", ferr))
	p.Errors.Record(ctx, checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceForgeStatus, Code: code, SessionID: sessionID,
		Repo: repo, Detail: fmt.Sprintf("%s on %s: %v", post.State, sha, ferr)})
	return nil
}

func (p *Publisher) post(ctx context.Context, owner, name, sha string, post reconcile.StatusPost) error {
	f, err := p.Forge(ctx, cmp.Or(p.CallTimeout, 10*time.Second))
	if err != nil {
		return err
	}
	return f.PostStatus(owner, name, sha, post)
}

func (p *Publisher) backoff(n int) time.Duration {
	if p.Backoff != nil {
		return p.Backoff(n)
	}
	return 500 * time.Millisecond << (n - 1)
}

func (p *Publisher) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}
