package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestCreateTokenRefusesBadName: the store itself refuses a token name
// that ValidateTokenName refuses, so no caller (CLI or a later admin
// API) can store one that breaks a listing.
func TestCreateTokenRefusesBadName(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		ctx := t.Context()
		s := storetest.Open(t, b, checkpointd.NewManualClock(t0))
		for _, name := range []string{"", "ci\nbot", "ci\tbot", "ci\u202ebot", strings.Repeat("n", checkpointd.MaxNameLength+1)} {
			if _, err := s.CreateToken(ctx, checkpointd.TokenSpec{Name: name, Role: checkpointd.RoleAgent}, checkpointd.HashToken(checkpointd.NewTokenSecret())); !errors.Is(err, checkpointd.ErrInvalidRequest) {
				t.Errorf("CreateToken(%q): %v, want ErrInvalidRequest", name, err)
			}
		}
		if list, err := s.ListTokens(ctx, "", 0); err != nil || len(list) != 0 {
			t.Errorf("ListTokens after refusals: %+v %v", list, err)
		}
		if _, err := s.CreateToken(ctx, checkpointd.TokenSpec{Name: "CI bot — ünïcode", Role: checkpointd.RoleAgent}, checkpointd.HashToken(checkpointd.NewTokenSecret())); err != nil {
			t.Errorf("a name with spaces and letters: %v", err)
		}
	})
}
