package checkpointd

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefaultWorkflow(t *testing.T) {
	wf := DefaultWorkflow()
	if err := wf.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range []string{"author", "reviewer", "operator"} {
		if !wf.HasRole(r) {
			t.Errorf("HasRole(%q) = false", r)
		}
	}
	for _, s := range []string{"planned", "implementing", "testing", "review_requested", "reviewing", "addressing_review", "merging", "blocked", "done"} {
		if !wf.HasStage(s) {
			t.Errorf("HasStage(%q) = false", s)
		}
	}
	if wf.HasRole("implementing") || wf.HasStage("author") || wf.HasRole("") || wf.HasStage("Done") {
		t.Error("roles and stages leak into each other or match loosely")
	}
	// Callers may edit the result without changing the next default.
	wf.Roles[0] = "x"
	if DefaultWorkflow().Roles[0] != "author" {
		t.Error("DefaultWorkflow shares its slices")
	}
}

func TestWorkflowValidate(t *testing.T) {
	tests := []struct {
		name string
		wf   Workflow
		ok   bool
	}{
		{"custom", Workflow{Roles: []string{"deployer"}, Stages: []string{"deploying", "v2.done", "a-b_c"}}, true},
		{"no roles", Workflow{Stages: []string{"done"}}, false},
		{"no stages", Workflow{Roles: []string{"author"}}, false},
		{"uppercase", Workflow{Roles: []string{"Author"}, Stages: []string{"done"}}, false},
		{"leading digit", Workflow{Roles: []string{"author"}, Stages: []string{"1st"}}, false},
		{"space", Workflow{Roles: []string{"author"}, Stages: []string{"in review"}}, false},
		{"empty name", Workflow{Roles: []string{""}, Stages: []string{"done"}}, false},
		{"65 characters", Workflow{Roles: []string{strings.Repeat("a", 65)}, Stages: []string{"done"}}, false},
		{"64 characters", Workflow{Roles: []string{strings.Repeat("a", 64)}, Stages: []string{"done"}}, true},
		{"duplicate stage", Workflow{Roles: []string{"author"}, Stages: []string{"done", "planned", "done"}}, false},
		{"role may equal a stage", Workflow{Roles: []string{"review"}, Stages: []string{"review"}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.wf.Validate()
			if tt.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidWorkflow) {
				t.Errorf("err = %v, want ErrInvalidWorkflow", err)
			}
		})
	}
}

func TestParseNameList(t *testing.T) {
	tests := []struct {
		in   string
		want []string // nil: error
	}{
		{"author", []string{"author"}},
		{"author,reviewer,operator", []string{"author", "reviewer", "operator"}},
		{" author , reviewer ", []string{"author", "reviewer"}},
		{"", nil},
		{"  ", nil},
		{"author,", nil},
		{"author,,reviewer", nil},
		{"author,Reviewer", nil},
		{"author,author", nil},
		{"author;reviewer", nil},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseNameList(tt.in)
			if tt.want == nil {
				if !errors.Is(err, ErrInvalidWorkflow) {
					t.Fatalf("ParseNameList(%q) = %q, %v; want ErrInvalidWorkflow", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseNameList(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}
