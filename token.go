package checkpointd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
)

// TokenRole is an API token's access role. It is about access,
// not about the work: session roles are configuration, token roles are not.
type TokenRole string

// Token roles, from least to most privileged.
const (
	RoleReader   TokenRole = "reader"
	RoleAgent    TokenRole = "agent"
	RoleOperator TokenRole = "operator"
)

// Valid reports whether r is a known token role.
func (r TokenRole) Valid() bool { return r == RoleReader || r == RoleAgent || r == RoleOperator }

// Token is an API token's metadata. The secret itself is shown once at
// creation and stored only as its hash.
type Token struct {
	ID    string    `json:"id"`
	Name  string    `json:"name"`
	Role  TokenRole `json:"role"`
	Scope []string  `json:"scopes"` // owner/name, owner/* or *; empty: every repo
	// ExpiresAt is when the token stops working; nil: never.
	ExpiresAt *time.Time `json:"expires_at"`
	// LastUsedAt is when a request last authenticated with it, to the
	// minute (it is written at most once a minute); nil: never used.
	LastUsedAt *time.Time `json:"last_used_at"`
	CreatedAt  time.Time  `json:"created_at"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// TokenSpec is what minting a token asks for.
type TokenSpec struct {
	Name  string
	Role  TokenRole
	Scope []string
	// ExpiresIn, when not 0, is the token's lifetime from its creation.
	ExpiresIn time.Duration
}

// AllRepos is the scope entry that names every repo: an agent token minted
// over the API must say it rather than get it by leaving the scope out.
const AllRepos = "*"

// MaxTokenLifetime bounds expires_in_seconds: ten years, beyond which an
// expiry says nothing.
const MaxTokenLifetime = 10 * 365 * 24 * time.Hour

// Check judges a spec: a known role, a name ValidateTokenName accepts,
// scope entries that are owner/name, owner/* or *. With explicitScope (the
// token API) an agent token must name its scope: an agent that may touch
// every repo is a decision someone says out loud.
func (t TokenSpec) Check(explicitScope bool) error {
	if !t.Role.Valid() {
		return Invalid("/role", "must be one of agent, reader, operator")
	}
	if err := ValidateTokenName(t.Name); err != nil {
		return err
	}
	for i, sc := range t.Scope {
		if !ValidScope(sc) {
			return Invalid(fmt.Sprintf("/scopes/%d", i), "must be owner/name, owner/* or *")
		}
	}
	if t.ExpiresIn < 0 || t.ExpiresIn > MaxTokenLifetime {
		return Invalid("/expires_in_seconds", fmt.Sprintf("must be between 1 and %d seconds (ten years)", int64(MaxTokenLifetime/time.Second)))
	}
	if explicitScope && t.Role == RoleAgent && len(t.Scope) == 0 {
		return Invalid("/scopes", `an agent token needs at least one scope: owner/name, owner/*, or "*" for every repo`)
	}
	return nil
}

// tokenPrefix marks checkpointd tokens so secret scanners (and our own
// redactor) recognise them.
const tokenPrefix = "cpd_"

// NewTokenSecret returns a fresh random API token: 256 bits, URL-safe.
func NewTokenSecret() string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		panic("checkpointd: no randomness: " + err.Error())
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// HashToken is how a token is stored and looked up. Tokens carry 256 random
// bits, so a fast unsalted hash is enough: nothing can be guessed from it.
func HashToken(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ValidScope reports whether s is a repo scope entry: owner/name, owner/*
// or * (every repo).
func ValidScope(s string) bool {
	if s == AllRepos {
		return true
	}
	if owner, ok := strings.CutSuffix(s, "/*"); ok {
		return ValidRepo(owner + "/x")
	}
	return ValidRepo(s)
}

// Principal is the authenticated caller of a request.
type Principal struct {
	TokenID string
	Name    string
	Role    TokenRole
	Scope   []string
	// ExpiresAt is when the token stops working; nil: never.
	ExpiresAt *time.Time
}

// InScope reports whether the principal may see repo. Operators and tokens
// without a scope see every repo; names compare case-insensitively, as the
// forge does.
func (p Principal) InScope(repo string) bool {
	if p.ScopeFilter() == nil {
		return true
	}
	for _, s := range p.Scope {
		if owner, ok := strings.CutSuffix(s, "/*"); ok {
			o, _, _ := strings.Cut(repo, "/")
			if strings.EqualFold(o, owner) {
				return true
			}
		} else if strings.EqualFold(s, repo) {
			return true
		}
	}
	return false
}

// ScopeFilter returns the repo scope to filter lists by, or nil for all.
func (p Principal) ScopeFilter() []string {
	if p.Role == RoleOperator || len(p.Scope) == 0 || slices.Contains(p.Scope, AllRepos) {
		return nil
	}
	return p.Scope
}

// Can reports whether the principal's role grants at least need.
func (p Principal) Can(need TokenRole) bool {
	rank := map[TokenRole]int{RoleReader: 1, RoleAgent: 2, RoleOperator: 3}
	return rank[p.Role] >= rank[need] && rank[need] > 0
}
