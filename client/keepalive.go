package client

import (
	"context"
	"errors"
	"time"

	"github.com/checkpointd/checkpointd"
)

// KeepAliveOptions tune KeepAlive.
type KeepAliveOptions struct {
	// Heartbeat is how often the run says it is alive (default a minute,
	// a tenth of the daemon's default --run-liveness).
	Heartbeat time.Duration
	// Retry is the wait after a failure that may pass (the daemon
	// unreachable, 503) before the next try (default 5s).
	Retry time.Duration
}

// Loss is what KeepAlive reports: a lease the run no longer holds (LeaseID
// set), or the run itself (LeaseID empty: superseded, parked, ended — the
// channel closes after it). Err is the daemon's answer, an *Error
// (lease_lost, run_superseded, session_ended, …).
type Loss struct {
	LeaseID string
	Err     error
}

// KeepAlive keeps run runID of session sessionID alive until ctx ends or
// the run is lost — the loop every agent writes: it heartbeats every
// opts.Heartbeat and renews every lease the run holds (those it holds at
// the start and those it acquires later) at a third of its term, for that
// term again. It reports each loss on the returned channel, and closes
// the channel when it stops. A failure that may pass is retried, not
// reported: a lease the daemon cannot be reached to renew is reported
// when it answers lease_lost. The schedule runs on this machine's clock,
// so the daemon's clock does not need to agree with it.
func (c *Client) KeepAlive(ctx context.Context, sessionID, runID string, opts *KeepAliveOptions) <-chan Loss {
	k := &keeper{c: c, session: sessionID, run: runID, beat: time.Minute, retry: 5 * time.Second,
		leases: map[string]*kept{}, out: make(chan Loss, 16)}
	if opts != nil && opts.Heartbeat > 0 {
		k.beat = opts.Heartbeat
	}
	if opts != nil && opts.Retry > 0 {
		k.retry = opts.Retry
	}
	go k.loop(ctx)
	return k.out
}

type keeper struct {
	c            *Client
	session, run string
	beat, retry  time.Duration
	leases       map[string]*kept
	nextBeat     time.Time
	out          chan Loss
}

// kept is a lease KeepAlive renews: when it is due next.
type kept struct{ due time.Time }

func (k *keeper) loop(ctx context.Context) {
	defer close(k.out)
	for {
		next, ok := k.round(ctx)
		if !ok {
			return
		}
		t := time.NewTimer(max(time.Until(next), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// round heartbeats and renews what is due; it returns when the next round
// is due, and false once the run is lost or ctx ended.
func (k *keeper) round(ctx context.Context) (time.Time, bool) {
	now := time.Now()
	if !now.Before(k.nextBeat) {
		_, err := k.c.Sessions().Heartbeat(ctx, k.session, k.run)
		switch {
		case ctx.Err() != nil:
			return now, false
		case lost(err):
			k.report(ctx, Loss{Err: err})
			return now, false
		case err != nil:
			k.nextBeat = now.Add(min(k.retry, k.beat))
		default:
			k.nextBeat = now.Add(k.beat)
		}
	}
	next := k.nextBeat
	// The run's leases, to pick up those acquired since; when the list
	// fails, the leases already kept are still renewed.
	for l, err := range k.c.Leases().All(ctx, LeaseListOptions{SessionID: k.session, State: checkpointd.LeaseHeld}) {
		if err != nil {
			if ctx.Err() != nil {
				return now, false
			}
			next = earliest(next, now.Add(k.retry))
			break
		}
		if l.Holder.RunID == k.run && k.leases[l.ID] == nil {
			k.leases[l.ID] = &kept{due: now} // first seen: renew now, then by this clock
		}
	}
	for id, l := range k.leases {
		if now.Before(l.due) {
			next = earliest(next, l.due)
			continue
		}
		// A lease that no longer shows as held is renewed too: its answer
		// (lease_lost) is the loss to report.
		renewed, err := k.c.Leases().Renew(ctx, id, k.run, 0)
		switch {
		case ctx.Err() != nil:
			return now, false
		case runLost(err):
			k.report(ctx, Loss{Err: err})
			return now, false
		case lost(err):
			delete(k.leases, id)
			k.report(ctx, Loss{LeaseID: id, Err: err})
			continue
		case err != nil:
			l.due = now.Add(k.retry)
		default:
			l.due = now.Add(time.Duration(renewed.TTLSeconds) * time.Second / 3)
		}
		next = earliest(next, l.due)
	}
	return next, true
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func (k *keeper) report(ctx context.Context, l Loss) {
	select {
	case k.out <- l:
	case <-ctx.Done():
	}
}

// lost reports an answer that will not change by trying again: a problem
// other than a passing one (5xx, 503 but draining, in flight).
func lost(err error) bool {
	var p *Error
	return errors.As(err, &p) && p.Status < 500 && !transient(p)
}

// runLost reports an answer that concerns the run, not one lease.
func runLost(err error) bool {
	var p *Error
	if !errors.As(err, &p) {
		return false
	}
	switch p.Code {
	case "run_superseded", "session_ended", "unauthorized", "forbidden":
		return true
	}
	return false
}
