package api

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
)

// TestReadAll: the sized read returns exactly what io.ReadAll returns,
// whatever the declared length says, and keeps the reader's errors.
func TestReadAll(t *testing.T) {
	body := strings.Repeat("x", 3000)
	tests := []struct {
		name          string
		r             func() io.Reader
		length, limit int64
	}{
		{"declared exactly", func() io.Reader { return strings.NewReader(body) }, 3000, 1 << 20},
		{"declared too short", func() io.Reader { return strings.NewReader(body) }, 100, 1 << 20},
		{"declared too long", func() io.Reader { return strings.NewReader(body) }, 5000, 1 << 20},
		{"undeclared", func() io.Reader { return strings.NewReader(body) }, -1, 1 << 20},
		{"declared above the limit", func() io.Reader { return strings.NewReader(body) }, 1 << 30, 1 << 20},
		{"one byte at a time", func() io.Reader { return iotest.OneByteReader(strings.NewReader(body)) }, 3000, 1 << 20},
		{"data with EOF", func() io.Reader { return iotest.DataErrReader(strings.NewReader(body)) }, 3000, 1 << 20},
		{"empty", func() io.Reader { return strings.NewReader("") }, 0, 1 << 20},
	}
	for _, tt := range tests {
		want, wantErr := io.ReadAll(tt.r())
		got, err := readAll(tt.r(), tt.length, tt.limit)
		if !bytes.Equal(got, want) || (err == nil) != (wantErr == nil) {
			t.Errorf("%s: %d bytes, %v; want %d bytes, %v", tt.name, len(got), err, len(want), wantErr)
		}
	}
	boom := errors.New("boom")
	if _, err := readAll(iotest.ErrReader(boom), 10, 100); !errors.Is(err, boom) {
		t.Errorf("a failing reader: %v, want its error", err)
	}
	// Over the limit through MaxBytesReader, with an honest length: the
	// caller still sees the MaxBytesError.
	req := httptest.NewRequest("POST", "/", strings.NewReader(body))
	if _, err := readBody(httptest.NewRecorder(), req, 100); !errors.Is(err, errPayloadTooLarge) {
		t.Errorf("a body above the limit: %v, want errPayloadTooLarge", err)
	}
}

// BenchmarkReadBody reads a 3 KB checkpoint body as a write does.
func BenchmarkReadBody(b *testing.B) {
	body := strings.Repeat("x", 3000)
	b.ReportAllocs()
	for b.Loop() {
		req := httptest.NewRequest("POST", "/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if _, err := readBody(httptest.NewRecorder(), req, 1<<20); err != nil {
			b.Fatal(err)
		}
	}
}
