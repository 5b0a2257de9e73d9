package client

import (
	"context"
	"iter"
	"net/url"
	"time"

	"github.com/checkpointd/checkpointd"
)

// ErrorLog reads the durable error log (GET /v1/errors): failed checkpoint
// writes, refused webhook deliveries and reconcile failures, newest first,
// limited to the token's scope.
type ErrorLog struct{ c *Client }

// ErrorListOptions filter the error log.
type ErrorListOptions struct {
	Source checkpointd.ErrorSource
	// Since keeps the records at or after it (zero: all kept).
	Since time.Time
	ListOptions
}

func (o ErrorListOptions) query() url.Values {
	q := url.Values{}
	if o.Source != "" {
		q.Set("source", string(o.Source))
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// List reads one page of the error log.
func (e *ErrorLog) List(ctx context.Context, opts ErrorListOptions) (*Page[checkpointd.ErrorRecord], error) {
	return getPage[checkpointd.ErrorRecord](ctx, e.c, "/v1/errors", opts.query(), opts.ListOptions)
}

// All walks the error log matching opts.
func (e *ErrorLog) All(ctx context.Context, opts ErrorListOptions) iter.Seq2[checkpointd.ErrorRecord, error] {
	return walk(ctx, opts.ListOptions, func(ctx context.Context, lo ListOptions) (*Page[checkpointd.ErrorRecord], error) {
		o := opts
		o.ListOptions = lo
		return e.List(ctx, o)
	})
}
