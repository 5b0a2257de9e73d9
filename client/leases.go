package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"strconv"

	"github.com/checkpointd/checkpointd"
)

// Leases calls the lease routes (/v1/leases…). No lease call is retried:
// a lost answer to an acquire may mean the lease is held, and a second
// acquire by the same run would be refused or fenced anew; the caller
// decides (list the session's leases, or acquire again knowingly).
type Leases struct{ c *Client }

// AcquireRequest is the body of POST /v1/leases.
type AcquireRequest struct {
	Resource   checkpointd.Resource `json:"resource"`
	SessionID  string               `json:"session_id"`
	RunID      string               `json:"run_id"`
	TTLSeconds int64                `json:"ttl_seconds"`
}

type leaseAnswer struct {
	Lease *checkpointd.Lease `json:"lease"`
}

func leasePath(id string, rest ...string) string {
	p := "/v1/leases/" + url.PathEscape(id)
	for _, s := range rest {
		p += "/" + s
	}
	return p
}

// Acquire leases a resource (an issue, a PR, a branch) for a run. A
// resource another run holds is 409 lease_held; Error.Holder says who.
func (l *Leases) Acquire(ctx context.Context, in *AcquireRequest) (*checkpointd.Lease, error) {
	var out leaseAnswer
	if err := l.c.post(ctx, "/v1/leases", in, &out); err != nil {
		return nil, err
	}
	return out.Lease, nil
}

// Renew extends the lease by ttlSeconds (0: its last term). A lease that
// expired, was released or moved to another run is 409 lease_lost.
func (l *Leases) Renew(ctx context.Context, leaseID, runID string, ttlSeconds int64) (*checkpointd.Lease, error) {
	body := struct {
		RunID      string `json:"run_id"`
		TTLSeconds int64  `json:"ttl_seconds,omitempty"`
	}{runID, ttlSeconds}
	var out leaseAnswer
	if err := l.c.post(ctx, leasePath(leaseID, "renew"), body, &out); err != nil {
		return nil, err
	}
	return out.Lease, nil
}

// Release gives the lease up for runID, its holder. An operator may pass
// an empty runID to force-release a lease of any run.
func (l *Leases) Release(ctx context.Context, leaseID, runID string) error {
	q := url.Values{}
	if runID != "" {
		q.Set("run_id", runID)
	}
	r, err := newRequest(http.MethodDelete, leasePath(leaseID), q, nil)
	if err != nil {
		return err
	}
	_, err = l.c.call(ctx, r, nil)
	return err
}

// LeaseListOptions filter GET /v1/leases. Number or Branch name one
// resource (with Kind and Repo).
type LeaseListOptions struct {
	Repo      string
	Kind      checkpointd.ResourceKind
	Number    int64
	Branch    string
	SessionID string
	State     checkpointd.LeaseState
	// IDPrefix keeps the leases whose id begins with it (a short id a
	// person typed).
	IDPrefix string
	ListOptions
}

func (o LeaseListOptions) query() url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("repo", o.Repo)
	set("kind", string(o.Kind))
	set("branch", o.Branch)
	set("session_id", o.SessionID)
	set("state", string(o.State))
	set("id_prefix", o.IDPrefix)
	if o.Number != 0 {
		q.Set("number", strconv.FormatInt(o.Number, 10))
	}
	return q
}

// List reads one page of leases.
func (l *Leases) List(ctx context.Context, opts LeaseListOptions) (*Page[checkpointd.Lease], error) {
	return getPage[checkpointd.Lease](ctx, l.c, "/v1/leases", opts.query(), opts.ListOptions)
}

// All walks every lease matching opts.
func (l *Leases) All(ctx context.Context, opts LeaseListOptions) iter.Seq2[checkpointd.Lease, error] {
	return walk(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.Lease], error) {
		o := opts
		o.ListOptions = lo
		return l.List(ctx, o)
	})
}
