// Package drain is the drain gate's procedure: what a status
// and a completion do across the store, the forge and the replicas, and
// what a replica does with a checkpoint write that failed. The rule it
// applies is the domain's (checkpointd.DrainBlockers, on what the store
// keeps); the decision is the store's, in one transaction
// (store.CompleteDrain). The HTTP handlers (api/drain.go) read requests
// and write answers; they keep no state and decide nothing here.
package drain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/writefail"
)

// Store is what the gate needs of persistence. The drain row in the store
// is the truth every replica reads; nothing here decides from memory but
// the advisory header (Gating).
type Store interface {
	StartDrain(ctx context.Context, reason, by string) (*checkpointd.Drain, bool, error)
	CancelDrain(ctx context.Context, by string) (*checkpointd.Drain, error)
	CompleteDrain(ctx context.Context, c store.DrainCompletion) (*checkpointd.Drain, error)
	NoteDrainBlocked(ctx context.Context, drainID string) (int, error)
	NoteDrainCompleted(ctx context.Context) (int, error)
	DrainStatus(ctx context.Context, q store.DrainQuery) (*store.DrainStatus, error)
	DrainUnverified(ctx context.Context, limit int) ([]string, error)
	DrainGating(ctx context.Context) (bool, error)
	RecordWriteFailure(ctx context.Context, f store.WriteFailure) (bool, error)
	ListDrains(ctx context.Context, before string, limit int) ([]checkpointd.Drain, error)
	GetSession(ctx context.Context, id string) (*checkpointd.Session, error)
	Settled(ctx context.Context) error
}

// Verifier re-checks sessions against the forge before the gate decides,
// so that a session blocked only because it is unverified (e.g. after a
// restart) need not wait for the next reconcile pass. reconcile implements
// it. An error leaves the sessions unverified: they keep blocking.
type Verifier interface {
	VerifySessions(ctx context.Context, ids []string) error
}

// Defaults of the gate.
const (
	DefaultVerifyTimeout = 10 * time.Second
	DefaultHeaderTTL     = time.Second
	// maxVerify bounds how many unverified sessions one decision asks
	// reconcile about; the rest keep blocking until a pass reaches them.
	maxVerify = 10_000
	// noteTimeout bounds NoteBlocked: 100k blocking sessions take seconds.
	noteTimeout = time.Minute
	// failureTimeout bounds recording one failed write: a store that
	// hangs must not hold the answer.
	failureTimeout = 5 * time.Second
)

// Gate runs the drain gate of one replica.
type Gate struct {
	Store Store
	// Verifier, when set, re-checks the sessions blocked only by
	// unverified before a decision, for at most VerifyTimeout (default
	// DefaultVerifyTimeout). Nil skips the step.
	Verifier      Verifier
	VerifyTimeout time.Duration
	// Failures keeps the failed checkpoint writes the store could not
	// record and answers the other replicas' confirmation requests; a
	// completion waits at most ConfirmTimeout for theirs.
	Failures       *writefail.Journal
	ConfirmTimeout time.Duration
	// Errors records failed checkpoint writes durably.
	Errors *errlog.Recorder
	// HeaderTTL is how long Gating may lag the drain state (default
	// DefaultHeaderTTL; negative: read the store every time).
	HeaderTTL time.Duration
	Log       *slog.Logger

	header    header
	completed atomic.Bool // a NoteCompleted runs
	notes     struct {
		mu      sync.Mutex
		running bool
		next    string // the drain to note after the running note
	}
}

// Start starts a drain; started is false, with the running drain, when
// one runs already.
func (g *Gate) Start(ctx context.Context, reason, by string) (d *checkpointd.Drain, started bool, err error) {
	d, started, err = g.Store.StartDrain(ctx, reason, by)
	if err == nil {
		g.header.set(true, g.headerTTL())
	}
	return d, started, err
}

// Cancel cancels the running drain or lifts a completed one.
// Errors: ErrNotFound (no drain open), ErrStoreUnavailable.
func (g *Gate) Cancel(ctx context.Context, by string) (*checkpointd.Drain, error) {
	d, err := g.Store.CancelDrain(ctx, by)
	if err == nil || errors.Is(err, checkpointd.ErrNotFound) {
		g.header.set(false, g.headerTTL())
	}
	return d, err
}

// Status reads the drain's state once everything it reports is up to
// date: the failed writes this replica keeps recorded (none is kept
// unrecorded while it answers: it fails closed, 503) and the verdicts
// settled.
func (g *Gate) Status(ctx context.Context, q store.DrainQuery) (*store.DrainStatus, error) {
	release, err := g.hold(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if err := g.Store.Settled(ctx); err != nil {
		return nil, err
	}
	st, err := g.Store.DrainStatus(ctx, q)
	if err == nil {
		g.header.set(st.Drain != nil && st.Drain.Gating, g.headerTTL())
	}
	return st, err
}

// Complete asks the store to decide the open drain. First the sessions
// blocked only because they are unverified are handed to the Verifier
// (bounded in time), then the failed writes this replica keeps are
// recorded and every replica is asked to confirm it keeps none (bounded in
// time), with no failure noted on this replica in between: one noted
// meanwhile waits for the decision and is answered after it. A decision
// the store could not take or read back is an error: the drain stays
// running. Errors: ErrNotFound (no drain open), ErrStoreUnavailable.
func (g *Gate) Complete(ctx context.Context, c store.DrainCompletion) (*checkpointd.Drain, error) {
	if g.Verifier != nil {
		if err := g.Store.Settled(ctx); err != nil {
			return nil, err
		}
		ids, err := g.Store.DrainUnverified(ctx, maxVerify)
		if err != nil {
			return nil, err
		}
		if len(ids) > 0 {
			g.verify(ctx, ids)
		}
	}
	release, err := g.hold(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	if c.Request, err = g.Failures.AwaitConfirmations(ctx, g.ConfirmTimeout); err != nil {
		return nil, err
	}
	d, err := g.Store.CompleteDrain(ctx, c)
	if err == nil && d.Decision == nil {
		err = fmt.Errorf("%w: drain %s has no decision", checkpointd.ErrStoreUnavailable, d.ID)
	}
	return d, err
}

// NoteBlocked records a blocked decision in the blocking sessions' logs
// (store.NoteDrainBlocked) in the background, detached from the caller,
// within a bound, and returns at once: the first decision of a drain notes
// every active session (seconds at 100k), and nothing — the handler's
// connection, whose next request may be a cancel — waits for that. One
// note runs at a time; a decision made meanwhile is noted after it (the
// latest: a note covers every session). A failure is logged: the decision
// itself is on the drain already, and the next decision notes what this
// one could not.
func (g *Gate) NoteBlocked(ctx context.Context, drainID string) {
	g.notes.mu.Lock()
	defer g.notes.mu.Unlock()
	if g.notes.running {
		g.notes.next = drainID
		return
	}
	g.notes.running = true
	go g.noteLoop(context.WithoutCancel(ctx), drainID)
}

// noteLoop notes drainID, then the decision that came meanwhile, if any.
func (g *Gate) noteLoop(ctx context.Context, drainID string) {
	for drainID != "" {
		nctx, cancel := context.WithTimeout(ctx, noteTimeout)
		if n, err := g.Store.NoteDrainBlocked(nctx, drainID); err != nil {
			g.log().WarnContext(ctx, "drain: recording the blocked decision in the sessions' logs failed; the next decision retries",
				slog.String("drain", drainID), slog.Int("noted", n), slog.Any("err", err))
		}
		cancel()
		g.notes.mu.Lock()
		drainID, g.notes.next = g.notes.next, ""
		g.notes.running = drainID != ""
		g.notes.mu.Unlock()
	}
}

// NoteCompleted records the completed drains in the logs of the sessions
// they vouched for (store.NoteDrainCompleted) in the background, detached
// from the caller, within a bound, and returns at once: 100k events take
// seconds, and the completion is durable already. One runs at a time; what
// it leaves, the store's drain pass (RunDrainVouches) notes.
func (g *Gate) NoteCompleted(ctx context.Context) {
	if !g.completed.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer g.completed.Store(false)
		nctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), noteTimeout)
		defer cancel()
		if n, err := g.Store.NoteDrainCompleted(nctx); err != nil {
			g.log().WarnContext(ctx, "drain: recording the completion in the sessions' logs failed; the drain pass resumes",
				slog.Int("noted", n), slog.Any("err", err))
		}
	}()
}

// hold records the failed checkpoint writes this replica keeps because
// the store could not record them, and holds new ones off until release.
func (g *Gate) hold(ctx context.Context) (release func(), err error) {
	release, err = g.Failures.Hold(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: failed checkpoint writes kept while the store was away cannot be recorded: %w",
			checkpointd.ErrStoreUnavailable, err)
	}
	return release, nil
}

// verify asks the Verifier about ids within the verify timeout. The call
// is detached from the caller but not from the timeout: the gate answers
// in bounded time whatever the forge does.
func (g *Gate) verify(ctx context.Context, ids []string) {
	timeout := g.VerifyTimeout
	if timeout <= 0 {
		timeout = DefaultVerifyTimeout
	}
	vctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	start := time.Now()
	if err := g.Verifier.VerifySessions(vctx, ids); err != nil {
		g.log().WarnContext(ctx, "drain: verifying unverified sessions failed; they keep blocking",
			slog.Int("sessions", len(ids)), slog.Duration("took", time.Since(start)), slog.Any("err", err))
	}
}

// WriteFailure is a failed checkpoint write that could block a drain.
type WriteFailure struct {
	SessionID string
	// RunID is the run the document names ("" when it names none).
	RunID string
	// Code and Detail are the problem the write was answered with.
	Code, Detail string
	// StoreFailed is set when the store itself failed the write (its
	// metrics count it; no error record is added).
	StoreFailed bool
	Principal   *checkpointd.Principal
}

// WriteFailed records a failed checkpoint write so that a running drain
// cannot complete past it. Only a caller whose token covers the session's
// repo leaves a record: a document is validated before the scope is
// checked, and a token for other repos must not mark their sessions
// failed. It runs detached from the caller, within a bound; when the store
// cannot be read or written, the failure is kept in the replica's journal
// and recorded once it is back (writefail).
func (g *Gate) WriteFailed(ctx context.Context, f WriteFailure) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), failureTimeout)
	defer cancel()
	keep := writefail.Failure{SessionID: f.SessionID, RunID: f.RunID, Code: f.Code, Principal: f.Principal, At: time.Now()}
	sess, err := g.Store.GetSession(ctx, f.SessionID)
	switch {
	case errors.Is(err, checkpointd.ErrNotFound), errors.Is(err, checkpointd.ErrGone):
		return // no such session: not its failure
	case err != nil:
		g.Failures.Note(ctx, keep) // the store is failing: recorded once it is back
		return
	case !f.Principal.InScope(sess.Repo):
		return // not the caller's
	}
	if !f.StoreFailed {
		g.Errors.Record(ctx, checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceCheckpointWrite,
			Code: f.Code, SessionID: f.SessionID, Detail: f.Detail})
	}
	recorded, err := g.Store.RecordWriteFailure(ctx, store.WriteFailure{SessionID: f.SessionID, RunID: f.RunID, Code: f.Code})
	if err != nil {
		g.log().ErrorContext(ctx, "drain: cannot record a failed checkpoint write", slog.String("session", f.SessionID),
			slog.String("code", f.Code), slog.Any("err", err))
		g.Failures.Note(ctx, keep)
		return
	}
	if recorded {
		g.log().WarnContext(ctx, "drain: a failed checkpoint write blocks the drain", slog.String("session", f.SessionID),
			slog.String("code", f.Code))
	}
}

// Gating says whether a drain gates new sessions and runs, for the
// advisory Checkpointd-Drain header only: it may lag a drain started on
// another replica by HeaderTTL; refusals and decisions always read the
// store. One caller refreshes at a time, the others take the last answer
// meanwhile; a failed read keeps the last answer.
func (g *Gate) Gating(ctx context.Context) bool {
	return g.header.gating(ctx, g.Store.DrainGating, g.headerTTL(), g.log())
}

func (g *Gate) headerTTL() time.Duration {
	if g.HeaderTTL == 0 {
		return DefaultHeaderTTL
	}
	return g.HeaderTTL
}

func (g *Gate) log() *slog.Logger {
	if g.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Log
}

// header caches whether a drain gates.
type header struct {
	mu         sync.Mutex
	known      bool
	value      bool
	until      time.Time
	refreshing bool
}

func (h *header) gating(ctx context.Context, read func(context.Context) (bool, error), ttl time.Duration, log *slog.Logger) bool {
	h.mu.Lock()
	if h.known && (h.refreshing || (ttl > 0 && time.Now().Before(h.until))) {
		v := h.value
		h.mu.Unlock()
		return v
	}
	h.refreshing = true
	h.mu.Unlock()

	v, err := read(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.refreshing = false
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.WarnContext(ctx, "drain header: cannot read the drain state", slog.Any("err", err))
		}
		// Try again after a TTL, not on every request of an outage.
		h.until = time.Now().Add(ttl)
		return h.value
	}
	h.known, h.value, h.until = true, v, time.Now().Add(ttl)
	return v
}

// set records an answer this replica just wrote or read.
func (h *header) set(v bool, ttl time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.known, h.value, h.until = true, v, time.Now().Add(ttl)
}
