package checkpointd

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
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

// TestCheckpointSchemaNamesTheWorkflow: the served schema is the published
// one with the configured roles and stages as enums, nothing else changed;
// it accepts a document in them and refuses one outside them; the enums
// read back; without a valid workflow it is the published schema.
func TestCheckpointSchemaNamesTheWorkflow(t *testing.T) {
	w := Workflow{Roles: []string{"author", "triager"}, Stages: []string{"planned", "shipping"}}
	served := w.CheckpointSchema()
	var got, published map[string]any
	if err := json.Unmarshal(served, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(CheckpointSchemaJSON, &published)
	props := got["properties"].(map[string]any)
	for name, want := range map[string][]string{"role": w.Roles, "stage": w.Stages} {
		p := props[name].(map[string]any)
		enum, _ := json.Marshal(p["enum"])
		wantJSON, _ := json.Marshal(want)
		if string(enum) != string(wantJSON) {
			t.Errorf("%s enum %s, want %s", name, enum, wantJSON)
		}
		delete(p, "enum")
	}
	if diff := cmp.Diff(published, got); diff != "" {
		t.Errorf("besides the enums the served schema differs (-published +served):\n%s", diff)
	}

	sch, err := compileSchema(checkpointSchemaURL, served, true)
	if err != nil {
		t.Fatal(err)
	}
	doc := func(role, stage string) any {
		v, _ := jsonschema.UnmarshalJSON(strings.NewReader(`{"schema_version": 1, "run_id": "run_0123456789abcdef0123456789abcdef", "fencing_token": 1, "role": "` +
			role + `", "stage": "` + stage + `"}`))
		return v
	}
	if err := sch.Validate(doc("triager", "shipping")); err != nil {
		t.Errorf("a document in the workflow: %v", err)
	}
	for _, d := range []any{doc("reviewer", "shipping"), doc("triager", "implementing")} {
		if sch.Validate(d) == nil {
			t.Error("a document outside the workflow passes the served schema")
		}
	}

	if back, ok := WorkflowOfSchema(served); !ok || !cmp.Equal(back, w) {
		t.Errorf("read back: %v %v", back, ok)
	}
	if _, ok := WorkflowOfSchema(CheckpointSchemaJSON); ok {
		t.Error("the published schema names a workflow")
	}
	if !bytes.Equal((Workflow{}).CheckpointSchema(), CheckpointSchemaJSON) {
		t.Error("the zero workflow's schema is not the published one")
	}
}
