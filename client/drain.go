package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/checkpointd/checkpointd"
)

// Drain calls the drain gate (/v1/drain…). Its decisions are
// sent once: a lost answer to a complete or cancel is read back with Status.
type Drain struct{ c *Client }

type drainAnswer struct {
	Drain *checkpointd.Drain `json:"drain"`
}

// Start starts a drain (operator): new sessions and runs are refused
// while it gates. A drain already running is 409 drain_running;
// Error.RunningDrain is that drain.
func (d *Drain) Start(ctx context.Context, reason string) (*checkpointd.Drain, error) {
	var out drainAnswer
	if err := d.c.post(ctx, "/v1/drain", map[string]string{"reason": reason}, &out); err != nil {
		return nil, err
	}
	return out.Drain, nil
}

// DrainStatus is GET /v1/drain: the current or last drain, the counts of
// active sessions against it, and one page of the sessions that block it.
type DrainStatus struct {
	// Drain is nil when no drain was ever started.
	Drain *checkpointd.Drain `json:"drain"`
	// Draining is whether the drain gates new sessions and runs now.
	Draining   bool                       `json:"draining"`
	Counts     *checkpointd.DrainCounts   `json:"counts"`
	Blocking   []checkpointd.DrainBlocker `json:"blocking"`
	NextCursor string                     `json:"next_cursor"`
	// Evidence is what can vouch for live heads; Notice says in words when
	// nothing can (no session can become valid).
	Evidence checkpointd.EvidenceSources `json:"evidence"`
	Notice   string                      `json:"notice"`
	// Replicas are the replicas a completion will ask to confirm that they
	// keep no unrecorded failed write (while a drain is open).
	Replicas []checkpointd.Replica `json:"replicas"`
}

// Status reads the drain's status with one page of its blocking list.
func (d *Drain) Status(ctx context.Context, opts ListOptions) (*DrainStatus, error) {
	q := url.Values{}
	opts.encode(q)
	var out DrainStatus
	if err := d.c.get(ctx, "/v1/drain", q, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Blocking walks the whole blocking list of the drain, page by page.
func (d *Drain) Blocking(ctx context.Context, opts ListOptions) iter.Seq2[checkpointd.DrainBlocker, error] {
	return walk(ctx, opts, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.DrainBlocker], error) {
		st, err := d.Status(ctx, lo)
		if err != nil {
			return nil, err
		}
		return &Page[checkpointd.DrainBlocker]{Items: st.Blocking, NextCursor: st.NextCursor}, nil
	})
}

// CompleteOptions shape a completion.
type CompleteOptions struct {
	// Limit bounds the blocking list of a blocked answer (0: the daemon's
	// default).
	Limit int
	// OverrideReplicas names replicas that did not confirm, to complete
	// past them (the operator vouches they hold no failed write; the
	// decision records it).
	OverrideReplicas []string
}

// Complete asks the gate to complete the drain (operator). While sessions
// or unconfirmed replicas block it the answer is 409 drain_blocked:
// Error.Blocked has the counts, the first blockers and the replicas. A
// store that cannot be read is 503: the gate fails closed.
func (d *Drain) Complete(ctx context.Context, opts CompleteOptions) (*checkpointd.Drain, error) {
	q := url.Values{}
	if opts.Limit > 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	var body any
	if len(opts.OverrideReplicas) > 0 {
		body = map[string][]string{"override_replicas": opts.OverrideReplicas}
	}
	r, err := newRequest(http.MethodPost, "/v1/drain/complete", q, body)
	if err != nil {
		return nil, err
	}
	var out drainAnswer
	if _, err := d.c.call(ctx, r, &out); err != nil {
		return nil, err
	}
	return out.Drain, nil
}

// Cancel ends the running drain without completing it (operator); 404
// when none runs.
func (d *Drain) Cancel(ctx context.Context) (*checkpointd.Drain, error) {
	var out drainAnswer
	if err := d.c.post(ctx, "/v1/drain/cancel", nil, &out); err != nil {
		return nil, err
	}
	return out.Drain, nil
}

// List reads one page of every drain, newest first.
func (d *Drain) List(ctx context.Context, opts ListOptions) (*Page[checkpointd.Drain], error) {
	return getPage[checkpointd.Drain](ctx, d.c, "/v1/drains", url.Values{}, opts)
}
