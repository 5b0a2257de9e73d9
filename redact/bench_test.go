package redact

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// benchTree decodes a ~3 KB realistic checkpoint the way the API does.
func benchTree(b *testing.B, name string) any {
	b.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		b.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		b.Fatal(err)
	}
	return tree
}

// BenchmarkRedactTree is the budget check: redaction of a ~3 KB checkpoint
// with a few secrets must stay well under 50 µs (the whole redact + digest +
// seal budget of a write is 100 µs).
func BenchmarkRedactTree(b *testing.B) {
	tree := benchTree(b, "checkpoint-secrets.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := Tree(tree); err != nil || n != 5 {
			b.Fatalf("Tree: %d redactions, %v", n, err)
		}
	}
}

// BenchmarkRedactTreeClean is the common case: nothing to redact.
func BenchmarkRedactTreeClean(b *testing.B) {
	tree := benchTree(b, "checkpoint-clean.json")
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := Tree(tree); err != nil || n != 0 {
			b.Fatalf("Tree: %d redactions, %v", n, err)
		}
	}
}

// BenchmarkRedactStringClean measures the scan alone on prose without
// secrets; it must not allocate.
func BenchmarkRedactStringClean(b *testing.B) {
	s := benchTree(b, "checkpoint-clean.json").(map[string]any)["recovery"].(map[string]any)["instructions"].(string)
	b.SetBytes(int64(len(s)))
	b.ReportAllocs()
	for b.Loop() {
		if _, n, _ := String(s); n != 0 {
			b.Fatal("redacted a clean string")
		}
	}
}
