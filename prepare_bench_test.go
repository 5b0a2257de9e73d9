package checkpointd_test

import (
	"os"
	"testing"

	"github.com/checkpointd/checkpointd"
)

// BenchmarkRedactDigestSeal measures what a checkpoint write adds to
// validation for secrets: digest the canonical pre-redaction form, redact
// every string, seal the free-text fields. Target: ≤ 100 µs for a 3 KB
// document.
func BenchmarkRedactDigestSeal(b *testing.B) {
	raw, err := os.ReadFile("redact/testdata/checkpoint-secrets.json")
	if err != nil {
		b.Fatal(err)
	}
	tree, doc, err := checkpointd.DecodeDocument(raw, checkpointd.DefaultWorkflow())
	if err != nil {
		b.Fatal(err)
	}
	kr, err := checkpointd.ParseKeyring("AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=")
	if err != nil {
		b.Fatal(err)
	}
	digestKey := kr.DigestKey()
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		canonical, err := checkpointd.CanonicalJSON(tree)
		if err != nil {
			b.Fatal(err)
		}
		_ = checkpointd.Digest(digestKey, canonical)
		d := *doc
		n, err := checkpointd.RedactDocument(&d)
		if err != nil || n == 0 {
			b.Fatalf("redactions %d, err %v", n, err)
		}
		_, private := checkpointd.SplitSealed(d)
		_ = kr.Seal(private, []byte("ses_x\x001"))
	}
}

// BenchmarkPrepareCheckpoint is the whole domain side of a write: decode,
// validate, digest, redact.
func BenchmarkPrepareCheckpoint(b *testing.B) {
	raw, err := os.ReadFile("redact/testdata/checkpoint-secrets.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checkpointd.PrepareCheckpoint(raw, checkpointd.DefaultWorkflow(), []byte("k")); err != nil {
			b.Fatal(err)
		}
	}
}
