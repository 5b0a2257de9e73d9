package checkpointd_test

import (
	"github.com/checkpointd/checkpointd/redact"

	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
)

// TestRedactDocumentMatchesRedactTree holds the typed walk the write path
// uses to the JSON-tree redactor: same output, same count.
func TestRedactDocumentMatchesRedactTree(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.json")
	more, _ := filepath.Glob("redact/testdata/checkpoint-*.json")
	files = append(files, more...)
	if len(files) < 3 {
		t.Fatalf("only %d documents to compare", len(files))
	}
	redacted := 0
	defer func() {
		if redacted == 0 {
			t.Error("no document held a secret: the comparison proves nothing")
		}
	}()
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, ok := redactionsAgree(t, raw)
		if !ok {
			t.Fatalf("%s: not a valid document", f)
		}
		redacted += n
	}
}

func TestRedactDocumentRefusesInvalidUTF8(t *testing.T) {
	doc := &checkpointd.Document{Note: "bad \xff byte"}
	if _, err := checkpointd.RedactDocument(doc); err == nil {
		t.Fatal("invalid UTF-8 was accepted")
	}
}

// redactionsAgree redacts a valid document both ways (RedactDocument, and
// redact.Tree over its JSON tree) and fails t unless they agree: the same
// document, the same count, an error from both or from neither. ok is false
// when raw is no valid document.
func redactionsAgree(t *testing.T, raw []byte) (n int, ok bool) {
	t.Helper()
	tree, doc, err := checkpointd.DecodeDocument(raw, checkpointd.DefaultWorkflow())
	if err != nil {
		return 0, false
	}
	redTree, wantN, treeErr := redact.Tree(tree)
	gotN, docErr := checkpointd.RedactDocument(doc)
	if (treeErr == nil) != (docErr == nil) {
		t.Fatalf("redact.Tree: %v; RedactDocument: %v", treeErr, docErr)
	}
	if treeErr != nil {
		return 0, true
	}
	b, _ := json.Marshal(redTree)
	var want checkpointd.Document
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	if gotN != wantN {
		t.Errorf("%d redactions, redact.Tree found %d", gotN, wantN)
	}
	if diff := cmp.Diff(want, *doc); diff != "" {
		t.Errorf("RedactDocument differs from redact.Tree (-tree +document):\n%s", diff)
	}
	return gotN, true
}

// FuzzRedactDocument holds the reflection walk to redact.Tree on any valid
// document, as FuzzValidationDifferential holds the schema's fast path to
// the reference validator. Seeds: the documents of the tests, secrets
// among them.
func FuzzRedactDocument(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	more, _ := filepath.Glob("redact/testdata/checkpoint-*.json")
	for _, name := range append(files, more...) {
		raw, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Fuzz(func(t *testing.T, raw []byte) { redactionsAgree(t, raw) })
}
