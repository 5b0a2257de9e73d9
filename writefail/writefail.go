// Package writefail keeps the failed checkpoint writes a replica could not
// record in the store, so that they block a running drain across restarts
// and replicas.
//
// A write that fails while the store cannot record the failure — the
// bearer-token lookup failed, or the write and the recording did — is
// noted in a journal in the replica's data directory, synced before the
// failure is answered, and recorded in the store as soon as it answers
// again: by a worker that retries, before the replica answers any drain
// status or decision, and after any restart (the journal is replayed).
// The journal belongs to one replica, whose id it carries; the replica
// announces itself in the database (store replicas), and a drain
// completion asks every announced replica to confirm that it keeps
// nothing unrecorded (Journal.AwaitConfirmations). One that cannot confirm
// in time blocks the completion, named, unless an operator overrides it.
package writefail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// DefaultMax bounds the failures a journal keeps (a few hundred bytes
// each); past it only their number is kept, and recording it marks every
// active session of the running drain failed.
const DefaultMax = 10_000

// CodeLost is the write failure recorded on every active session when more
// failures went unrecorded than the journal keeps.
const CodeLost = "write_failures_lost"

// Failure is one failed checkpoint write the store has not recorded.
type Failure struct {
	SessionID string `json:"session"`
	// RunID is the run the document named ("" when it could not be read).
	RunID string `json:"run,omitempty"`
	// Code is the failure's problem code.
	Code string `json:"code"`
	// Principal is the caller when it was authenticated; TokenHash the
	// bearer token's hash when the store could not look it up (it is
	// authenticated when the failure is recorded).
	Principal *checkpointd.Principal `json:"principal,omitempty"`
	TokenHash string                 `json:"token_hash,omitempty"`
	At        time.Time              `json:"at"`
}

// caller keys a failure by who sent it, so that an unauthenticated request
// cannot replace the failure of one that will authenticate.
func (f *Failure) caller() string {
	if f.Principal != nil {
		return "token:" + f.Principal.TokenID
	}
	return "hash:" + f.TokenHash
}

// Store is what the journal needs of persistence.
type Store interface {
	Authenticate(ctx context.Context, hash string) (*checkpointd.Principal, error)
	RecordWriteFailure(ctx context.Context, f store.WriteFailure) (bool, error)
	RecordLostWriteFailures(ctx context.Context, code string) (int64, error)
	AnnounceReplica(ctx context.Context, r checkpointd.Replica) error
	ReportReplica(ctx context.Context, id string, pending int, confirmed int64) error
	LeaveReplica(ctx context.Context, id string) error
	RequestConfirmations(ctx context.Context) (int64, error)
	ConfirmationRequest(ctx context.Context) (int64, error)
	Replicas(ctx context.Context) ([]checkpointd.Replica, error)
}

// Journal is one replica's failed-write journal.
type Journal struct {
	st  Store
	log *slog.Logger
	max int
	id  string
	// file is nil for a journal kept in memory only (Open with no path).
	file      *file
	headerLen int64
	// unreadable is set when the file could not be read at Open: Announce
	// reports it and sets the file aside.
	unreadable error

	// hold orders notes against decisions: a note takes it exclusively, a
	// decision or a confirmation shared, from recording what is kept to
	// the answer. A failure noted meanwhile waits and is answered after.
	hold sync.RWMutex
	// recording lets one recording run at a time, so a failure is recorded
	// once.
	recording sync.Mutex

	mu sync.Mutex
	// pending are the noted failures by note number; latest the number of
	// each session's failure by caller (a newer one replaces it).
	pending map[uint64]Failure
	latest  map[string]map[string]uint64
	next    uint64
	// lost counts failures past max; lostOK the count recorded.
	lost, lostOK int
	// confirmed is the latest confirmation request answered; version and
	// started are what the replica announced.
	confirmed int64
	version   string
	started   time.Time

	wake chan struct{}
}

// Open opens the journal at path, replaying what it keeps (a crash or
// restart loses nothing it synced), and locks it. With path "" it is kept
// in memory only: what is noted does not survive the process (tests and
// embedding; serve always gives a path). A journal that cannot be read is
// not an error here: Announce reports it (the replica then blocks every
// completion until an operator overrides it) and sets the file aside.
// max <= 0 is DefaultMax. Errors: the file cannot be opened or locked.
func Open(path string, st Store, log *slog.Logger, max int) (*Journal, error) {
	if max <= 0 {
		max = DefaultMax
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	j := &Journal{st: st, log: log, max: max, pending: map[uint64]Failure{}, latest: map[string]map[string]uint64{},
		wake: make(chan struct{}, 1)}
	if path == "" {
		j.id = checkpointd.NewID(checkpointd.PrefixReplica)
		return j, nil
	}
	f, err := openFile(path)
	if err != nil {
		return nil, fmt.Errorf("journal of failed checkpoint writes: %w", err)
	}
	j.file = f
	got, err := replay(f.f)
	switch {
	case errors.Is(err, errUnreadable):
		j.unreadable = err
		j.id = got.replica
		if j.id == "" {
			j.id = checkpointd.NewID(checkpointd.PrefixReplica)
		}
		return j, nil
	case err != nil:
		f.close()
		return nil, fmt.Errorf("journal of failed checkpoint writes: %s: %w", path, err)
	}
	if got.replica == "" {
		j.id = checkpointd.NewID(checkpointd.PrefixReplica)
		if j.headerLen, err = f.start(j.id); err != nil {
			f.close()
			return nil, fmt.Errorf("journal of failed checkpoint writes: %s: %w", path, err)
		}
		return j, nil
	}
	// Drop a torn last line before appending after it.
	if err := f.truncate(got.size); err != nil {
		f.close()
		return nil, fmt.Errorf("journal of failed checkpoint writes: %s: %w", path, err)
	}
	j.id, j.headerLen, j.next, j.lost, j.lostOK = got.replica, got.headerLen, got.next, got.lost, got.lostOK
	for n, fl := range got.pending {
		j.keep(n, fl)
	}
	if len(got.pending) > 0 || j.lost != j.lostOK {
		log.Warn("drain: failed checkpoint writes from before this start wait to be recorded",
			slog.Int("failures", len(got.pending)), slog.Int("lost", j.lost-j.lostOK))
	}
	return j, nil
}

// ID is the replica's id.
func (j *Journal) ID() string { return j.id }

// Close closes the file (its lock goes with it).
func (j *Journal) Close() error {
	if j.file == nil {
		return nil
	}
	return j.file.close()
}

// keep adds note n (under mu, or before the journal is shared).
func (j *Journal) keep(n uint64, f Failure) {
	j.pending[n] = f
	callers := j.latest[f.SessionID]
	if callers == nil {
		callers = map[string]uint64{}
		j.latest[f.SessionID] = callers
	}
	callers[f.caller()] = n
}

// drop removes note n (under mu).
func (j *Journal) drop(n uint64) {
	f, ok := j.pending[n]
	if !ok {
		return
	}
	delete(j.pending, n)
	if callers := j.latest[f.SessionID]; callers[f.caller()] == n {
		delete(callers, f.caller())
		if len(callers) == 0 {
			delete(j.latest, f.SessionID)
		}
	}
}

// write appends es to the file, if there is one. A journal that cannot be
// written keeps what it notes in memory only: recorded as soon as the
// store answers, unless the process dies first; that is logged loudly.
func (j *Journal) write(es ...entry) {
	if j.file == nil || len(es) == 0 {
		return
	}
	if err := j.file.append(es...); err != nil {
		j.log.Error("drain: cannot write the journal of failed checkpoint writes; what it notes now survives only in memory until the store records it",
			slog.String("path", j.file.path), slog.Any("err", err))
	}
}

// Note keeps f durably: once it returns, f survives a crash or restart and
// blocks the running drain as soon as the store answers again. A newer
// failure of the same session and caller replaces an older one. Past the
// bound only the count is kept. It waits for a decision or confirmation in
// progress on this replica, so the failure is answered after it.
func (j *Journal) Note(ctx context.Context, f Failure) {
	j.hold.Lock()
	defer j.hold.Unlock()
	j.mu.Lock()
	old, replacing := j.latest[f.SessionID][f.caller()]
	var es []entry
	if !replacing && len(j.pending) >= j.max {
		j.lost++
		es = append(es, entry{Lost: j.lost})
	} else {
		j.next++
		es = append(es, entry{Note: j.next, Failure: &f})
		if replacing {
			j.drop(old)
			es = append(es, entry{Done: old})
		}
		j.keep(j.next, f)
	}
	j.write(es...)
	overflow := len(es) == 1 && es[0].Lost > 0
	j.mu.Unlock()
	if overflow {
		j.log.ErrorContext(ctx, "drain: too many checkpoint write failures wait for the store; every active session will block the drain",
			slog.Int("kept", j.max))
	} else {
		j.log.WarnContext(ctx, "drain: a failed checkpoint write waits for the store to be recorded",
			slog.String("session", f.SessionID), slog.String("code", f.Code))
	}
	j.Wake()
}

// Wake tells the worker the store answered: record what waits at once.
func (j *Journal) Wake() {
	j.mu.Lock()
	waiting := len(j.pending) > 0 || j.lost != j.lostOK
	j.mu.Unlock()
	if waiting {
		select {
		case j.wake <- struct{}{}:
		default:
		}
	}
}

// Pending is how many failures wait for the store (an overflow counts as
// one).
func (j *Journal) Pending() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	n := len(j.pending)
	if j.lost != j.lostOK {
		n++
	}
	return n
}

// Mark is the latest note, taken before a write starts (Superseded).
func (j *Journal) Mark() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next
}

// Superseded drops the failures of a session that a successful write made
// moot, as the write clears a recorded failure: those noted up to mark,
// before the write started. One noted since — a concurrent write that
// failed, maybe after this one committed — is kept.
func (j *Journal) Superseded(sessionID string, mark uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var es []entry
	for _, n := range j.latest[sessionID] {
		if n <= mark {
			es = append(es, entry{Done: n})
		}
	}
	for _, e := range es {
		j.drop(e.Done)
	}
	j.write(es...)
	j.compact()
}

// compact cuts the file back to its header when nothing is kept (under mu).
func (j *Journal) compact() {
	if j.file == nil || len(j.pending) > 0 || j.lost != j.lostOK {
		return
	}
	if err := j.file.truncate(j.headerLen); err != nil {
		j.log.Warn("drain: cannot compact the journal of failed checkpoint writes", slog.Any("err", err))
		return
	}
	// The counters start again with the file.
	j.lost, j.lostOK = 0, 0
}

// Record records in the store the failures kept for sessionID ("" for all,
// and the overflow). It returns the first store error: what could not be
// recorded stays kept, and a caller deciding on a drain must fail closed.
func (j *Journal) Record(ctx context.Context, sessionID string) error {
	j.mu.Lock()
	waiting := len(j.latest[sessionID]) > 0 || (sessionID == "" && (len(j.pending) > 0 || j.lost != j.lostOK))
	j.mu.Unlock()
	if !waiting {
		return nil
	}
	j.recording.Lock()
	defer j.recording.Unlock()
	j.mu.Lock()
	todo := map[uint64]Failure{}
	for n, f := range j.pending {
		if sessionID == "" || f.SessionID == sessionID {
			todo[n] = f
		}
	}
	lost, lostOK := j.lost, j.lostOK
	j.mu.Unlock()

	var done []entry
	finish := func() {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, e := range done {
			j.drop(e.Done)
		}
		j.write(done...)
		j.compact()
	}
	defer finish()
	for n, f := range todo {
		if err := j.recordOne(ctx, f); err != nil {
			return err
		}
		done = append(done, entry{Done: n})
	}
	if sessionID != "" || lost == lostOK {
		return nil
	}
	n, err := j.st.RecordLostWriteFailures(ctx, CodeLost)
	if err != nil {
		return err
	}
	j.log.ErrorContext(ctx, "drain: checkpoint write failures went unrecorded; every active session blocks the drain until it writes again",
		slog.Int64("sessions", n))
	done = append(done, entry{LostRecorded: lost})
	j.mu.Lock()
	j.lostOK = lost
	j.mu.Unlock()
	return nil
}

// recordOne records f durably, or drops it when its caller may not write
// to the session (unknown or revoked token, too low a role, out of scope)
// or the session is gone.
func (j *Journal) recordOne(ctx context.Context, f Failure) error {
	p := f.Principal
	if p == nil {
		var err error
		if p, err = j.st.Authenticate(ctx, f.TokenHash); errors.Is(err, checkpointd.ErrUnauthorized) {
			return nil
		} else if err != nil {
			return err
		}
	}
	if !p.Can(checkpointd.RoleAgent) {
		return nil
	}
	_, err := j.st.RecordWriteFailure(ctx, store.WriteFailure{SessionID: f.SessionID, RunID: f.RunID, Code: f.Code,
		FailedAt: f.At, InScope: p.InScope, Record: &checkpointd.ErrorRecord{Source: checkpointd.ErrorSourceCheckpointWrite,
			Code: f.Code, SessionID: f.SessionID, At: f.At,
			Detail: "the write failed while the store could not be reached; recorded once it was back"}})
	if errors.Is(err, checkpointd.ErrForbidden) || errors.Is(err, checkpointd.ErrNotFound) || errors.Is(err, checkpointd.ErrGone) {
		return nil
	}
	if err == nil {
		j.log.WarnContext(ctx, "drain: a checkpoint write that failed while the store was away is recorded",
			slog.String("session", f.SessionID), slog.String("code", f.Code))
	}
	return err
}

// Hold records everything kept and holds notes off until release is
// called: a drain status or decision answered meanwhile has seen every
// failure this replica answered before it. Errors: what Record returns (the
// caller fails closed).
func (j *Journal) Hold(ctx context.Context) (release func(), err error) {
	j.hold.RLock()
	if err := j.Record(ctx, ""); err != nil {
		j.hold.RUnlock()
		return nil, err
	}
	return j.hold.RUnlock, nil
}

// hostname is the host a replica announces.
func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return "unknown"
	}
	return h
}
