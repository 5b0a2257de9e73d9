package reconcile

import (
	"sort"
	"time"
)

// Triggers say what started a pass.
const (
	TriggerBoot     = "boot"     // the first pass after the daemon started
	TriggerInterval = "interval" // --reconcile-interval
	TriggerDrain    = "drain"    // the drain gate asked before deciding
	TriggerAPI      = "api"      // POST /v1/reconcile
)

// Report is what one pass found and did. It is stored (GET
// /v1/reconcile/last) and every validity change it made cites its ID as
// reconcile:<id> in the session's event log.
type Report struct {
	ID         string    `json:"id"`
	Trigger    string    `json:"trigger"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	DurationMS int64     `json:"duration_ms"`
	// Forge is the forge's base URL, or "not configured".
	Forge string `json:"forge"`
	// SessionsChecked counts the active sessions that were not already
	// invalidated (invalidated is final; nothing can change it).
	SessionsChecked int `json:"sessions_checked"`
	// Refs counts the distinct refs of the pass; ForgeCalls the HTTP
	// requests made (redirects, retries and repository checks included).
	// RefsDeferred counts the refs it had no time left to ask about (more
	// refs than the forge's rate lets one pass ask): their sessions keep
	// their validity, and the next pass goes on from them.
	Refs           int `json:"refs"`
	RefsUnverified int `json:"refs_unverified"`
	RefsDeferred   int `json:"refs_deferred"`
	ForgeCalls     int `json:"forge_calls"`
	// Verdicts counts every active session by its validity after the pass;
	// Changed counts the sessions this pass moved to each validity.
	Verdicts map[string]int `json:"verdicts"`
	Changed  map[string]int `json:"changed"`
	Leases   LeaseReport    `json:"leases"`
	// ErrorsByRepo lists, per repo, the refs the forge could not answer and
	// why; their sessions became (or stayed) unverified.
	ErrorsByRepo map[string][]string `json:"errors_by_repo"`
	Renames      []Rename            `json:"renames"`
	// WorktreesChecked counts the recorded worktrees found on this host;
	// Worktrees lists those that drifted or could not be read.
	WorktreesChecked int        `json:"worktrees_checked"`
	Worktrees        []Worktree `json:"worktrees"`
	// NotValid lists up to 100 active sessions that are not valid, and why.
	NotValid []Verdict `json:"not_valid"`
	// Error is why the pass could not check the forge at all (e.g. "forge
	// not configured") or stopped early.
	Error string `json:"error,omitempty"`
}

// LeaseReport counts what the pass did to lease records.
type LeaseReport struct {
	Expired    int `json:"expired"`    // held past their time, ended
	Mismatched int `json:"mismatched"` // held by a run that is not the session's current run, released
	LeaseLost  int `json:"lease_lost"` // sessions whose checkpoint names a lease their run does not hold
	// ReleasedByRefs counts the leases released because their PR closed or
	// merged or their branch was deleted.
	ReleasedByRefs int `json:"released_by_refs"`
}

// Rename is a repo sessions name that the forge knows by another name now.
type Rename struct {
	Repo string `json:"repo"`
	// RepoID is the forge's repository id, absent when the pass did not
	// learn it (a redirected branch answer carries none).
	RepoID  int64  `json:"repo_id,omitempty"`
	NewName string `json:"new_name"`
	// Source is "forge" (the forge redirected the old name) or "webhook" (a
	// delivery named the same repository id under the new name).
	Source string `json:"source"`
}

// Verdict is one session's validity and why.
type Verdict struct {
	SessionID string `json:"session_id"`
	Repo      string `json:"repo"`
	Validity  string `json:"validity"`
	Reason    string `json:"reason,omitempty"`
}

// Scoped returns a copy of the report with the per-repo details limited to
// the repos inScope accepts: a reader scoped to some repos sees the counts
// but not the names, reasons and paths of other repos' sessions.
func (r *Report) Scoped(inScope func(repo string) bool) *Report {
	out := *r
	out.ErrorsByRepo = map[string][]string{}
	for repo, errs := range r.ErrorsByRepo {
		if inScope(repo) {
			out.ErrorsByRepo[repo] = errs
		}
	}
	out.Renames = keep(r.Renames, func(x Rename) bool { return inScope(x.Repo) })
	out.Worktrees = keep(r.Worktrees, func(x Worktree) bool { return inScope(x.Repo) })
	out.NotValid = keep(r.NotValid, func(x Verdict) bool { return inScope(x.Repo) })
	return &out
}

func keep[T any](xs []T, ok func(T) bool) []T {
	out := []T{}
	for _, x := range xs {
		if ok(x) {
			out = append(out, x)
		}
	}
	return out
}

func newReport(id, trigger, forge string, at time.Time) *Report {
	return &Report{ID: id, Trigger: trigger, StartedAt: at, Forge: forge, Verdicts: map[string]int{},
		Changed: map[string]int{}, ErrorsByRepo: map[string][]string{}, Renames: []Rename{},
		Worktrees: []Worktree{}, NotValid: []Verdict{}}
}

func (r *Report) addError(repo, msg string) {
	r.ErrorsByRepo[repo] = append(r.ErrorsByRepo[repo], msg)
	sort.Strings(r.ErrorsByRepo[repo])
}
