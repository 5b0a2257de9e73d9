package writefail

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/checkpointd/checkpointd"
)

// The worker's timing: it looks for a confirmation request every
// PollInterval, reports that it is alive every ReportInterval, and backs
// off up to maxBackoff while the store does not answer.
const (
	PollInterval   = 200 * time.Millisecond
	ReportInterval = 10 * time.Second
	maxBackoff     = 5 * time.Second
	callTimeout    = 5 * time.Second
)

// DefaultConfirmTimeout is how long a completion waits for every replica
// to confirm.
const DefaultConfirmTimeout = 5 * time.Second

// Announce registers the replica in the database before it serves, with
// the failures its journal kept from before (replayed at Open). A journal
// that could not be read is reported as unknown — every completion is then
// refused, naming this replica, until an operator overrides it — and only
// then set aside (renamed *.unreadable-<time>) for a fresh one. Errors:
// ErrStoreUnavailable, or the fresh journal cannot be written.
func (j *Journal) Announce(ctx context.Context, version string) error {
	j.mu.Lock()
	if version != "" {
		j.version = version
	}
	if j.started.IsZero() {
		j.started = time.Now()
	}
	r := checkpointd.Replica{ID: j.id, Host: hostname(), PID: os.Getpid(), Version: j.version, StartedAt: j.started}
	j.mu.Unlock()
	r.Pending = j.Pending()
	if j.unreadable != nil {
		r.Unknown = checkpointd.ReplicaJournalUnreadable
	}
	if err := j.st.AnnounceReplica(ctx, r); err != nil {
		return err
	}
	if j.unreadable == nil || j.file == nil {
		return nil
	}
	aside := fmt.Sprintf("%s.unreadable-%d", j.file.path, time.Now().Unix())
	if err := os.Rename(j.file.path, aside); err != nil {
		return fmt.Errorf("journal of failed checkpoint writes: set the unreadable one aside: %w", err)
	}
	fresh, err := openFile(j.file.path)
	if err != nil {
		return fmt.Errorf("journal of failed checkpoint writes: %w", err)
	}
	if j.headerLen, err = fresh.start(j.id); err != nil {
		fresh.close()
		return fmt.Errorf("journal of failed checkpoint writes: %w", err)
	}
	j.file.close()
	j.file = fresh
	j.log.Error("drain: the journal of failed checkpoint writes could not be read; every drain completion is refused until an operator overrides this replica",
		slog.String("replica", j.id), slog.String("set_aside", aside), slog.Any("err", j.unreadable))
	j.unreadable = nil
	return nil
}

// Run records what the journal keeps as soon as the store answers, answers
// the completions' confirmation requests, and reports the replica alive,
// until ctx ends.
func (j *Journal) Run(ctx context.Context) error {
	wait, lastReport := time.Duration(0), time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		case <-j.wake:
		}
		tctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := j.tick(tctx, &lastReport)
		cancel()
		switch {
		case err == nil:
			wait = PollInterval
		case ctx.Err() != nil:
			return nil
		default:
			wait = min(max(2*wait, time.Second), maxBackoff)
		}
	}
}

// tick answers a new confirmation request, records what waits, or reports
// the replica alive, when any is due.
func (j *Journal) tick(ctx context.Context, lastReport *time.Time) error {
	request, err := j.st.ConfirmationRequest(ctx)
	if err != nil {
		return err
	}
	j.mu.Lock()
	due := request > j.confirmed || len(j.pending) > 0 || j.lost != j.lostOK
	j.mu.Unlock()
	if !due && time.Since(*lastReport) < ReportInterval {
		return nil
	}
	if err := j.confirm(ctx, request); err != nil {
		return err
	}
	*lastReport = time.Now()
	return nil
}

// confirm records everything kept and, with nothing left, answers request.
// It holds notes off meanwhile, so nothing noted before the answer is
// missing from the store.
func (j *Journal) confirm(ctx context.Context, request int64) error {
	j.hold.RLock()
	defer j.hold.RUnlock()
	if err := j.Record(ctx, ""); err != nil {
		// Tell what waits, if the store takes that much.
		_ = j.st.ReportReplica(ctx, j.id, j.Pending(), 0)
		return err
	}
	err := j.st.ReportReplica(ctx, j.id, 0, request)
	if errors.Is(err, checkpointd.ErrNotFound) {
		// An override forgot this replica while it served: announce again.
		if err = j.Announce(ctx, ""); err == nil { // the version announced at the start
			err = j.st.ReportReplica(ctx, j.id, 0, request)
		}
	}
	if err != nil {
		return err
	}
	j.mu.Lock()
	j.confirmed = max(j.confirmed, request)
	j.mu.Unlock()
	return nil
}

// AwaitConfirmations asks every registered replica to confirm that it keeps
// no failed write the store has not recorded, and waits up to timeout for
// the answers. The caller holds this journal (Hold): this replica answers
// at once. It returns the request's number, which the store's decision
// checks every replica against (checkpointd.ReplicaBlocks): one that has
// not answered by then blocks, named. It stops waiting early when every
// replica answered, or when those that did not cannot (unknown journal,
// not heard from for several report intervals). Errors: ErrStoreUnavailable.
func (j *Journal) AwaitConfirmations(ctx context.Context, timeout time.Duration) (int64, error) {
	if timeout <= 0 {
		timeout = DefaultConfirmTimeout
	}
	request, err := j.st.RequestConfirmations(ctx)
	if err != nil {
		return 0, err
	}
	// Held and recorded: this replica keeps nothing. A journal that was
	// never announced (kept in memory, in tests) has no row to answer with.
	if err := j.st.ReportReplica(ctx, j.id, 0, request); err != nil && !errors.Is(err, checkpointd.ErrNotFound) {
		return 0, err
	}
	deadline := time.Now().Add(timeout)
	for {
		reps, err := j.st.Replicas(ctx)
		if err != nil {
			return 0, err
		}
		waiting := false
		for _, r := range reps {
			if _, blocks := checkpointd.ReplicaBlocks(r, request); blocks && r.Unknown == "" &&
				time.Since(r.HeardAt) < 3*ReportInterval {
				waiting = true
			}
		}
		if !waiting || time.Now().After(deadline) {
			return request, nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("%w: waiting for the replicas to confirm: %w", checkpointd.ErrStoreUnavailable, ctx.Err())
		case <-time.After(PollInterval / 4):
		}
	}
}

// Leave records what is kept and, with nothing left, forgets the replica
// in the database: a clean stop. With failures still waiting (the store is
// away) the replica stays registered, and blocks every completion until it
// starts again on this journal or an operator overrides it. Call it after
// the replica stopped serving. Errors: ErrStoreUnavailable, or what is kept
// could not be recorded.
func (j *Journal) Leave(ctx context.Context) error {
	j.hold.Lock()
	defer j.hold.Unlock()
	if err := j.Record(ctx, ""); err != nil {
		return fmt.Errorf("%d failed checkpoint writes wait in the journal for the next start: %w", j.Pending(), err)
	}
	return j.st.LeaveReplica(ctx, j.id)
}
