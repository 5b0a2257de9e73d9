package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// A checkpoint write failure must block a running drain even when the
// store could not be reached to record it (DESIGN §9): the bearer-token
// lookup failed, or the write and the recorder's own reads did. Such a
// failure is kept here, in bounded memory, keyed by session and by who
// sent it, and recorded durably — after its caller is authenticated and
// its scope checked, so a caller the store cannot vouch for decides
// nothing — as soon as the store is back: before any drain status or
// decision of this replica is answered (which answer 503 while one cannot
// be recorded), before the session's next write through this replica, and
// by a retry loop meanwhile. Past the bound nothing is forgotten silently:
// the overflow is recorded as failures of every active session of the
// running drain (docs/drain.md).

// DefaultMaxUnrecordedFailures bounds the failures one replica keeps while
// the store is away (a few hundred bytes each).
const DefaultMaxUnrecordedFailures = 10_000

// codeFailuresLost is the write failure recorded on every active session
// when more failures went unrecorded than the bound keeps.
const codeFailuresLost = "write_failures_lost"

// The retry loop tries the store again after unrecordedRetry, doubling
// the wait up to unrecordedBackoff while it fails; any request this
// replica authenticates (the store answers again) wakes it at once.
const (
	unrecordedRetry   = time.Second
	unrecordedBackoff = 30 * time.Second
)

// unrecordedFailure is one failed write the store has not recorded.
type unrecordedFailure struct {
	sessionID, runID, code string
	// principal is the caller when it was authenticated; tokenHash the
	// bearer token's hash when the store could not look it up.
	principal *checkpointd.Principal
	tokenHash string
	at        time.Time
	// seq orders the notes of a replica (unrecordedFailures.mark).
	seq uint64
}

// caller keys a failure by who sent it, so that an unauthenticated
// request cannot replace the failure of one that will authenticate.
func (f *unrecordedFailure) caller() string {
	if f.principal != nil {
		return "token:" + f.principal.TokenID
	}
	return "hash:" + f.tokenHash
}

// unrecordedFailures is the bounded memory of a replica.
type unrecordedFailures struct {
	max int
	mu  sync.Mutex
	// bySession holds the failures of each session by caller.
	bySession map[string]map[string]unrecordedFailure
	n         int
	// seq numbers the notes, so that a successful write clears only the
	// failures noted before it started (forgetSession).
	seq uint64
	// lost counts overflows; recorded is the count last recorded.
	lost, lostRecorded int
	// retrying is set while the retry loop runs (changed under mu); wake
	// cuts its wait short.
	retrying atomic.Bool
	wake     chan struct{}
	// recording lets one recording run at a time, so a session's failure
	// is recorded once, and before its next write through this replica.
	recording sync.Mutex
	// deciding is held by a drain decision from the recording of what is
	// kept to the store's decision, and read-held by add: a failure noted
	// meanwhile waits for the decision and is answered after it, rather
	// than being answered before a completion that never saw it.
	deciding sync.RWMutex
}

// add keeps f, replacing an older failure of the same session and caller.
// It reports whether the retry loop must be started.
func (u *unrecordedFailures) add(f unrecordedFailure) (overflow, startRetry bool) {
	u.deciding.RLock()
	defer u.deciding.RUnlock()
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	f.seq = u.seq
	if u.bySession == nil {
		u.bySession = map[string]map[string]unrecordedFailure{}
	}
	callers := u.bySession[f.sessionID]
	if _, ok := callers[f.caller()]; !ok {
		if u.n >= u.max {
			u.lost++
			overflow = true
		} else {
			if callers == nil {
				callers = map[string]unrecordedFailure{}
				u.bySession[f.sessionID] = callers
			}
			u.n++
		}
	}
	if !overflow {
		callers[f.caller()] = f
	}
	startRetry = !u.retrying.Load()
	u.retrying.Store(true)
	return overflow, startRetry
}

// pending reports whether anything waits to be recorded: for sessionID,
// or ("") at all.
func (u *unrecordedFailures) pending(sessionID string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if sessionID == "" {
		return u.n > 0 || u.lost != u.lostRecorded
	}
	return len(u.bySession[sessionID]) > 0
}

// snapshot copies the failures of sessionID (all for "") and the overflow
// count.
func (u *unrecordedFailures) snapshot(sessionID string) ([]unrecordedFailure, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []unrecordedFailure
	for id, callers := range u.bySession {
		if sessionID == "" || id == sessionID {
			for _, f := range callers {
				out = append(out, f)
			}
		}
	}
	return out, u.lost
}

// forget removes f unless a newer failure of its caller replaced it.
func (u *unrecordedFailures) forget(f unrecordedFailure) {
	u.mu.Lock()
	defer u.mu.Unlock()
	callers := u.bySession[f.sessionID]
	if cur, ok := callers[f.caller()]; ok && cur.at.Equal(f.at) {
		delete(callers, f.caller())
		u.n--
		if len(callers) == 0 {
			delete(u.bySession, f.sessionID)
		}
	}
}

// mark is the sequence of the latest note, taken before a write starts.
func (u *unrecordedFailures) mark() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seq
}

// forgetSession drops the failures of a session that a successful write
// superseded, as the write clears a recorded failure: those noted up to
// mark, before the write started. One noted since — a concurrent write
// that failed, maybe after this one committed — is kept.
func (u *unrecordedFailures) forgetSession(sessionID string, mark uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	callers := u.bySession[sessionID]
	for caller, f := range callers {
		if f.seq <= mark {
			delete(callers, caller)
			u.n--
		}
	}
	if len(callers) == 0 {
		delete(u.bySession, sessionID)
	}
}

// noteUnrecorded keeps a failure the store could not record.
func (a *api) noteUnrecorded(ctx context.Context, f unrecordedFailure) {
	overflow, start := a.unrecorded.add(f)
	if overflow {
		a.log.ErrorContext(ctx, "drain: too many checkpoint write failures wait for the store; every active session will block the drain",
			slog.Int("kept", a.unrecorded.max))
	} else {
		a.log.WarnContext(ctx, "drain: a failed checkpoint write waits for the store to be recorded", slog.String("session", f.sessionID),
			slog.String("code", f.code))
	}
	if start {
		go a.retryUnrecorded()
	}
}

// noteUnauthenticatedWrite keeps a checkpoint write whose bearer token
// could not be looked up because the store was unreachable: it is
// authenticated when the store is back.
func (a *api) noteUnauthenticatedWrite(r *http.Request, tokenHash string) {
	if r.Method != http.MethodPost {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sessions/")
	if !ok {
		return
	}
	id, ok := strings.CutSuffix(rest, "/checkpoints")
	if !ok || !checkpointd.ValidID(id) {
		return
	}
	a.noteUnrecorded(r.Context(), unrecordedFailure{sessionID: id, tokenHash: tokenHash, code: "store_unavailable", at: time.Now()})
}

// recordUnrecorded records the failures kept for sessionID ("" for all,
// and the overflow). It returns the first store error: what could not be
// recorded stays kept, and a caller deciding on a drain must fail closed.
func (a *api) recordUnrecorded(ctx context.Context, sessionID string) error {
	u := &a.unrecorded
	if !u.pending(sessionID) {
		return nil
	}
	u.recording.Lock()
	defer u.recording.Unlock()
	failures, lost := u.snapshot(sessionID)
	for _, f := range failures {
		if err := a.recordOne(ctx, f); err != nil {
			return err
		}
		u.forget(f)
	}
	if sessionID != "" {
		return nil
	}
	u.mu.Lock()
	recorded := u.lostRecorded
	u.mu.Unlock()
	if lost == recorded {
		return nil
	}
	n, err := a.Store.RecordLostWriteFailures(ctx, codeFailuresLost)
	if err != nil {
		return err
	}
	a.log.ErrorContext(ctx, "drain: checkpoint write failures went unrecorded; every active session blocks the drain until it writes again",
		slog.Int64("sessions", n))
	u.mu.Lock()
	u.lostRecorded = lost
	u.mu.Unlock()
	return nil
}

// recordOne records f durably, or drops it when its caller may not write
// to the session (unknown or revoked token, too low a role, out of scope)
// or the session is gone.
func (a *api) recordOne(ctx context.Context, f unrecordedFailure) error {
	p := f.principal
	if p == nil {
		var err error
		if p, err = a.Store.Authenticate(ctx, f.tokenHash); errors.Is(err, checkpointd.ErrUnauthorized) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if !p.Can(checkpointd.RoleAgent) {
		return nil
	}
	_, err := a.Store.RecordWriteFailure(ctx, store.WriteFailure{SessionID: f.sessionID, RunID: f.runID, Code: f.code,
		FailedAt: f.at, InScope: p.InScope, Record: &checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceCheckpointWrite,
			Code: f.code, SessionID: f.sessionID, At: f.at,
			Detail: "the write failed while the store could not be reached; recorded once it was back"}})
	if errors.Is(err, checkpointd.ErrForbidden) || errors.Is(err, checkpointd.ErrNotFound) || errors.Is(err, checkpointd.ErrGone) {
		return nil
	}
	if err == nil {
		a.log.WarnContext(ctx, "drain: a checkpoint write that failed while the store was away is recorded",
			slog.String("session", f.sessionID), slog.String("code", f.code))
	}
	return err
}

// wakeRetry tells the retry loop, if one runs, that the store answered.
func (u *unrecordedFailures) wakeRetry() {
	if u.retrying.Load() {
		select {
		case u.wake <- struct{}{}:
		default:
		}
	}
}

// retryUnrecorded records what is kept as soon as the store is back,
// without waiting for a decision on this replica: another replica's
// decision sees it then. It ends when nothing is kept.
func (a *api) retryUnrecorded() {
	u := &a.unrecorded
	for wait := unrecordedRetry; ; wait = min(2*wait, unrecordedBackoff) {
		select {
		case <-time.After(wait):
		case <-u.wake:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := a.recordUnrecorded(ctx, "")
		cancel()
		u.mu.Lock()
		if err == nil && u.n == 0 && u.lost == u.lostRecorded {
			u.retrying.Store(false)
			u.mu.Unlock()
			return
		}
		u.mu.Unlock()
		if err == nil {
			wait = unrecordedRetry / 2 // more came meanwhile: soon again
		}
	}
}
