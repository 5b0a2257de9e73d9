package client

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// ListOptions page a list: Limit items per page (the daemon defaults to 50
// and caps at 500) starting after Cursor, the NextCursor of the page before.
type ListOptions struct {
	Limit  int
	Cursor string
}

func (o ListOptions) encode(q url.Values) {
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
}

// Page is one page of a list: its items, and the cursor of the next page
// (empty on the last page).
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// walk yields every item of every page, fetching the next page by the
// previous one's cursor, until the last page, the first error (yielded
// once, with the zero item) or the caller stops.
func walk[T any](ctx context.Context, first ListOptions, fetch func(context.Context, ListOptions) (*Page[T], error)) iter.Seq2[T, error] {
	return func(yield func(T, error) bool) {
		opts := first
		for {
			p, err := fetch(ctx, opts)
			if err != nil {
				var zero T
				yield(zero, err)
				return
			}
			for _, it := range p.Items {
				if !yield(it, nil) {
					return
				}
			}
			// An empty page with a cursor would loop forever on a daemon
			// that misbehaves; a page is full when it has a next one.
			if p.NextCursor == "" || len(p.Items) == 0 || p.NextCursor == opts.Cursor {
				return
			}
			opts.Cursor = p.NextCursor
		}
	}
}

// getPage reads one page of a list at path.
func getPage[T any](ctx context.Context, c *Client, path string, q url.Values, o ListOptions) (*Page[T], error) {
	o.encode(q)
	r, err := newRequest("GET", path, q, nil)
	if err != nil {
		return nil, err
	}
	var p Page[T]
	if _, err := c.call(ctx, r, &p); err != nil {
		return nil, err
	}
	return &p, nil
}
