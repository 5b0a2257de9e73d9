package checkpointd

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ResourceKind is what a lease claims.
type ResourceKind string

// Resource kinds.
const (
	ResourceIssue  ResourceKind = "issue"
	ResourcePR     ResourceKind = "pr"
	ResourceBranch ResourceKind = "branch"
)

// Lease TTL bounds (docs/leases.md): long enough to survive a slow tool
// call, short enough that a dead holder frees the resource the same hour.
const (
	MinLeaseTTL = 10 * time.Second
	MaxLeaseTTL = 24 * time.Hour
)

// Resource is a forge object a lease claims: an issue or PR by number, or a
// branch by name, of one repo.
type Resource struct {
	Kind   ResourceKind `json:"kind"`
	Repo   string       `json:"repo"`
	Number int64        `json:"number,omitempty"`
	Branch string       `json:"branch,omitempty"`
}

// Validate reports what is wrong with r as problems under path.
func (r Resource) Validate(path string) []Problem {
	var ps []Problem
	add := func(p, m string) { ps = append(ps, Problem{Path: path + p, Message: m}) }
	if !ValidRepo(r.Repo) {
		add("/repo", "required, as owner/name")
	}
	switch r.Kind {
	case ResourceIssue, ResourcePR:
		if r.Number < 1 {
			add("/number", "required for "+string(r.Kind)+" leases: a positive number")
		}
		if r.Branch != "" {
			add("/branch", "only branch leases name a branch")
		}
	case ResourceBranch:
		if !ValidBranch(r.Branch) {
			add("/branch", fmt.Sprintf("required for branch leases: 1-%d bytes without control characters", MaxBranchLength))
		}
		if r.Number != 0 {
			add("/number", "only issue and pr leases have a number")
		}
	default:
		add("/kind", "must be issue, pr or branch")
	}
	return ps
}

// Key identifies the resource however its repo is spelled: forge names
// compare case-insensitively.
func (r Resource) Key() string {
	if r.Kind == ResourceBranch {
		return "branch:" + strings.ToLower(r.Repo) + ":" + r.Branch
	}
	return string(r.Kind) + ":" + strings.ToLower(r.Repo) + "#" + strconv.FormatInt(r.Number, 10)
}

// LeaseState is where a lease grant is in its life.
type LeaseState string

// Lease states. Only held leases are in force, and only until expires_at.
const (
	LeaseHeld     LeaseState = "held"
	LeaseReleased LeaseState = "released"
	LeaseExpired  LeaseState = "expired"
)

// LeaseHolder is the session run a lease belongs to.
type LeaseHolder struct {
	SessionID string `json:"session_id"`
	RunID     string `json:"run_id"`
}

// Lease is one grant of a resource. Its fencing token is larger than every
// earlier grant's of the same resource, across expiry, release, takeover and
// restarts, so a paused former holder's writes can be told apart.
type Lease struct {
	ID           string      `json:"id"`
	Resource     Resource    `json:"resource"`
	Holder       LeaseHolder `json:"holder"`
	FencingToken int64       `json:"fencing_token"`
	TTLSeconds   int64       `json:"ttl_seconds"` // the term of the last grant or renewal
	State        LeaseState  `json:"state"`
	AcquiredAt   time.Time   `json:"acquired_at"`
	ExpiresAt    time.Time   `json:"expires_at"`
	EndedAt      *time.Time  `json:"ended_at,omitempty"`
}

// HeldAt reports whether the lease is in force at t.
func (l *Lease) HeldAt(t time.Time) bool { return l.State == LeaseHeld && t.Before(l.ExpiresAt) }

// Lease event kinds.
const (
	EventLeaseAcquired = "lease.acquired"
	EventLeaseRenewed  = "lease.renewed"
	EventLeaseReleased = "lease.released"
	EventLeaseExpired  = "lease.expired"
	EventLeaseMoved    = "lease.moved"
	EventValidity      = "validity.changed"
)

// PrefixLease marks lease ids.
const PrefixLease = "lse_"
