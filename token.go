package checkpointd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
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
	ID        string     `json:"id"`
	Name      string     `json:"name"`
	Role      TokenRole  `json:"role"`
	Scope     []string   `json:"scope"` // owner/name or owner/*; empty: every repo
	CreatedAt time.Time  `json:"created_at"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
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

// ValidScope reports whether s is a repo scope entry: owner/name or owner/*.
func ValidScope(s string) bool {
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
}

// InScope reports whether the principal may see repo. Operators and tokens
// without a scope see every repo; names compare case-insensitively, as the
// forge does.
func (p Principal) InScope(repo string) bool {
	if p.Role == RoleOperator || len(p.Scope) == 0 {
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
	if p.Role == RoleOperator || len(p.Scope) == 0 {
		return nil
	}
	return p.Scope
}

// Can reports whether the principal's role grants at least need.
func (p Principal) Can(need TokenRole) bool {
	rank := map[TokenRole]int{RoleReader: 1, RoleAgent: 2, RoleOperator: 3}
	return rank[p.Role] >= rank[need] && rank[need] > 0
}
