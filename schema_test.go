package checkpointd

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fullTree returns a fresh generic copy of testdata/checkpoint-full.json for
// a test case to edit.
func fullTree(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(readTestdata(t, "checkpoint-full.json"), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func obj(m map[string]any, path ...string) map[string]any {
	for _, p := range path {
		m = m[p].(map[string]any)
	}
	return m
}

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// problemsOf returns the problems of a ValidationError of kind
// ErrInvalidCheckpoint, failing the test on any other error.
func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	if !errors.Is(err, ErrInvalidCheckpoint) {
		t.Fatalf("err = %v, want ErrInvalidCheckpoint", err)
	}
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %T, want *ValidationError", err)
	}
	return verr.Problems
}

func TestDecodeDocumentFull(t *testing.T) {
	tree, got, err := DecodeDocument(readTestdata(t, "checkpoint-full.json"), DefaultWorkflow())
	if err != nil {
		t.Fatal(err)
	}
	want := &Document{
		SchemaVersion: 1,
		RunID:         "run_01JQ8ZK4T6W2B9N3C5D7F1G0HX",
		FencingToken:  3,
		Identity: &Identity{
			Runtime: "claude-code", RuntimeVersion: "2.1.0", Provider: "anthropic",
			Model: "claude-sonnet-4-5", Instance: "host-7/pid-4411",
		},
		Role:   "author",
		Target: &Target{Repo: "acme/widgets", Issue: 12, PR: 34},
		Workspace: &Workspace{
			Worktree: "/srv/agents/w1/acme-widgets", Branch: "fix-12-null-deref",
			Head: "9fceb02d0ae598e95dc970b74767f19372d61af8", Base: "main",
		},
		Capabilities: []string{"git.push", "pr.create", "pr.comment", "tests.run"},
		Leases: []LeaseRef{
			{LeaseID: "lse_01JQ8ZM0A1B2C3D4E5F6G7H8J9", FencingToken: 7},
			{LeaseID: "lse_01JQ8ZM9K8L7M6N5P4Q3R2S1T0", FencingToken: 2},
		},
		Stage: "addressing_review",
		LastCompletedAction: &CompletedAction{
			Kind:    "git.commit",
			Summary: "Guard Widget.Render against a nil theme and add a regression test (TestRenderNilTheme).",
			At:      "2026-03-01T12:04:05Z",
		},
		PendingOperation: &PendingOperation{
			Kind:      "tests.run",
			Summary:   "go test ./... -race on the branch head before replying to the review",
			StartedAt: "2026-03-01T12:05:00.250+01:00",
		},
		PendingMutation: &PendingMutation{
			Kind: "gitea.pr.comment", Target: "acme/widgets!34", IdempotencyKey: "ckpt-34-review-2-reply",
			Summary: "Reply to review #2: nil theme now handled, test added, asked to re-review.",
		},
		Evidence: []Evidence{
			{Kind: "test_run", Ref: "https://ci.acme.example/acme/widgets/builds/881", Summary: "go test ./... passed: 412 tests, 0 failures"},
			{Kind: "git.commit", Ref: "9fceb02d0ae598e95dc970b74767f19372d61af8", Summary: "fix: guard Render against nil theme"},
			{Kind: "review", Ref: "https://git.acme.example/acme/widgets/pulls/34#issuecomment-2207", Summary: "Reviewer asked for a regression test and a changelog entry."},
		},
		Blocker: &Blocker{
			Kind:      "waiting_review",
			Summary:   "Changes requested on PR 34; the fix is pushed, waiting for the reviewer to look again.",
			WaitingOn: "reviewer",
		},
		NextAction: &NextAction{
			Actor:  "author",
			Action: "Post the reply to review #2 on PR 34 unless a comment with the idempotency key already exists, then request a re-review.",
			Prompt: "You are resuming work on acme/widgets#12 (PR 34). The nil-theme fix and its test are committed at 9fceb02. Check whether your reply to review #2 was posted (search PR 34 comments for ckpt-34-review-2-reply); if not, post it. Then request a re-review from the reviewer and wait.",
		},
		Recovery: &Recovery{
			Instructions: "Fetch the branch and make sure the worktree is at the recorded head before doing anything. If the head moved, someone else pushed: re-read the PR before continuing. The comment in pending_mutation may or may not have been posted; look for its idempotency key first.",
			Commands: []string{
				"git -C /srv/agents/w1/acme-widgets fetch origin",
				"git -C /srv/agents/w1/acme-widgets checkout fix-12-null-deref",
				"git -C /srv/agents/w1/acme-widgets reset --hard 9fceb02d0ae598e95dc970b74767f19372d61af8",
				"go test ./...",
			},
		},
		Note: "The flaky TestWatchReload failed once on CI run 879 and passed on retry; unrelated to this change, mentioned in the PR description.",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeDocument() mismatch (-want +got):\n%s", diff)
	}
	// The tree keeps numbers exact, for the digest.
	if diff := cmp.Diff(json.Number("3"), tree["fencing_token"]); diff != "" {
		t.Errorf("tree fencing_token (-want +got):\n%s", diff)
	}
	// Every field of the document is filled: the full document is the
	// reference for "every field of the document".
	if diff := cmp.Diff([]string(nil), Missing(got, map[string]int64{
		"lse_01JQ8ZM0A1B2C3D4E5F6G7H8J9": 7, "lse_01JQ8ZM9K8L7M6N5P4Q3R2S1T0": 2,
	})); diff != "" {
		t.Errorf("Missing(full) (-want +got):\n%s", diff)
	}
}

func TestDecodeDocumentMinimal(t *testing.T) {
	_, got, err := DecodeDocument(readTestdata(t, "checkpoint-minimal.json"), DefaultWorkflow())
	if err != nil {
		t.Fatal(err)
	}
	want := &Document{SchemaVersion: 1, RunID: "run_1", FencingToken: 1, Role: "reviewer"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("DecodeDocument() mismatch (-want +got):\n%s", diff)
	}
}

// TestDecodeDocumentUnknownField puts an unknown field at every object of
// the document; each must be rejected at its own path.
func TestDecodeDocumentUnknownField(t *testing.T) {
	tests := []struct {
		at   []any // path of the object to add the field to (string keys, int indexes)
		name string
		want string
	}{
		{nil, "bogus", "/bogus"},
		{[]any{"identity"}, "bogus", "/identity/bogus"},
		{[]any{"target"}, "bogus", "/target/bogus"},
		{[]any{"workspace"}, "hed", "/workspace/hed"},
		{[]any{"leases", 1}, "bogus", "/leases/1/bogus"},
		{[]any{"last_completed_action"}, "bogus", "/last_completed_action/bogus"},
		{[]any{"pending_operation"}, "bogus", "/pending_operation/bogus"},
		{[]any{"pending_mutation"}, "bogus", "/pending_mutation/bogus"},
		{[]any{"evidence", 2}, "bogus", "/evidence/2/bogus"},
		{[]any{"blocker"}, "bogus", "/blocker/bogus"},
		{[]any{"next_action"}, "bogus", "/next_action/bogus"},
		{[]any{"recovery"}, "bogus", "/recovery/bogus"},
		{nil, "a/b~c", "/a~1b~0c"}, // JSON pointer escaping
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			tree := fullTree(t)
			var cur any = tree
			for _, p := range tt.at {
				switch p := p.(type) {
				case string:
					cur = cur.(map[string]any)[p]
				case int:
					cur = cur.([]any)[p]
				}
			}
			cur.(map[string]any)[tt.name] = "x"
			_, doc, err := DecodeDocument(mustMarshal(t, tree), DefaultWorkflow())
			if doc != nil {
				t.Errorf("doc = %+v, want nil", doc)
			}
			want := []Problem{{Path: tt.want, Message: "unknown field"}}
			if diff := cmp.Diff(want, problemsOf(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

type invalidDocumentCase struct {
	name string
	edit func(m map[string]any)
	want []Problem
}

// invalidDocumentCases edit the full document into one that schema v1
// rejects, with the problems DecodeDocument must report.
func invalidDocumentCases() []invalidDocumentCase {
	const (
		hex39 = "9fceb02d0ae598e95dc970b74767f19372d61af"
		idMsg = "must be 1 to 64 characters of A-Z, a-z, 0-9, _ . : -"
		ctrl  = "must not contain control characters"
		when  = "must be an RFC 3339 date-time, e.g. 2026-03-01T12:00:00Z"
		head  = "must be a full commit id: 40 or 64 hexadecimal digits"
	)
	return []invalidDocumentCase{
		{"schema version 2", func(m map[string]any) { m["schema_version"] = 2 },
			[]Problem{{"/schema_version", "must be 1"}}},
		{"schema version missing", func(m map[string]any) { delete(m, "schema_version") },
			[]Problem{{"/schema_version", "required field is missing"}}},
		{"required fields missing", func(m map[string]any) { delete(m, "run_id"); delete(m, "role"); delete(m, "fencing_token") },
			[]Problem{{"/fencing_token", "required field is missing"}, {"/role", "required field is missing"}, {"/run_id", "required field is missing"}}},
		{"fencing token as string", func(m map[string]any) { m["fencing_token"] = "3" },
			[]Problem{{"/fencing_token", "must be of type integer, not string"}}},
		{"fencing token fractional", func(m map[string]any) { m["fencing_token"] = 1.5 },
			[]Problem{{"/fencing_token", "must be of type integer, not number"}}},
		{"fencing token zero", func(m map[string]any) { m["fencing_token"] = 0 },
			[]Problem{{"/fencing_token", "must be at least 1"}}},
		{"fencing token huge", func(m map[string]any) { m["fencing_token"] = json.Number("1e999999") },
			[]Problem{{"/fencing_token", "number is out of range"}}},
		{"fencing token too long", func(m map[string]any) { m["fencing_token"] = json.Number("1" + strings.Repeat("0", 70)) },
			[]Problem{{"/fencing_token", "number is out of range"}}},
		{"run id with space", func(m map[string]any) { m["run_id"] = "run 1" },
			[]Problem{{"/run_id", idMsg}}},
		{"role as number", func(m map[string]any) { m["role"] = 1 },
			[]Problem{{"/role", "must be of type string, not number"}}},
		{"role uppercase", func(m map[string]any) { m["role"] = "Author" },
			[]Problem{{"/role", "must be a lowercase letter followed by up to 63 of a-z, 0-9, _ . -"}}},
		{"identity as string", func(m map[string]any) { m["identity"] = "claude" },
			[]Problem{{"/identity", "must be of type object, not string"}}},
		{"identity runtime too long", func(m map[string]any) { obj(m, "identity")["runtime"] = strings.Repeat("x", 129) },
			[]Problem{{"/identity/runtime", "must be at most 128 characters long (is 129)"}}},
		{"target without repo", func(m map[string]any) { delete(obj(m, "target"), "repo") },
			[]Problem{{"/target/repo", "required field is missing"}}},
		{"bad repo", func(m map[string]any) { obj(m, "target")["repo"] = "acme" },
			[]Problem{{"/target/repo", "must be owner/name, each 1 to 100 characters of A-Z, a-z, 0-9, _ . -"}}},
		{"issue as string", func(m map[string]any) { obj(m, "target")["issue"] = "12" },
			[]Problem{{"/target/issue", "must be of type integer, not string"}}},
		{"issue zero", func(m map[string]any) { obj(m, "target")["issue"] = 0 },
			[]Problem{{"/target/issue", "must be at least 1"}}},
		{"pr above 2^53", func(m map[string]any) { obj(m, "target")["pr"] = json.Number("9007199254740993") },
			[]Problem{{"/target/pr", "must be at most 9007199254740992"}}},
		{"head 39 hex", func(m map[string]any) { obj(m, "workspace")["head"] = hex39 },
			[]Problem{{"/workspace/head", head}}},
		{"head 41 hex", func(m map[string]any) { obj(m, "workspace")["head"] = hex39 + "ab" },
			[]Problem{{"/workspace/head", head}}},
		{"head not hex", func(m map[string]any) { obj(m, "workspace")["head"] = hex39 + "g" },
			[]Problem{{"/workspace/head", head}}},
		{"head empty", func(m map[string]any) { obj(m, "workspace")["head"] = "" },
			[]Problem{{"/workspace/head", head}}},
		{"branch with newline", func(m map[string]any) { obj(m, "workspace")["branch"] = "fix\n12" },
			[]Problem{{"/workspace/branch", ctrl}}},
		{"branch empty", func(m map[string]any) { obj(m, "workspace")["branch"] = "" },
			[]Problem{{"/workspace/branch", "must be at least 1 characters long"}}},
		{"branch too long", func(m map[string]any) { obj(m, "workspace")["base"] = strings.Repeat("b", 256) },
			[]Problem{{"/workspace/base", "must be at most 255 characters long (is 256)"}}},
		{"capabilities as string", func(m map[string]any) { m["capabilities"] = "git.push" },
			[]Problem{{"/capabilities", "must be of type array, not string"}}},
		{"too many capabilities", func(m map[string]any) { m["capabilities"] = slices.Repeat([]any{"git.push"}, 65) },
			[]Problem{{"/capabilities", "must have at most 64 items (has 65)"}}},
		{"capability too long", func(m map[string]any) { m["capabilities"] = []any{"ok", strings.Repeat("c", 129)} },
			[]Problem{{"/capabilities/1", "must be at most 128 characters long (is 129)"}}},
		{"leases as object", func(m map[string]any) { m["leases"] = map[string]any{"lease_id": "l1"} },
			[]Problem{{"/leases", "must be of type array, not object"}}},
		{"lease without token", func(m map[string]any) { delete(m["leases"].([]any)[0].(map[string]any), "fencing_token") },
			[]Problem{{"/leases/0/fencing_token", "required field is missing"}}},
		{"too many leases", func(m map[string]any) {
			m["leases"] = slices.Repeat([]any{map[string]any{"lease_id": "l", "fencing_token": 1}}, 33)
		}, []Problem{{"/leases", "must have at most 32 items (has 33)"}}},
		{"bad kind", func(m map[string]any) { obj(m, "pending_mutation")["kind"] = "Gitea PR comment" },
			[]Problem{{"/pending_mutation/kind", "must be a lowercase letter followed by up to 63 of a-z, 0-9, _ . -"}}},
		{"kind missing", func(m map[string]any) { delete(m["evidence"].([]any)[1].(map[string]any), "kind") },
			[]Problem{{"/evidence/1/kind", "required field is missing"}}},
		{"timestamp not a date", func(m map[string]any) { obj(m, "last_completed_action")["at"] = "yesterday" },
			[]Problem{{"/last_completed_action/at", when}}},
		{"timestamp without zone", func(m map[string]any) { obj(m, "pending_operation")["started_at"] = "2026-03-01T12:05:00" },
			[]Problem{{"/pending_operation/started_at", when}}},
		{"timestamp impossible date", func(m map[string]any) { obj(m, "last_completed_action")["at"] = "2026-02-30T12:00:00Z" },
			[]Problem{{"/last_completed_action/at", when}}},
		{"summary too long", func(m map[string]any) { obj(m, "blocker")["summary"] = strings.Repeat("s", 4097) },
			[]Problem{{"/blocker/summary", "must be at most 4096 characters long (is 4097)"}}},
		{"note too long", func(m map[string]any) { m["note"] = strings.Repeat("n", 65537) },
			[]Problem{{"/note", "must be at most 65536 characters long (is 65537)"}}},
		{"note null", func(m map[string]any) { m["note"] = nil },
			[]Problem{{"/note", "must be of type string, not null"}}},
		{"too many evidence items", func(m map[string]any) {
			m["evidence"] = slices.Repeat([]any{map[string]any{"kind": "test_run"}}, 101)
		}, []Problem{{"/evidence", "must have at most 100 items (has 101)"}}},
		{"command too long", func(m map[string]any) { obj(m, "recovery")["commands"] = []any{strings.Repeat("c", 4097)} },
			[]Problem{{"/recovery/commands/0", "must be at most 4096 characters long (is 4097)"}}},
		{"too many commands", func(m map[string]any) { obj(m, "recovery")["commands"] = slices.Repeat([]any{"ls"}, 101) },
			[]Problem{{"/recovery/commands", "must have at most 100 items (has 101)"}}},
		{"several problems sorted", func(m map[string]any) {
			obj(m, "workspace")["head"] = "x"
			m["zzz"] = 1
			m["evidence"].([]any)[10%3].(map[string]any)["kind"] = 1
			m["run_id"] = ""
		}, []Problem{
			{"/evidence/1/kind", "must be of type string, not number"},
			{"/run_id", idMsg},
			{"/workspace/head", head},
			{"/zzz", "unknown field"},
		}},
	}
}

func TestDecodeDocumentInvalid(t *testing.T) {
	for _, tt := range invalidDocumentCases() {
		t.Run(tt.name, func(t *testing.T) {
			tree := fullTree(t)
			tt.edit(tree)
			gotTree, doc, err := DecodeDocument(mustMarshal(t, tree), DefaultWorkflow())
			if gotTree != nil || doc != nil {
				t.Errorf("DecodeDocument() = %v, %v, want nil results on error", gotTree, doc)
			}
			if diff := cmp.Diff(tt.want, problemsOf(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeDocumentAccepted(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(m map[string]any)
		check func(d *Document) any // what to compare
		want  any
	}{
		{"64-hex head", func(m map[string]any) { obj(m, "workspace")["head"] = strings.Repeat("aB3", 21) + "f" },
			func(d *Document) any { return d.Workspace.Head }, strings.Repeat("aB3", 21) + "f"},
		{"integer written as 3.0", func(m map[string]any) { m["fencing_token"] = json.Number("3.0") },
			func(d *Document) any { return d.FencingToken }, int64(3)},
		{"integer written as 7e0", func(m map[string]any) { m["leases"].([]any)[0].(map[string]any)["fencing_token"] = json.Number("7e0") },
			func(d *Document) any { return d.Leases[0].FencingToken }, int64(7)},
		{"issue 2^53", func(m map[string]any) { obj(m, "target")["issue"] = json.Number("9007199254740992") },
			func(d *Document) any { return d.Target.Issue }, int64(9007199254740992)},
		{"timestamp with offset and fraction", func(m map[string]any) { obj(m, "last_completed_action")["at"] = "2026-03-01T12:04:05.123456789-07:00" },
			func(d *Document) any { return d.LastCompletedAction.At }, "2026-03-01T12:04:05.123456789-07:00"},
		{"multi-line text", func(m map[string]any) { obj(m, "recovery")["instructions"] = "one\ntwo\tthree" },
			func(d *Document) any { return d.Recovery.Instructions }, "one\ntwo\tthree"},
		{"empty optional text", func(m map[string]any) { obj(m, "identity")["runtime"] = "" },
			func(d *Document) any { return d.Identity.Runtime }, ""},
		{"non-ASCII within limits", func(m map[string]any) { obj(m, "workspace")["branch"] = strings.Repeat("é", 255) },
			func(d *Document) any { return d.Workspace.Branch }, strings.Repeat("é", 255)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := fullTree(t)
			tt.edit(tree)
			_, doc, err := DecodeDocument(mustMarshal(t, tree), DefaultWorkflow())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, tt.check(doc)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeDocumentWorkflow(t *testing.T) {
	custom := Workflow{Roles: []string{"author", "deployer"}, Stages: []string{"planned", "deploying"}}
	tests := []struct {
		name string
		wf   Workflow
		edit func(m map[string]any)
		want []Problem // nil: accepted
	}{
		{"unconfigured stage", DefaultWorkflow(), func(m map[string]any) { m["stage"] = "deploying" },
			[]Problem{{"/stage", `stage "deploying" is not configured; configured stages: planned, implementing, testing, review_requested, reviewing, addressing_review, merging, blocked, done`}}},
		{"unconfigured role", DefaultWorkflow(), func(m map[string]any) { m["role"] = "deployer" },
			[]Problem{{"/role", `role "deployer" is not configured; configured roles: author, reviewer, operator`}}},
		{"both, with a schema problem", custom, func(m map[string]any) { m["bogus"] = true },
			[]Problem{
				{"/bogus", "unknown field"},
				{"/stage", `stage "addressing_review" is not configured; configured stages: planned, deploying`},
			}},
		{"malformed role is reported once", DefaultWorkflow(), func(m map[string]any) { m["role"] = "Deployer" },
			[]Problem{{"/role", "must be a lowercase letter followed by up to 63 of a-z, 0-9, _ . -"}}},
		{"custom workflow accepts its names", custom, func(m map[string]any) { m["role"] = "deployer"; m["stage"] = "deploying" }, nil},
		{"no stage is not a workflow problem", DefaultWorkflow(), func(m map[string]any) { delete(m, "stage") }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tree := fullTree(t)
			tt.edit(tree)
			_, _, err := DecodeDocument(mustMarshal(t, tree), tt.wf)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("err = %v, want nil", err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, problemsOf(t, err)); diff != "" {
				t.Errorf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDecodeDocumentMalformed(t *testing.T) {
	full := readTestdata(t, "checkpoint-full.json")
	tests := []struct {
		name string
		raw  []byte
		want error
	}{
		{"empty", nil, ErrInvalidJSON},
		{"white space", []byte(" \n"), ErrInvalidJSON},
		{"not JSON", []byte("checkpoint please"), ErrInvalidJSON},
		{"truncated", full[:len(full)/2], ErrInvalidJSON},
		{"trailing garbage", append(slices.Clone(full), "x"...), ErrInvalidJSON},
		{"two values", append(slices.Clone(full), full...), ErrInvalidJSON},
		{"trailing brace", append(slices.Clone(full), '}'), ErrInvalidJSON},
		{"invalid UTF-8", []byte(`{"schema_version":1,"note":"` + "\xff" + `"}`), ErrInvalidJSON},
		{"trailing white space is fine", append(slices.Clone(full), " \r\n\t"...), nil},
		{"array", []byte(`[]`), ErrInvalidCheckpoint},
		{"string", []byte(`"x"`), ErrInvalidCheckpoint},
		{"null", []byte(`null`), ErrInvalidCheckpoint},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := DecodeDocument(tt.raw, DefaultWorkflow())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
			if errors.Is(err, ErrInvalidJSON) && errors.Is(err, ErrInvalidCheckpoint) {
				t.Errorf("err = %v matches both sentinels", err)
			}
		})
	}
	_, _, err := DecodeDocument([]byte(`[1]`), DefaultWorkflow())
	if diff := cmp.Diff([]Problem{{Path: "", Message: "must be a JSON object"}}, problemsOf(t, err)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}

// TestDecodeDocumentProblemCap checks that a document with many problems
// reports a bounded, stable list.
func TestDecodeDocumentProblemCap(t *testing.T) {
	tree := fullTree(t)
	for _, k := range strings.Fields("a b c d e f g h i j k l m n o p q r s t u v w x y z") {
		tree["x_"+k] = 1
	}
	raw := mustMarshal(t, tree)
	_, _, err := DecodeDocument(raw, DefaultWorkflow())
	first := problemsOf(t, err)
	if len(first) != 20 {
		t.Fatalf("got %d problems, want 20", len(first))
	}
	if diff := cmp.Diff(Problem{Path: "", Message: "7 more problems not shown"}, first[19]); diff != "" {
		t.Errorf("last problem (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Problem{Path: "/x_a", Message: "unknown field"}, first[0]); diff != "" {
		t.Errorf("first problem (-want +got):\n%s", diff)
	}
	for range 20 {
		_, _, err := DecodeDocument(raw, DefaultWorkflow())
		if diff := cmp.Diff(first, problemsOf(t, err)); diff != "" {
			t.Fatalf("problems not deterministic (-first +now):\n%s", diff)
		}
	}
}

// TestDecodeDocumentDoesNotEchoValues guards the rule that rejections never
// repeat a value that may be a secret.
func TestDecodeDocumentDoesNotEchoValues(t *testing.T) {
	const secret = "ghp_0123456789abcdefABCDEF0123456789abcd"
	tree := fullTree(t)
	tree["run_id"] = secret + " "
	obj(tree, "workspace")["head"] = secret
	obj(tree, "workspace")["branch"] = secret + "\n"
	obj(tree, "last_completed_action")["at"] = secret
	tree["schema_version"] = secret
	_, _, err := DecodeDocument(mustMarshal(t, tree), DefaultWorkflow())
	if got := len(problemsOf(t, err)); got != 5 {
		t.Errorf("got %d problems, want 5: %v", got, err)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("error repeats the value: %v", err)
	}
}

// TestSchemaMirrorsDocument keeps docs/schema/checkpoint.v1.json and the
// Document types in step: the same properties, the same required fields
// (a field without omitempty is required), compatible types.
func TestSchemaMirrorsDocument(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(CheckpointSchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	defs := schema["$defs"].(map[string]any)
	resolve := func(s map[string]any) map[string]any {
		if ref, ok := s["$ref"].(string); ok {
			def := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
			merged := map[string]any{}
			for k, v := range def {
				merged[k] = v
			}
			for k, v := range s {
				merged[k] = v
			}
			return merged
		}
		return s
	}
	var check func(path string, s map[string]any, typ reflect.Type)
	check = func(path string, s map[string]any, typ reflect.Type) {
		s = resolve(s)
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		wantType := map[reflect.Kind]string{
			reflect.String: "string", reflect.Int: "integer", reflect.Int64: "integer",
			reflect.Slice: "array", reflect.Struct: "object",
		}[typ.Kind()]
		if got, ok := s["type"]; ok && got != wantType {
			t.Errorf("%s: schema type %v, Go type %v", path, got, typ)
		}
		if _, ok := s["const"]; ok && wantType != "integer" {
			t.Errorf("%s: const on a non-integer field", path)
		}
		switch typ.Kind() {
		case reflect.Slice:
			check(path+"/*", s["items"].(map[string]any), typ.Elem())
		case reflect.Struct:
			if s["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties is not false", path)
			}
			props, _ := s["properties"].(map[string]any)
			var required []string
			for _, r := range asSlice(s["required"]) {
				required = append(required, r.(string))
			}
			var goRequired []string
			seen := map[string]bool{}
			for i := range typ.NumField() {
				f := typ.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				seen[name] = true
				if !strings.Contains(opts, "omitempty") {
					goRequired = append(goRequired, name)
				}
				ps, ok := props[name].(map[string]any)
				if !ok {
					t.Errorf("%s: Go field %s (%q) has no schema property", path, f.Name, name)
					continue
				}
				if ps["description"] == nil {
					t.Errorf("%s/%s: no description", path, name)
				}
				check(path+"/"+name, ps, f.Type)
			}
			for name := range props {
				if !seen[name] {
					t.Errorf("%s: schema property %q has no Go field", path, name)
				}
			}
			slices.Sort(required)
			slices.Sort(goRequired)
			if diff := cmp.Diff(goRequired, required); diff != "" {
				t.Errorf("%s: required (-go +schema):\n%s", path, diff)
			}
		}
	}
	check("", schema, reflect.TypeFor[Document]())
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// TestSchemaPatterns checks that every pattern in the schema has a message
// in words, and that the name pattern is the one workflows are checked with.
func TestSchemaPatterns(t *testing.T) {
	var schema any
	if err := json.Unmarshal(CheckpointSchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if p, ok := v["pattern"].(string); ok {
				if _, ok := patternMessages[p]; !ok {
					t.Errorf("pattern %s has no entry in patternMessages", p)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(schema)
	name := schema.(map[string]any)["$defs"].(map[string]any)["name"].(map[string]any)["pattern"]
	if diff := cmp.Diff(workflowNamePattern.String(), name); diff != "" {
		t.Errorf("name pattern (-workflow +schema):\n%s", diff)
	}
	if !bytes.Contains(CheckpointSchemaJSON, []byte(`"$id": "`+checkpointSchemaURL+`"`)) {
		t.Errorf("schema $id is not %s", checkpointSchemaURL)
	}
}

// TestSchemaInlining checks that the validator's copy of the schema, with
// its $refs inlined, judges documents exactly as the published one does.
func TestSchemaInlining(t *testing.T) {
	var schema map[string]any
	if err := json.Unmarshal(CheckpointSchemaJSON, &schema); err != nil {
		t.Fatal(err)
	}
	defs := schema["$defs"].(map[string]any)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				def, ok := defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
				if !ok || !strings.HasPrefix(ref, "#/$defs/") {
					t.Errorf("%s: $ref %q is not a local definition", path, ref)
				}
				for k := range v {
					if _, clash := def[k]; clash && k != "description" {
						t.Errorf("%s: keyword %q both beside $ref and in %s", path, k, ref)
					}
				}
			}
			for k, e := range v {
				walk(path+"/"+k, e)
			}
		case []any:
			for _, e := range v {
				walk(path+"/*", e)
			}
		}
	}
	walk("", schema)
	for name, def := range defs {
		if bytes.Contains(mustMarshal(t, def), []byte(`"$ref"`)) {
			t.Errorf("$defs/%s holds a $ref", name)
		}
	}

	published, err := compileSchema(checkpointSchemaURL, CheckpointSchemaJSON, false)
	if err != nil {
		t.Fatal(err)
	}
	judge := func(sch interface{ Validate(any) error }, tree any) []Problem {
		p := schemaProblems(sch.Validate(tree))
		if p == nil {
			return nil
		}
		return checkpointProblems(p).Problems
	}
	docs := []map[string]any{fullTree(t)}
	for _, c := range invalidDocumentCases() {
		tree := fullTree(t)
		c.edit(tree)
		docs = append(docs, tree)
	}
	for i, d := range docs {
		tree, err := decodeJSONValue(mustMarshal(t, d))
		if err != nil {
			t.Fatal(err)
		}
		if outOfRangeNumbers(tree, nil, nil) != nil {
			continue // never reaches the validator
		}
		if diff := cmp.Diff(judge(published, tree), judge(checkpointSchema, tree)); diff != "" {
			t.Errorf("document %d (-published +inlined):\n%s", i, diff)
		}
	}
}

func FuzzDecodeDocument(f *testing.F) {
	for _, name := range []string{"checkpoint-full.json", "checkpoint-minimal.json"} {
		f.Add(readTestdata(f, name))
	}
	f.Add([]byte(`{"schema_version":1.0,"run_id":"r","fencing_token":1e0,"role":"author","target":{"repo":"a/b","pr":2E1}}`))
	f.Add([]byte(`{"schema_version":1,"run_id":"r","fencing_token":1,"role":"author","note":"\u0000\u2028<&>\ud83d\ude00"}`))
	f.Add([]byte(`{"schema_version":1,"run_id":"r","fencing_token":1,"role":"author","leases":[{"lease_id":"l","fencing_token":1e999999}]}`))
	f.Add([]byte(`[1, {"a": -0.0e-5}] trailing`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		tree, doc, err := DecodeDocument(raw, DefaultWorkflow())
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) && !errors.Is(err, ErrInvalidCheckpoint) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			if tree != nil || doc != nil {
				t.Fatalf("results with an error: %v", err)
			}
			return
		}
		canon, err := CanonicalJSON(tree)
		if err != nil {
			t.Fatalf("CanonicalJSON of a valid document: %v", err)
		}
		tree2, doc2, err := DecodeDocument(canon, DefaultWorkflow())
		if err != nil {
			t.Fatalf("re-decoding canonical bytes %s: %v", canon, err)
		}
		canon2, err := CanonicalJSON(tree2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(canon, canon2) {
			t.Fatalf("canonical form not stable:\n%s\n%s", canon, canon2)
		}
		if diff := cmp.Diff(doc, doc2); diff != "" {
			t.Fatalf("document changed through canonical form (-first +second):\n%s", diff)
		}
	})
}

func BenchmarkDecodeDocument(b *testing.B) {
	raw := readTestdata(b, "checkpoint-full.json")
	wf := DefaultWorkflow()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := DecodeDocument(raw, wf); err != nil {
			b.Fatal(err)
		}
	}
}

func TestComparePointers(t *testing.T) {
	ordered := []string{"", "/a", "/a/0", "/a/2", "/a/10", "/a/10/b", "/a/b", "/k10", "/k2", "/z"}
	for i, a := range ordered {
		for j, b := range ordered {
			got := comparePointers(a, b)
			if (got < 0) != (i < j) || (got == 0) != (i == j) {
				t.Errorf("comparePointers(%q, %q) = %d", a, b, got)
			}
		}
	}
}
