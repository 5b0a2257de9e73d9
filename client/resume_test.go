package client_test

import (
	"reflect"
	"testing"

	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/reconcile"
)

// TestWorktreeMatchesReconcile keeps client.Worktree, a copy, field for
// field (names, types, JSON tags) the reconcile package's.
func TestWorktreeMatchesReconcile(t *testing.T) {
	fields := func(typ reflect.Type) []string {
		var out []string
		for f := range typ.Fields() {
			out = append(out, f.Name+" "+f.Type.String()+" "+string(f.Tag))
		}
		return out
	}
	want, got := fields(reflect.TypeFor[reconcile.Worktree]()), fields(reflect.TypeFor[client.Worktree]())
	if !reflect.DeepEqual(want, got) {
		t.Errorf("client.Worktree drifted from reconcile.Worktree:\n got %q\nwant %q", got, want)
	}
}
