package checkpointd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
)

// TestTokenSpecCheck: what minting a token accepts, and the API's rule
// that an agent token names its scope.
func TestTokenSpecCheck(t *testing.T) {
	for _, tc := range []struct {
		name     string
		spec     checkpointd.TokenSpec
		explicit bool
		ok       bool
	}{
		{"reader, every repo", checkpointd.TokenSpec{Name: "r", Role: checkpointd.RoleReader}, true, true},
		{"agent without scope, bootstrap", checkpointd.TokenSpec{Name: "a", Role: checkpointd.RoleAgent}, false, true},
		{"agent without scope, API", checkpointd.TokenSpec{Name: "a", Role: checkpointd.RoleAgent}, true, false},
		{"agent with *", checkpointd.TokenSpec{Name: "a", Role: checkpointd.RoleAgent, Scope: []string{"*"}}, true, true},
		{"agent with owner/*", checkpointd.TokenSpec{Name: "a", Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}, true, true},
		{"bad scope", checkpointd.TokenSpec{Name: "a", Role: checkpointd.RoleAgent, Scope: []string{"*/x"}}, false, false},
		{"unknown role", checkpointd.TokenSpec{Name: "a", Role: "root"}, false, false},
		{"no name", checkpointd.TokenSpec{Role: checkpointd.RoleReader}, false, false},
		{"an hour", checkpointd.TokenSpec{Name: "r", Role: checkpointd.RoleReader, ExpiresIn: time.Hour}, true, true},
		{"negative lifetime", checkpointd.TokenSpec{Name: "r", Role: checkpointd.RoleReader, ExpiresIn: -time.Second}, true, false},
		{"past ten years", checkpointd.TokenSpec{Name: "r", Role: checkpointd.RoleReader, ExpiresIn: checkpointd.MaxTokenLifetime + time.Second}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Check(tc.explicit)
			if tc.ok && err != nil {
				t.Errorf("refused: %v", err)
			}
			if !tc.ok && !errors.Is(err, checkpointd.ErrInvalidRequest) {
				t.Errorf("Check = %v, want ErrInvalidRequest", err)
			}
		})
	}
}

// TestAllReposScope: a token scoped "*" sees every repo and filters
// nothing; one scoped to an owner sees that owner's repos alone.
func TestAllReposScope(t *testing.T) {
	all := checkpointd.Principal{Role: checkpointd.RoleAgent, Scope: []string{"acme/widgets", "*"}}
	if !all.InScope("other/tool") || all.ScopeFilter() != nil {
		t.Errorf("a * scope: InScope(other/tool) %v, ScopeFilter %v", all.InScope("other/tool"), all.ScopeFilter())
	}
	acme := checkpointd.Principal{Role: checkpointd.RoleAgent, Scope: []string{"acme/*"}}
	if acme.InScope("other/tool") || !acme.InScope("ACME/widgets") || len(acme.ScopeFilter()) != 1 {
		t.Errorf("an acme/* scope: %v %v %v", acme.InScope("other/tool"), acme.InScope("ACME/widgets"), acme.ScopeFilter())
	}
}
