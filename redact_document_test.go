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
		tree, doc, err := checkpointd.DecodeDocument(raw, checkpointd.DefaultWorkflow())
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		redTree, wantN, err := redact.Tree(tree)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(redTree)
		var want checkpointd.Document
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatal(err)
		}
		gotN, err := checkpointd.RedactDocument(doc)
		if err != nil {
			t.Fatal(err)
		}
		redacted += gotN
		if gotN != wantN {
			t.Errorf("%s: %d redactions, RedactTree found %d", f, gotN, wantN)
		}
		if diff := cmp.Diff(want, *doc); diff != "" {
			t.Errorf("%s: RedactDocument differs from RedactTree (-tree +document):\n%s", f, diff)
		}
	}
}

func TestRedactDocumentRefusesInvalidUTF8(t *testing.T) {
	doc := &checkpointd.Document{Note: "bad \xff byte"}
	if _, err := checkpointd.RedactDocument(doc); err == nil {
		t.Fatal("invalid UTF-8 was accepted")
	}
}
