// Package reconcile checks every active session against the live forge (and
// the local git worktree when it is under a directory the operator
// allowed) and sets validity with the evidence, exactly as webhooks do: it
// turns forge answers into authoritative observations for the store, where
// the one shared rule (checkpointd.JudgeValidity) decides. A forge that
// cannot answer never makes a session valid.
package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/internal/logattr"
	"github.com/checkpointd/checkpointd/metrics"
	"github.com/checkpointd/checkpointd/store"
)

// Store is what reconcile needs of persistence.
type Store interface {
	ActiveRefs(ctx context.Context) (*store.ActiveSet, error)
	Observe(ctx context.Context, obs []checkpointd.Observation, track ...*store.Moves) (*checkpointd.ObservationEffects, error)
	MarkUnverified(ctx context.Context, refs []store.ActiveRef, reason, source string, track ...*store.Moves) (map[string]int, error)
	ReconcileLeases(ctx context.Context, source string) (store.LeaseReconcile, error)
	RepoRenames(ctx context.Context, repos []string, learned map[string]int64) ([]store.RepoRename, error)
	Settled(ctx context.Context) error
	ValiditySummary(ctx context.Context, limit int) (map[string]int, []store.SessionVerdict, error)
	SaveReconcileReport(ctx context.Context, id string, report []byte) error
}

// ErrForgeNotConfigured is the reason sessions stay unverified when no
// forge URL is set.
var ErrForgeNotConfigured = errors.New("forge not configured: set --gitea-url (CHECKPOINTD_GITEA_URL) and, for private repositories, --gitea-token (CHECKPOINTD_GITEA_TOKEN)")

// PrefixPass marks reconcile pass ids.
const PrefixPass = "rec_"

// Reconciler runs reconcile passes: Run on a ticker (first pass at once),
// Once on demand. Passes never overlap. The zero values of the tuning
// fields select the defaults.
type Reconciler struct {
	Store Store
	// Forge opens the forge for a pass; nil means no forge is configured
	// and every session stays unverified.
	Forge ForgeFactory
	// ForgeURL is shown in reports (it must carry no credentials).
	ForgeURL    string
	Concurrency int           // forge calls in flight (default 4)
	CallTimeout time.Duration // per forge call (default 10s)
	Attempts    int           // tries per ref on 429, 5xx, connection failure (default 3)
	// Backoff is the wait before attempt n+1 after attempt n failed;
	// retryAfter is what the forge asked for (0 if nothing). Default:
	// max(retryAfter, 500ms·2ⁿ⁻¹), at most 10s.
	Backoff     func(n int, retryAfter time.Duration) time.Duration
	Interval    time.Duration // between passes of Run (default 5m)
	PassTimeout time.Duration // bounds one pass (default 5m)
	// WorktreeRoots are the absolute directories under which a session's
	// recorded worktree is read (its HEAD, from the repository's files;
	// no program is run). None: no worktree is ever looked at.
	WorktreeRoots []string
	Clock         checkpointd.Clock
	Log           *slog.Logger
	// Metrics counts passes, their duration and forge calls; nil counts
	// nothing.
	Metrics *metrics.Metrics
	// Errors records, per pass, one durable error per repository the forge
	// could not answer about, and a pass that stopped early; nil records
	// nothing.
	Errors *errlog.Recorder

	once sync.Once
	sem  chan struct{}
	// next is the key of the first ref the last pass had no time to ask
	// about: the next pass goes on from there (passes never overlap).
	next string
}

func (r *Reconciler) init() {
	r.once.Do(func() { r.sem = make(chan struct{}, 1) })
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func (r *Reconciler) log() *slog.Logger {
	return orDefault(r.Log, slog.New(slog.DiscardHandler))
}

func (r *Reconciler) clock() checkpointd.Clock {
	return orDefault[checkpointd.Clock](r.Clock, checkpointd.SystemClock{})
}

func (r *Reconciler) backoff(n int, retryAfter time.Duration) time.Duration {
	if r.Backoff != nil {
		return r.Backoff(n, retryAfter)
	}
	d := 500 * time.Millisecond << min(n-1, 5)
	return min(max(d, retryAfter), 10*time.Second)
}

// Run passes until ctx ends: the first at once (in the background of a
// serving daemon, so it never delays readiness), then every Interval. A
// failed pass is logged and the next one tries again.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	trigger := TriggerBoot
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := r.Once(ctx, trigger); err != nil && ctx.Err() == nil {
			r.log().Warn("reconcile pass failed", slog.Any("err", err))
		}
		trigger = TriggerInterval
		t.Reset(orDefault(r.Interval, 5*time.Minute))
	}
}

// VerifySessions is how the drain gate asks for fresh evidence about the
// sessions that block it only by being unverified. A pass costs one forge
// call per distinct ref however many sessions share it, so it runs a whole
// pass rather than a partial one; the caller bounds it with ctx. Without a
// forge no pass could verify anything, so none runs. Errors:
// ErrForgeNotConfigured, or as Once.
func (r *Reconciler) VerifySessions(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if r.Forge == nil {
		return ErrForgeNotConfigured
	}
	_, err := r.Once(ctx, TriggerDrain)
	return err
}

// Once runs one pass and returns its report, which it also stores. A pass
// waits for a running one to finish first. Forge failures do not fail the
// pass: they are in the report and their sessions stay unverified. Errors:
// ErrStoreUnavailable when the store failed (the report, if any, says how
// far the pass got), or ctx's error while waiting for a running pass.
func (r *Reconciler) Once(ctx context.Context, trigger string) (*Report, error) {
	r.init()
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-r.sem }()
	ctx, cancel := context.WithTimeout(ctx, orDefault(r.PassTimeout, 5*time.Minute))
	defer cancel()
	id := checkpointd.NewID(PrefixPass)
	p := &pass{r: r, source: "reconcile:" + id, learned: map[string]int64{}, repoChecks: map[string]*repoCheck{},
		repoCodes: map[string]string{}, rep: newReport(id, trigger, orDefault(r.ForgeURL, "not configured"), r.clock().Now())}
	began := time.Now()
	err := p.run(ctx)
	r.Metrics.ReconcilePass(p.outcome(err), time.Since(began))
	r.Errors.Record(ctx, p.durableErrors(err)...)
	p.rep.FinishedAt = r.clock().Now()
	p.rep.DurationMS = p.rep.FinishedAt.Sub(p.rep.StartedAt).Milliseconds()
	if err != nil {
		p.rep.Error = "the pass stopped early: " + err.Error()
	}
	if b, jerr := json.Marshal(p.rep); jerr == nil {
		// Stored without the pass's deadline: a pass that ran out of time
		// still leaves its report.
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err = errors.Join(err, r.Store.SaveReconcileReport(sctx, id, b))
		scancel()
	}
	r.log().Info("reconcile pass", slog.String("id", id), slog.String("trigger", trigger),
		slog.Int("sessions", p.rep.SessionsChecked), slog.Int("refs", p.rep.Refs),
		slog.Int("refs_unverified", p.rep.RefsUnverified), slog.Int("refs_deferred", p.rep.RefsDeferred), slog.Int("forge_calls", p.rep.ForgeCalls),
		logattr.Counts("verdicts", p.rep.Verdicts), logattr.Counts("changed", p.rep.Changed), slog.Int64("duration_ms", p.rep.DurationMS))
	return p.rep, err
}

// inTurn orders the refs a pass asks about: first those with an
// unverified session (nothing on them can resume until the forge is
// asked), then the others from the key next on, round the list, so that
// passes that run out of time go round every ref in turn rather than ask
// about the same first ones each time.
func inTurn(refs []store.ActiveRef, next string) []store.ActiveRef {
	var first, rest []store.ActiveRef
	for _, r := range refs {
		if r.Unverified {
			first = append(first, r)
		} else {
			rest = append(rest, r)
		}
	}
	slices.SortFunc(first, func(a, b store.ActiveRef) int { return strings.Compare(refKey(a), refKey(b)) })
	slices.SortFunc(rest, func(a, b store.ActiveRef) int { return strings.Compare(refKey(a), refKey(b)) })
	from, _ := slices.BinarySearchFunc(rest, next, func(r store.ActiveRef, key string) int { return strings.Compare(refKey(r), key) })
	return slices.Concat(first, rest[from:], rest[:from])
}

// refKey orders and names a ref across passes.
func refKey(r store.ActiveRef) string { return strings.ToLower(r.Repo) + "\x00" + r.Name() }

// passChunk is how many refs a pass asks about before it records what
// they said.
const passChunk = 200

// record applies one chunk's answers: the observations, then the refs the
// forge could not answer about (after the observations: a session with
// one unanswered ref among two ends unverified, never valid). Deferred
// refs change nothing; the first one is where the next pass goes on. It
// returns the forge's failures, to log.
func (p *pass) record(ctx context.Context, answers []answer, moves *store.Moves) ([]error, error) {
	st := p.r.Store
	var obs []checkpointd.Observation
	failed := map[string][]store.ActiveRef{} // reason → refs
	var forgeErrs []error
	for _, a := range answers {
		switch {
		case errors.Is(a.err, errDeferred):
			if p.rep.RefsDeferred == 0 {
				p.r.next = refKey(a.ref)
			}
			p.rep.RefsDeferred++
		case errors.Is(a.err, ErrForgeNotConfigured):
			// No forge is no evidence either way: sessions keep what
			// webhooks said (after boot, unverified).
			p.rep.RefsUnverified++
		case a.err != nil:
			failed[a.err.Error()] = append(failed[a.err.Error()], a.ref)
			p.rep.addError(a.ref.Repo, a.ref.Name()+": "+a.err.Error())
			if p.repoCodes[a.ref.Repo] == "" {
				p.repoCodes[a.ref.Repo] = failureCode(a.err)
			}
			forgeErrs = append(forgeErrs, fmt.Errorf("%s %s: %w", a.ref.Repo, a.ref.Name(), a.err))
		default:
			obs = append(obs, checkpointd.Observation{Repo: a.ref.Repo, Branch: a.ref.Branch, PR: a.ref.PR,
				Head: a.ans.Head, End: a.ans.End, Authoritative: true, Source: p.source})
		}
	}
	if len(obs) > 0 {
		eff, err := st.Observe(ctx, obs, moves)
		if err != nil {
			return forgeErrs, fmt.Errorf("observe: %w", err)
		}
		p.rep.Leases.ReleasedByRefs += eff.LeasesReleased
	}
	for reason, refs := range failed {
		p.rep.RefsUnverified += len(refs)
		if _, err := st.MarkUnverified(ctx, refs, reason, p.source, moves); err != nil {
			return forgeErrs, fmt.Errorf("mark unverified: %w", err)
		}
	}
	return forgeErrs, nil
}

// pass is the state of one reconcile pass.
type pass struct {
	r      *Reconciler
	source string
	rep    *Report

	mu         sync.Mutex
	learned    map[string]int64 // repo name (as asked, lower-cased) → id, from answers under that name
	repoChecks map[string]*repoCheck
	repoCodes  map[string]string // repo → failure code of its first unanswered ref (errors.go)
	askUntil   time.Time         // when the pass stops asking (askReserve of its time left)
}

func (p *pass) run(ctx context.Context) error {
	st := p.r.Store
	leases, err := st.ReconcileLeases(ctx, p.source)
	p.rep.Leases = LeaseReport{Expired: leases.Expired, Mismatched: leases.Mismatched, LeaseLost: leases.LeaseLost}
	if err != nil {
		return fmt.Errorf("reconcile leases: %w", err)
	}
	set, err := st.ActiveRefs(ctx)
	if err != nil {
		return fmt.Errorf("active refs: %w", err)
	}
	p.rep.SessionsChecked, p.rep.Refs = set.Sessions, len(set.Refs)
	// Changed counts sessions, as they stand after the observations and
	// the unanswered refs: a session on a branch and its PR is one.
	moves := store.NewMoves(set.Refs)
	defer func() { p.rep.Changed = moves.Counts() }() // also when the pass stops early

	// A chunk at a time: asked about, then recorded and settled, so a pass
	// that runs out of time keeps what it learned, and no transaction
	// holds the sessions of more than one chunk's refs.
	if p.r.Forge == nil {
		p.rep.Error = ErrForgeNotConfigured.Error()
	}
	refs := inTurn(set.Refs, p.r.next)
	p.r.next = ""
	var answers []answer
	var forgeErrs []error
	for chunk := range slices.Chunk(refs, passChunk) {
		got := p.askAll(ctx, chunk)
		answers = append(answers, got...)
		errs, err := p.record(ctx, got, moves)
		forgeErrs = append(forgeErrs, errs...)
		if err != nil {
			return err
		}
	}
	if len(forgeErrs) > 0 {
		// Logged once here, where they are handled: they never stop a pass.
		p.r.log().Warn("reconcile: the forge could not answer for some refs", slog.Int("refs", len(forgeErrs)),
			slog.Any("err", errors.Join(forgeErrs...)))
	}
	if err := p.renames(ctx, set.Repos, answers); err != nil {
		return err
	}
	p.worktrees(ctx, set.Worktrees, answers)
	// The summary reports verdicts: what webhooks moved during the pass
	// is settled first.
	if err := st.Settled(ctx); err != nil {
		return fmt.Errorf("settle: %w", err)
	}
	counts, notValid, err := st.ValiditySummary(ctx, 100)
	if err != nil {
		return fmt.Errorf("validity summary: %w", err)
	}
	p.rep.Verdicts = counts
	for _, v := range notValid {
		p.rep.NotValid = append(p.rep.NotValid, Verdict{SessionID: v.SessionID, Repo: v.Repo, Validity: string(v.Validity), Reason: v.Reason})
	}
	return nil
}
