package checkpointd

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFastSchemaCompiles: the published schema compiles for the fast path;
// if a schema change brings a keyword it does not model, every document
// would silently take the slow path.
func TestFastSchemaCompiles(t *testing.T) {
	if _, err := compileFast(CheckpointSchemaJSON); err != nil || fastSchema == nil {
		t.Fatalf("the fast path is off: %v", err)
	}
	for _, bad := range []string{
		`{"type":"object","oneOf":[]}`,
		`{"type":"number"}`,
		`{"type":"object","additionalProperties":true}`,
		`{"type":"string","format":"email"}`,
		`{"const":"x"}`,
		`{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`,
	} {
		if _, err := compileFast([]byte(bad)); err == nil {
			t.Errorf("compileFast(%s) succeeded, want a refusal", bad)
		}
	}
}

// verdict is what DecodeDocument answered.
type verdict struct {
	Tree map[string]any
	Doc  *Document
	Err  string
}

func decodeVerdict(raw []byte, fast *fastNode) verdict {
	tree, _, doc, err := decodeDocumentWith(raw, DefaultWorkflow(), fast)
	v := verdict{Tree: tree, Doc: doc}
	if err != nil {
		v.Err = err.Error()
		if verr, ok := err.(*ValidationError); ok {
			b, _ := json.Marshal(verr.Problems)
			v.Err = string(b)
		}
	}
	return v
}

// checkDifferential fails when the fast path changes DecodeDocument's answer
// for raw, or when it accepts a tree the engine rejects. It reports whether
// the fast path accepted the document.
func checkDifferential(t testing.TB, raw []byte) bool {
	t.Helper()
	accepted, _ := differential(t, raw)
	return accepted
}

// differential is checkDifferential that also says whether DecodeDocument
// accepts raw.
func differential(t testing.TB, raw []byte) (fastAccepted, valid bool) {
	t.Helper()
	engine, fast := decodeVerdict(raw, nil), decodeVerdict(raw, fastSchema)
	if diff := cmp.Diff(engine, fast); diff != "" {
		t.Fatalf("the fast path changes the answer for %.300s (-engine +fast):\n%s", raw, diff)
	}
	v, err := decodeJSONValue(raw)
	tree, ok := v.(map[string]any)
	if err != nil || !ok {
		return false, false
	}
	accepted := fastSchema.acceptsDocument(tree)
	if accepted && len(schemaProblems(checkpointSchema.Validate(tree))) > 0 {
		t.Fatalf("the fast path accepts a document the engine rejects: %.300s", raw)
	}
	// What the fast path takes, documentFromTree builds (the verdicts above
	// compared what it built with encoding/json's decode).
	if _, ok := documentFromTree(tree); accepted && !ok {
		t.Fatalf("documentFromTree refuses a document the fast path takes: %.300s", raw)
	}
	return accepted, engine.Err == ""
}

// corpus is every JSON document in the repository's testdata, as a seed.
func corpus(t testing.TB) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && filepath.Ext(path) == ".json" && slices.Contains(strings.Split(filepath.ToSlash(path), "/"), "testdata") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			out[path] = b
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// redactionStrings are the secrets and look-alikes of the redaction corpus.
func redactionStrings(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, name := range []string{"redact/testdata/secrets.txt", "redact/testdata/lookalikes.txt"} {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if l := sc.Text(); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
		f.Close()
	}
	return out
}

// mutationValues replace a value of the document in the generated
// mutations: each type, the edges of every limit, numbers the fast path
// hands to the engine, and date-times on both sides of the format.
func mutationValues(t testing.TB) []any {
	t.Helper()
	vals := []any{
		nil, true, false, map[string]any{}, []any{}, []any{"x"}, []any{json.Number("1")},
		"", "x", "a/b", "Author", "author", "run_1", "run 1", "fix\n12", "tab\there", "\x7f", "é", "\u2028",
		strings.Repeat("a", 40), strings.Repeat("F", 64), strings.Repeat("a", 63), strings.Repeat("a", 64), strings.Repeat("a", 65),
		strings.Repeat("x", 128), strings.Repeat("x", 129), strings.Repeat("é", 128), strings.Repeat("é", 129),
		strings.Repeat("b", 255), strings.Repeat("b", 256), strings.Repeat("s", 4096), strings.Repeat("s", 4097),
		strings.Repeat("a", 100) + "/" + strings.Repeat("b", 100), strings.Repeat("a", 101) + "/b",
		json.Number("0"), json.Number("1"), json.Number("-1"), json.Number("2"), json.Number("1.0"), json.Number("1e2"),
		json.Number("1.5"), json.Number("-0"), json.Number("9007199254740992"), json.Number("9007199254740993"),
		json.Number("123456789012345678"), json.Number("1234567890123456789"), json.Number("1e999999"),
		"2026-03-01T12:00:00Z", "2026-03-01t12:00:00z", "2026-03-01T12:00:00.5+01:00", "2026-02-29T12:00:00Z",
		"2024-02-29T12:00:00Z", "2026-03-01T23:59:60Z", "2026-03-01T12:00:60Z", "2026-03-01T12:00:00+24:00",
		"2026-03-01T12:00:00.Z", "2026-13-01T12:00:00Z", "2026-03-01 12:00:00Z", "0000-01-01T00:00:00Z",
	}
	return vals
}

// redactionValues are the redaction corpus as mutation values.
func redactionValues(t testing.TB) []any {
	var out []any
	for _, s := range redactionStrings(t) {
		out = append(out, s)
	}
	return out
}

var leapSecond = regexp.MustCompile(`[Tt]\d\d:\d\d:60`)

// leftToEngine reports a value the fast path does not model on purpose:
// a number with a fraction or an exponent, a leap second.
func leftToEngine(v any) bool {
	switch v := v.(type) {
	case map[string]any:
		for _, e := range v {
			if leftToEngine(e) {
				return true
			}
		}
	case []any:
		return slices.ContainsFunc(v, leftToEngine)
	case json.Number:
		return strings.ContainsAny(string(v), ".eE")
	case string:
		return leapSecond.MatchString(v)
	}
	return false
}

// mutations calls fn with every single-point edit of tree: each value
// replaced by each of vals, each member deleted, an unknown member added
// to each object, each array doubled.
func mutations(tree any, vals []any, fn func(any)) {
	var walk func(v any, set func(any))
	walk = func(v any, set func(any)) {
		if set != nil {
			for _, r := range vals {
				set(r)
				fn(tree)
			}
			set(v)
		}
		switch v := v.(type) {
		case map[string]any:
			for _, k := range sortedKeys(v) {
				e := v[k]
				delete(v, k)
				fn(tree)
				v[k] = e
				walk(e, func(x any) { v[k] = x })
			}
			v["zz_unknown"] = "x"
			fn(tree)
			delete(v, "zz_unknown")
		case []any:
			for i, e := range v {
				walk(e, func(x any) { v[i] = x })
			}
			if set != nil {
				set(append(slices.Clone(v), v...))
				fn(tree)
				set(v)
			}
		}
	}
	walk(tree, nil)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// TestValidationDifferential: over the whole corpus (every testdata
// document, valid and invalid, the cases of the schema tests, and every
// single-point mutation of the reference documents with the redaction
// corpus among the values) the fast path never changes DecodeDocument's
// answer, and it does take the ordinary valid documents.
func TestValidationDifferential(t *testing.T) {
	for name, raw := range corpus(t) {
		accepted := checkDifferential(t, raw)
		if strings.HasPrefix(filepath.Base(name), "checkpoint-") && filepath.Ext(name) == ".json" && !accepted {
			t.Errorf("%s: the fast path does not take it", name)
		}
	}
	for _, tt := range invalidDocumentCases() {
		tree := fullTree(t)
		tt.edit(tree)
		if checkDifferential(t, mustMarshal(t, tree)) {
			t.Errorf("%s: the fast path accepts an invalid document", tt.name)
		}
	}
	vals := mutationValues(t)
	for _, name := range []string{"testdata/checkpoint-full.json", "testdata/checkpoint-minimal.json", "redact/testdata/checkpoint-secrets.json"} {
		vals := vals
		if strings.HasPrefix(name, "redact/") && !testing.Short() {
			vals = append(slices.Clip(vals), redactionValues(t)...) // ~10 s
		}
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		tree, err := decodeJSONValue(raw)
		if err != nil {
			t.Fatal(err)
		}
		n, valid, fast := 0, 0, 0
		mutations(tree, vals, func(v any) {
			n++
			raw := mustMarshal(t, v)
			f, ok := differential(t, raw)
			if ok {
				valid++
			}
			if f {
				fast++
			}
			// Integers written as 1.0 or 1e2 and leap seconds are all the
			// fast path leaves to the engine among valid documents.
			if ok && !f && !leftToEngine(v) {
				t.Errorf("a valid document the fast path does not take: %.300s", raw)
			}
		})
		t.Logf("%s: %d mutations, %d valid, %d taken by the fast path", name, n, valid, fast)
	}
}

// FuzzValidationDifferential: on every input, the fast path and the engine
// give DecodeDocument the same answer, and the fast path accepts nothing the
// engine rejects.
func FuzzValidationDifferential(f *testing.F) {
	for _, raw := range corpus(f) {
		f.Add(raw)
	}
	f.Add([]byte(`{"schema_version":1,"run_id":"r","fencing_token":1,"role":"author","last_completed_action":{"kind":"k","at":"2026-03-01T23:59:60-00:00"}}`))
	f.Add([]byte(`{"schema_version":1.0,"run_id":"r","fencing_token":1e0,"role":"author","target":{"repo":"a/b","pr":2E1}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		checkDifferential(t, raw)
	})
}
