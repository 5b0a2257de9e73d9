package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/errlog"
	"github.com/checkpointd/checkpointd/store"
)

// errorStore keeps the durable error log.
type errorStore interface {
	errlog.Store
	ListErrors(ctx context.Context, f store.ErrorFilter) ([]checkpointd.ErrorRecord, error)
}

// listErrors lists durable errors newest first (reader): ?source=
// checkpoint_write|reconcile|webhook, ?since=RFC 3339 time, limit and
// cursor as every list. A scoped token sees only the errors about its
// repos: errors that name no repo (most refused webhooks) are for
// unscoped tokens and operators.
func (a *api) listErrors(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	f := store.ErrorFilter{Source: checkpointd.ErrorSource(q.Get("source")), Scope: principal(r).ScopeFilter(),
		Before: c.Seq, Limit: limit}
	if f.Source != "" && !f.Source.Valid() {
		names := make([]string, len(checkpointd.ErrorSources))
		for i, s := range checkpointd.ErrorSources {
			names[i] = string(s)
		}
		return checkpointd.Invalid("source", "must be one of "+strings.Join(names, ", "))
	}
	if s := q.Get("since"); s != "" {
		if f.Since, err = time.Parse(time.RFC3339Nano, s); err != nil {
			return checkpointd.Invalid("since", "must be an RFC 3339 time, e.g. 2026-01-02T15:04:05Z")
		}
	}
	items, err := a.Store.Errors.ListErrors(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(e checkpointd.ErrorRecord) cursor { return cursor{Seq: e.ID} }))
}
