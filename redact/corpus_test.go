package redact

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// corpusSecret is one line of testdata/redaction/secrets.txt: a fake secret
// and the text it is planted in.
type corpusSecret struct {
	line   int
	kind   string
	secret string
	text   string
}

// corpusLines reads a corpus file: one entry per line, '#' comments, with
// \n, \t and \\ escapes so multi-line contexts fit on one line.
func corpusLines(tb testing.TB, name string) (lines []string, numbers []int) {
	tb.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		lines = append(lines, unescapeCorpus(l))
		numbers = append(numbers, n)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return lines, numbers
}

func unescapeCorpus(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
				i++
				continue
			case 't':
				b.WriteByte('\t')
				i++
				continue
			case '\\':
				b.WriteByte('\\')
				i++
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func loadSecrets(tb testing.TB) []corpusSecret {
	tb.Helper()
	lines, numbers := corpusLines(tb, "secrets.txt")
	var out []corpusSecret
	for i, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) != 3 || !strings.Contains(f[2], "{}") {
			tb.Fatalf("secrets.txt:%d: want kind<TAB>secret<TAB>context with {}", numbers[i])
		}
		out = append(out, corpusSecret{line: numbers[i], kind: f[0], secret: f[1], text: strings.Replace(f[2], "{}", f[1], 1)})
	}
	return out
}

// documentedKinds are the kinds docs/redaction.md promises; the corpus must
// exercise every one of them.
var documentedKinds = []string{
	kindAuthorization, kindBearer, kindCookie, kindURLUserinfo, kindQuerySecret,
	kindSecretField, kindPEM, kindJWT, kindGitHub, kindGitLab, kindOpenAI,
	kindAnthropic, kindSlack, kindAWSKeyID, kindAWSSecret, kindGitea, kindCheckpointd,
	kindNPM, kindHuggingFace, kindGoogleAPIKey, kindStripe, kindSendGrid, kindTwilio,
	kindDigitalOcean, kindSlackWebhook, kindAzure, kindRegistryAuth,
}

// shapeKinds are recognisable by shape alone, so they keep their kind even
// under a secret-named key.
var shapeKinds = map[string]bool{
	kindPEM: true, kindJWT: true, kindGitHub: true, kindGitLab: true, kindOpenAI: true,
	kindAnthropic: true, kindSlack: true, kindAWSKeyID: true, kindCheckpointd: true,
	kindNPM: true, kindHuggingFace: true, kindGoogleAPIKey: true, kindStripe: true,
	kindSendGrid: true, kindTwilio: true, kindDigitalOcean: true,
}

func TestRedactCorpusSizes(t *testing.T) {
	secrets := loadSecrets(t)
	looks, _ := corpusLines(t, "lookalikes.txt")
	if len(secrets) < 60 || len(looks) < 40 {
		t.Fatalf("corpus too small: %d secrets (want >= 60), %d look-alikes (want >= 40)", len(secrets), len(looks))
	}
	seen := map[string]int{}
	for _, c := range secrets {
		seen[c.kind]++
	}
	for _, k := range documentedKinds {
		if seen[k] == 0 {
			t.Errorf("no corpus secret of kind %s", k)
		}
		delete(seen, k)
	}
	for k := range seen {
		t.Errorf("corpus kind %s is not documented", k)
	}
}

func TestRedactCorpusSecrets(t *testing.T) {
	for _, c := range loadSecrets(t) {
		got, n, err := String(c.text)
		if err != nil {
			t.Errorf("secrets.txt:%d: %v", c.line, err)
			continue
		}
		if strings.Contains(got, c.secret) {
			t.Errorf("secrets.txt:%d: secret survived:\n%s", c.line, got)
		}
		if want := "[REDACTED:" + c.kind + "]"; !strings.Contains(got, want) || n != 1 {
			t.Errorf("secrets.txt:%d: got %d redactions, want 1 %s:\n%s", c.line, n, want, got)
		}
		if again, n2, _ := String(got); again != got || n2 != 0 {
			t.Errorf("secrets.txt:%d: second pass changed %d:\n%s\n%s", c.line, n2, got, again)
		}
	}
}

// corpusTree is a realistic checkpoint tree with text at every free-text
// position a secret could be pasted into.
func corpusTree() map[string]any {
	return map[string]any{
		"schema_version": json.Number("1"),
		"run_id":         "run_01JQ8ZK4T6W2B9N3C5D7F1G0HX",
		"fencing_token":  json.Number("3"),
		"role":           "author",
		"target":         map[string]any{"repo": "acme/widgets", "issue": json.Number("12"), "pr": json.Number("34")},
		"workspace": map[string]any{
			"worktree": "/srv/agents/w1/acme-widgets", "branch": "fix-12-null-deref",
			"head": "9fceb02d0ae598e95dc970b74767f19372d61af8", "base": "main",
		},
		"leases":           []any{map[string]any{"lease_id": "lse_01JQ8ZM0A1B2C3D4E5F6G7H8J9", "fencing_token": json.Number("7")}},
		"stage":            "implementing",
		"pending_mutation": map[string]any{"kind": "gitea.pr.comment", "target": "acme/widgets!34", "idempotency_key": "ckpt-34-review-2-reply", "summary": "reply to review #2"},
		"evidence": []any{
			map[string]any{"kind": "git.commit", "ref": "9fceb02d0ae598e95dc970b74767f19372d61af8", "summary": "fix: guard Render against nil theme"},
			map[string]any{"kind": "test_run", "ref": "https://ci.acme.example/acme/widgets/builds/881", "summary": "go test ./... passed"},
		},
		"blocker":     map[string]any{"kind": "waiting_review", "summary": "waiting for review", "waiting_on": "reviewer"},
		"next_action": map[string]any{"actor": "author", "action": "reply to review #2", "prompt": "resume acme/widgets#12"},
		"recovery":    map[string]any{"instructions": "fetch and reset to head", "commands": []any{"git fetch origin", "go test ./..."}},
		"note":        "nothing to add",
	}
}

// treePositions set a string at one position of a corpusTree and read it back.
var treePositions = []struct {
	name string
	set  func(tree map[string]any, s string)
	get  func(tree map[string]any) string
}{
	{"note", func(m map[string]any, s string) { m["note"] = s }, func(m map[string]any) string { return m["note"].(string) }},
	{"evidence[1].summary",
		func(m map[string]any, s string) { m["evidence"].([]any)[1].(map[string]any)["summary"] = s },
		func(m map[string]any) string { return m["evidence"].([]any)[1].(map[string]any)["summary"].(string) }},
	{"recovery.commands[1]",
		func(m map[string]any, s string) { m["recovery"].(map[string]any)["commands"].([]any)[1] = s },
		func(m map[string]any) string { return m["recovery"].(map[string]any)["commands"].([]any)[1].(string) }},
	{"pending_mutation.summary",
		func(m map[string]any, s string) { m["pending_mutation"].(map[string]any)["summary"] = s },
		func(m map[string]any) string { return m["pending_mutation"].(map[string]any)["summary"].(string) }},
	{"next_action.prompt",
		func(m map[string]any, s string) { m["next_action"].(map[string]any)["prompt"] = s },
		func(m map[string]any) string { return m["next_action"].(map[string]any)["prompt"].(string) }},
	{"blocker.summary",
		func(m map[string]any, s string) { m["blocker"].(map[string]any)["summary"] = s },
		func(m map[string]any) string { return m["blocker"].(map[string]any)["summary"].(string) }},
}

func TestRedactCorpusSecretsInTree(t *testing.T) {
	for _, c := range loadSecrets(t) {
		for _, pos := range treePositions {
			tree := corpusTree()
			pos.set(tree, c.text)
			out, n, err := Tree(tree)
			if err != nil {
				t.Errorf("secrets.txt:%d at %s: %v", c.line, pos.name, err)
				continue
			}
			body, _ := json.Marshal(out)
			if strings.Contains(string(body), c.secret) || strings.Contains(string(body), jsonEscaped(c.secret)) {
				t.Errorf("secrets.txt:%d at %s: secret survived", c.line, pos.name)
			}
			got := pos.get(out.(map[string]any))
			if want := "[REDACTED:" + c.kind + "]"; n != 1 || !strings.Contains(got, want) {
				t.Errorf("secrets.txt:%d at %s: got %d redactions, want 1 %s:\n%s", c.line, pos.name, n, want, got)
			}
			if pos.get(tree) != c.text {
				t.Errorf("secrets.txt:%d at %s: input tree was modified", c.line, pos.name)
			}
		}
	}
}

// TestRedactCorpusUnderSecretKeys plants each bare secret as a value under
// secret-named keys at several depths: the whole value goes.
func TestRedactCorpusUnderSecretKeys(t *testing.T) {
	for _, c := range loadSecrets(t) {
		want := kindSecretField
		if shapeKinds[c.kind] {
			want = c.kind
		}
		tree := map[string]any{
			"password": c.secret,
			"config": map[string]any{
				"db":          map[string]any{"Password": c.secret, "host": "db.internal"},
				"credentials": []any{map[string]any{"value": c.secret}},
				"apiKey":      c.secret,
			},
		}
		out, n, err := Tree(tree)
		if err != nil {
			t.Fatalf("secrets.txt:%d: %v", c.line, err)
		}
		body, _ := json.Marshal(out)
		if strings.Contains(string(body), c.secret) || strings.Contains(string(body), jsonEscaped(c.secret)) {
			t.Errorf("secrets.txt:%d: secret survived: %s", c.line, body)
		}
		if got := strings.Count(string(body), "[REDACTED:"+want+"]"); n != 4 || got != 4 {
			t.Errorf("secrets.txt:%d: %d redactions, %d of kind %s, want 4: %s", c.line, n, got, want, body)
		}
		if !strings.Contains(string(body), `"host":"db.internal"`) {
			t.Errorf("secrets.txt:%d: a non-secret sibling was redacted: %s", c.line, body)
		}
	}
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

func TestRedactCorpusLookalikes(t *testing.T) {
	lines, numbers := corpusLines(t, "lookalikes.txt")
	for i, l := range lines {
		got, n, err := String(l)
		if err != nil || got != l || n != 0 {
			t.Errorf("lookalikes.txt:%d: changed (%d, %v):\n%s\n%s", numbers[i], n, err, l, got)
		}
		for _, pos := range treePositions {
			tree := corpusTree()
			pos.set(tree, l)
			out, n, err := Tree(tree)
			if err != nil || n != 0 || pos.get(out.(map[string]any)) != l {
				t.Errorf("lookalikes.txt:%d at %s: changed (%d, %v)", numbers[i], pos.name, n, err)
			}
		}
	}
}

// TestRedactCorpusSHAPositions puts commit SHAs where the schema keeps them:
// a redacted head breaks reconcile.
func TestRedactCorpusSHAPositions(t *testing.T) {
	for _, sha := range []string{
		"9fceb02d0ae598e95dc970b74767f19372d61af8",
		"0123456789abcdef0123456789abcdef01234567", // the shape of a Gitea token
		"9FCEB02D0AE598E95DC970B74767F19372D61AF8",
		"b1946ac92492d2347c6235b4d2611184b1946ac92492d2347c6235b4d2611184",
	} {
		tree := corpusTree()
		ws := tree["workspace"].(map[string]any)
		ws["head"], ws["base"] = sha, sha
		tree["evidence"].([]any)[0].(map[string]any)["ref"] = sha
		tree["pending_mutation"].(map[string]any)["idempotency_key"] = sha
		tree["recovery"].(map[string]any)["commands"].([]any)[0] = "git checkout " + sha
		out, n, err := Tree(tree)
		if err != nil || n != 0 {
			t.Fatalf("%s: %d redactions, %v", sha, n, err)
		}
		o := out.(map[string]any)
		if got := o["workspace"].(map[string]any)["head"]; got != sha {
			t.Errorf("workspace.head = %v, want %s", got, sha)
		}
		if got := o["evidence"].([]any)[0].(map[string]any)["ref"]; got != sha {
			t.Errorf("evidence[0].ref = %v, want %s", got, sha)
		}
	}
}

// TestRedactCorpusGiteaPayloads uses real Gitea 1.25 webhook bodies (copied
// from webhook/testdata): full of commit SHAs, URLs and e-mail addresses,
// and without a secret. Pasted into a note or redacted as a tree, they must
// survive byte for byte.
func TestRedactCorpusGiteaPayloads(t *testing.T) {
	for _, name := range []string{"gitea-push-force-body.json", "gitea-pull_request-opened-body.json"} {
		raw, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if got, n, err := String(string(raw)); err != nil || n != 0 || got != string(raw) {
			t.Errorf("%s as text: %d redactions, %v", name, n, err)
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.UseNumber()
		var tree any
		if err := dec.Decode(&tree); err != nil {
			t.Fatal(err)
		}
		out, n, err := Tree(tree)
		if err != nil || n != 0 {
			t.Errorf("%s as a tree: %d redactions, %v", name, n, err)
		}
		if diff := cmp.Diff(tree, out); diff != "" {
			t.Errorf("%s as a tree: changed (-in +out):\n%s", name, diff)
		}
	}
}

// TestRedactGiteaAccessTokenJSON: Gitea answers POST /users/{name}/tokens
// with the new token under "sha1"; there, and only there, it is a token.
func TestRedactGiteaAccessTokenJSON(t *testing.T) {
	const tok = "3f1c9d2e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e"
	in := `created: {"id":7,"name":"ci","sha1":"` + tok + `","token_last_eight":"6b5a4f3e","scopes":["write:repository"]}`
	want := `created: {"id":7,"name":"ci","sha1":"[REDACTED:gitea_token]","token_last_eight":"6b5a4f3e","scopes":["write:repository"]}`
	if got, n, _ := String(in); got != want || n != 1 {
		t.Errorf("String = %q, %d; want %q, 1", got, n, want)
	}
	commit := `{"sha1": "` + tok + `", "message": "fix"}`
	if got, n, _ := String(commit); got != commit || n != 0 {
		t.Errorf("a commit's sha1 was redacted: %q", got)
	}
}
