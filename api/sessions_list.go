package api

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// listSessions serves GET /v1/sessions: the fleet in one read.
// Every filter is checked before the store is asked; a bad value is a 422
// naming the parameter. The token's scope always applies on top: an
// owner/* filter reaching outside it lists only what the scope allows.
func (a *api) listSessions(w http.ResponseWriter, r *http.Request) error {
	limit, c, err := page(r)
	if err != nil {
		return err
	}
	f, err := a.sessionFilter(r, c)
	if err != nil {
		return err
	}
	f.Limit = limit
	if err := a.settled(r.Context()); err != nil {
		return err
	}
	items, err := a.Store.Sessions.ListSessions(r.Context(), f)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, newList(items, limit, func(s checkpointd.Session) cursor {
		if f.Sort == store.SortActivity {
			return cursor{ID: s.ID, At: s.ActivityAt.UnixMicro(), Sort: store.SortActivity}
		}
		return cursor{ID: s.ID}
	}))
}

// idPrefixPattern is what the start of a session id may be.
var idPrefixPattern = regexp.MustCompile(`^[a-z0-9_]{1,64}$`)

func (a *api) sessionFilter(r *http.Request, c cursor) (store.SessionFilter, error) {
	q := r.URL.Query()
	f := store.SessionFilter{State: checkpointd.SessionState(q.Get("state")), Repo: q.Get("repo"),
		Validity: checkpointd.Validity(q.Get("validity")), Stage: q.Get("stage"), WaitingOn: q.Get("waiting_on"),
		Branch: q.Get("branch"), Sort: q.Get("sort"), Before: c.ID, Scope: principal(r).ScopeFilter()}
	if f.State != "" && f.State != checkpointd.SessionActive && f.State != checkpointd.SessionEnded {
		return f, checkpointd.Invalid("state", "must be active or ended")
	}
	if f.Validity != "" && !f.Validity.Valid() {
		return f, checkpointd.Invalid("validity", "must be valid, stale, lease_lost, invalidated or unverified")
	}
	if f.Repo != "" && !checkpointd.ValidScope(f.Repo) {
		return f, checkpointd.Invalid("repo", "must be owner/name or owner/*")
	}
	if f.Stage != "" && !a.Workflow.HasStage(f.Stage) {
		// Quote the value only when it is name-shaped: problem details must
		// never echo a secret (as the checkpoint validation says it).
		stage := "stage"
		if rolePattern.MatchString(f.Stage) {
			stage = fmt.Sprintf("stage %q", f.Stage)
		}
		return f, checkpointd.Invalid("stage", fmt.Sprintf("%s is not configured; configured stages: %s", stage, strings.Join(a.Workflow.Stages, ", ")))
	}
	// waiting_on is a name in the checkpoint schema (at most 64 bytes):
	// anything else could match no session.
	if f.WaitingOn != "" && !rolePattern.MatchString(f.WaitingOn) {
		return f, checkpointd.Invalid("waiting_on", "must be a name: a lowercase letter, then up to 63 of a-z, 0-9, _, ., -")
	}
	for _, n := range []struct {
		name string
		into *int64
	}{{"issue", &f.Issue}, {"pr", &f.PR}} {
		v := q.Get(n.name)
		if v == "" {
			continue
		}
		num, err := strconv.ParseInt(v, 10, 64)
		if err != nil || num < 1 {
			return f, checkpointd.Invalid(n.name, "must be a positive number")
		}
		// An issue number means something only within a repo; an exact
		// repo also keeps the query on one index walk.
		if !checkpointd.ValidRepo(f.Repo) {
			return f, checkpointd.Invalid(n.name, "needs repo as owner/name")
		}
		*n.into = num
	}
	if p := q.Get("id_prefix"); p != "" {
		if !idPrefixPattern.MatchString(p) {
			return f, checkpointd.Invalid("id_prefix", "must be the start of a session id: 1-64 of a-z, 0-9 and _")
		}
		f.IDPrefix = p
	}
	if f.Branch != "" && !checkpointd.ValidBranch(f.Branch) {
		return f, checkpointd.Invalid("branch", fmt.Sprintf("must be 1-%d bytes without control characters", checkpointd.MaxBranchLength))
	}
	switch live := q.Get("live"); live {
	case "":
	case "true", "false":
		v := live == "true"
		f.Live = &v
	default:
		return f, checkpointd.Invalid("live", "must be true or false")
	}
	switch f.Sort {
	case "", store.SortCreated:
		f.Sort = store.SortCreated
	case store.SortActivity:
		f.BeforeActivity = time.UnixMicro(c.At)
	default:
		return f, checkpointd.Invalid("sort", "must be created or activity")
	}
	if c.ID != "" && (c.Sort == store.SortActivity) != (f.Sort == store.SortActivity) {
		return f, checkpointd.Invalid("cursor", "issued for another sort order")
	}
	return f, nil
}
