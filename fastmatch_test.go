package checkpointd

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// TestFastMatchers: each hand-written pattern matcher agrees with the
// regexp it stands for, on the mutation values and edge strings.
func TestFastMatchers(t *testing.T) {
	inputs := []string{"", "a", "a/", "/a", "a//b", "a/b/c", "ab:c-d.e_f", "\x00", "\x1f", " ", "~", "\x7f", "\u0080", "\u009f", "日本"}
	for _, v := range append(mutationValues(t), redactionValues(t)...) {
		if s, ok := v.(string); ok {
			inputs = append(inputs, s, s+"\n", "A"+s, s+"g")
		}
	}
	for pat, match := range fastMatchers {
		re := regexp.MustCompile(pat)
		for _, s := range inputs {
			if got, want := match(s), re.MatchString(s); got != want {
				t.Errorf("%s on %q: fast %v, regexp %v", pat, s, got, want)
			}
		}
	}
}

// FuzzFastMatchers: the same, on any valid UTF-8 string.
func FuzzFastMatchers(f *testing.F) {
	f.Add("ab:c-d")
	f.Add(strings.Repeat("a", 40))
	f.Add("owner/name")
	res := map[string]*regexp.Regexp{}
	for pat := range fastMatchers {
		res[pat] = regexp.MustCompile(pat)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) {
			return
		}
		for pat, match := range fastMatchers {
			if got, want := match(s), res[pat].MatchString(s); got != want {
				t.Fatalf("%s on %q: fast %v, regexp %v", pat, s, got, want)
			}
		}
	})
}

// TestFastDateTime: the fast date-time check accepts only what the
// engine's format accepts.
func TestFastDateTime(t *testing.T) {
	for y := 1999; y <= 2001; y++ {
		for mo := 0; mo <= 13; mo++ {
			for _, d := range []int{0, 1, 28, 29, 30, 31, 32} {
				s := strconv.Itoa(y) + "-" + pad2(mo) + "-" + pad2(d) + "T12:00:00Z"
				checkDateTime(t, s)
			}
		}
	}
	for _, v := range mutationValues(t) {
		if s, ok := v.(string); ok {
			checkDateTime(t, s)
		}
	}
}

func pad2(n int) string { return strings.TrimPrefix(strconv.Itoa(100+n), "1") }

func checkDateTime(t *testing.T, s string) {
	t.Helper()
	tree := map[string]any{"schema_version": json.Number("1"), "run_id": "r", "fencing_token": json.Number("1"), "role": "author",
		"last_completed_action": map[string]any{"kind": "k", "at": s}}
	engineOK := len(schemaProblems(checkpointSchema.Validate(tree))) == 0
	if fastDateTime(s) && !engineOK {
		t.Errorf("fastDateTime(%q) accepts what the engine refuses", s)
	}
}

// TestDocumentFromTreeRefusesTheUnexpected: a member Document lacks or a
// value of another shape makes documentFromTree hand the document back to
// encoding/json rather than guess.
func TestDocumentFromTreeRefusesTheUnexpected(t *testing.T) {
	for name, edit := range map[string]func(m map[string]any){
		"unknown member":        func(m map[string]any) { m["bogus"] = "x" },
		"unknown nested member": func(m map[string]any) { obj(m, "recovery")["bogus"] = "x" },
		"unknown lease member":  func(m map[string]any) { m["leases"].([]any)[0].(map[string]any)["bogus"] = "x" },
		"string as integer":     func(m map[string]any) { m["fencing_token"] = "3" },
		"integer as string":     func(m map[string]any) { m["note"] = json.Number("3") },
		"fraction":              func(m map[string]any) { obj(m, "target")["pr"] = json.Number("3.0") },
		"object as array":       func(m map[string]any) { m["evidence"] = map[string]any{} },
		"array as object":       func(m map[string]any) { m["identity"] = []any{} },
	} {
		tree, err := decodeJSONValue(readTestdata(t, "checkpoint-full.json"))
		if err != nil {
			t.Fatal(err)
		}
		m := tree.(map[string]any)
		if _, ok := documentFromTree(m); !ok {
			t.Fatalf("documentFromTree refuses the reference document")
		}
		edit(m)
		if d, ok := documentFromTree(m); ok {
			t.Errorf("%s: documentFromTree = %+v, want a refusal", name, d)
		}
	}
}
