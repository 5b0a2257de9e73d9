package checkpointd

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// completeDoc returns a document that meets every completeness rule when
// the run holds lease l1 with token 7.
func completeDoc() *Document {
	return &Document{
		SchemaVersion: 1, RunID: "run_1", FencingToken: 1, Role: "author",
		Identity:        &Identity{Runtime: "claude-code"},
		Workspace:       &Workspace{Branch: "fix-12", Head: "9fceb02d0ae598e95dc970b74767f19372d61af8"},
		Leases:          []LeaseRef{{LeaseID: "l1", FencingToken: 7}},
		Stage:           "implementing",
		PendingMutation: &PendingMutation{Kind: "gitea.pr.comment", IdempotencyKey: "k1"},
		NextAction:      &NextAction{Action: "run the tests"},
		Recovery:        &Recovery{Instructions: "fetch and reset to head"},
	}
}

func TestMissing(t *testing.T) {
	held := map[string]int64{"l1": 7}
	tests := []struct {
		name string
		edit func(d *Document)
		held map[string]int64
		want []string
	}{
		{"complete", func(d *Document) {}, held, nil},
		{"complete without optional parts", func(d *Document) {
			d.Workspace, d.Leases, d.PendingMutation = nil, nil, nil
		}, nil, nil},
		{"workspace without branch needs no head", func(d *Document) { d.Workspace = &Workspace{Worktree: "/w"} }, held, nil},
		{"stage", func(d *Document) { d.Stage = "" }, held, []string{"stage"}},
		{"identity absent", func(d *Document) { d.Identity = nil }, held, []string{"identity.runtime"}},
		{"identity without runtime", func(d *Document) { d.Identity = &Identity{Model: "m"} }, held, []string{"identity.runtime"}},
		{"next action absent", func(d *Document) { d.NextAction = nil }, held, []string{"next_action"}},
		{"next action without action", func(d *Document) { d.NextAction = &NextAction{Actor: "author"} }, held, []string{"next_action"}},
		{"recovery absent", func(d *Document) { d.Recovery = nil }, held, []string{"recovery.instructions"}},
		{"recovery instructions blank", func(d *Document) {
			d.Recovery = &Recovery{Instructions: " \n\t", Commands: []string{"git fetch"}}
		}, held, []string{"recovery.instructions"}},
		{"branch without head", func(d *Document) { d.Workspace.Head = "" }, held, []string{"workspace.head"}},
		{"pending mutation without key", func(d *Document) { d.PendingMutation.IdempotencyKey = "" }, held,
			[]string{"pending_mutation.idempotency_key"}},
		{"lease not held", func(d *Document) {}, nil, []string{"lease:l1"}},
		{"lease held by token 8", func(d *Document) {}, map[string]int64{"l1": 8}, []string{"lease:l1"}},
		{"other lease held", func(d *Document) {}, map[string]int64{"l2": 7}, []string{"lease:l1"}},
		{"leases in document order, each once", func(d *Document) {
			d.Leases = []LeaseRef{{"l3", 1}, {"l1", 7}, {"l2", 1}, {"l3", 1}, {"l1", 6}}
		}, held, []string{"lease:l3", "lease:l2", "lease:l1"}},
		{"everything, in order", func(d *Document) {
			*d = Document{
				Workspace:       &Workspace{Branch: "b"},
				PendingMutation: &PendingMutation{Kind: "k"},
				Leases:          []LeaseRef{{"l2", 1}, {"l1", 7}},
			}
		}, held, []string{
			"stage", "identity.runtime", "next_action", "recovery.instructions",
			"workspace.head", "pending_mutation.idempotency_key", "lease:l2",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := completeDoc()
			tt.edit(d)
			got := Missing(d, tt.held)
			if diff := cmp.Diff(tt.want, got); diff != "" { // nil and empty differ here on purpose
				t.Errorf("Missing() (-want +got):\n%s", diff)
			}
			if Complete(got) != (tt.want == nil) {
				t.Errorf("Complete(%q) = %v", got, Complete(got))
			}
		})
	}
}

func TestMissingNil(t *testing.T) {
	want := []string{"stage", "identity.runtime", "next_action", "recovery.instructions"}
	if diff := cmp.Diff(want, Missing(nil, nil)); diff != "" {
		t.Errorf("Missing(nil) (-want +got):\n%s", diff)
	}
}
