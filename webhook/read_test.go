package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func sign(secret string, payload []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(payload)
	return hex.EncodeToString(m.Sum(nil))
}

func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
}

// delHeaders removes every header whose canonical name starts with one of
// the prefixes.
func delHeaders(r *http.Request, prefixes ...string) {
	for k := range r.Header {
		for _, p := range prefixes {
			if strings.HasPrefix(k, p) {
				r.Header.Del(k)
			}
		}
	}
}

// onlySignature leaves name: value as the only signature header.
func onlySignature(name, value string) func(*http.Request) {
	return func(r *http.Request) {
		delHeaders(r, "X-Gitea-Signature", "X-Gogs-Signature", "X-Forgejo-Signature", "X-Hub-Signature")
		r.Header.Set(name, value)
	}
}

// endless is a body that never ends, to show Read stops at the cap.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

func TestReadFailures(t *testing.T) {
	f := loadFixture(t, "gitea/09-push-fast-forward.json")
	body := []byte(f.Body)
	sig := f.Headers["X-Gitea-Signature"]
	flipped := bytes.Clone(body)
	flipped[len(flipped)/2] ^= 0x01
	tests := []struct {
		name string
		v    *Verifier // nil: the fixture's secret
		edit func(*http.Request)
		want error // nil: accepted
	}{
		{name: "as captured"},
		{name: "tampered body", edit: func(r *http.Request) { setBody(r, flipped) }, want: ErrBadSignature},
		{name: "wrong secret", v: &Verifier{Secrets: [][]byte{[]byte("not-the-secret")}}, want: ErrBadSignature},
		{name: "rotation, second secret matches", v: &Verifier{Secrets: [][]byte{[]byte("new-secret"), []byte(f.Secret)}}},
		{name: "rotation, first secret matches", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret), []byte("old-secret")}}},
		{name: "empty X-Gitea-Signature only", edit: onlySignature("X-Gitea-Signature", ""), want: ErrMissingSignature},
		{name: "bare sha256= only", edit: onlySignature("X-Hub-Signature-256", "sha256="), want: ErrMissingSignature},
		{name: "secret-less hook headers", edit: func(r *http.Request) {
			for _, h := range []string{"X-Gitea-Signature", "X-Gogs-Signature"} {
				r.Header.Set(h, "")
			}
			r.Header.Set("X-Hub-Signature", "sha1=")
			r.Header.Set("X-Hub-Signature-256", "sha256=")
		}, want: ErrMissingSignature},
		{name: "no signature header", edit: onlySignature("X-Unrelated", "x"), want: ErrMissingSignature},
		{name: "only X-Hub-Signature-256", edit: onlySignature("X-Hub-Signature-256", "sha256="+sig)},
		{name: "X-Hub-Signature-256 without prefix", edit: onlySignature("X-Hub-Signature-256", sig), want: ErrBadSignature},
		{name: "only SHA-1 X-Hub-Signature", edit: onlySignature("X-Hub-Signature", f.Headers["X-Hub-Signature"]), want: ErrMissingSignature},
		{name: "only X-Gogs-Signature", edit: onlySignature("X-Gogs-Signature", sig)},
		{name: "uppercase hex", edit: onlySignature("X-Gitea-Signature", strings.ToUpper(sig))},
		{name: "non-hex signature", edit: onlySignature("X-Gitea-Signature", strings.Repeat("z", 64)), want: ErrBadSignature},
		{name: "short signature", edit: onlySignature("X-Gitea-Signature", sig[:62]), want: ErrBadSignature},
		{name: "first signature header decides", edit: func(r *http.Request) {
			r.Header.Set("X-Forgejo-Signature", strings.Repeat("0", 64))
		}, want: ErrBadSignature},
		{name: "no secret configured", v: &Verifier{}, want: ErrNoSecret},
		{name: "only an empty secret", v: &Verifier{Secrets: [][]byte{{}}}, want: ErrNoSecret},
		{name: "allow unsigned", v: &Verifier{AllowUnsigned: true}, edit: onlySignature("X-Unrelated", "x")},
		{name: "allow unsigned with a secret still verifies", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, AllowUnsigned: true},
			edit: onlySignature("X-Unrelated", "x"), want: ErrMissingSignature},
		{name: "missing delivery id", edit: func(r *http.Request) { delHeaders(r, "X-Gitea-Delivery", "X-Gogs-Delivery") }, want: ErrMissingHeader},
		{name: "unusable delivery id", edit: func(r *http.Request) { r.Header.Set("X-Gitea-Delivery", "a b") }, want: ErrMalformed},
		{name: "unusable event", edit: func(r *http.Request) { r.Header.Set("X-Gitea-Event-Type", "push\x01") }, want: ErrMalformed},
		{name: "missing event", edit: func(r *http.Request) { delHeaders(r, "X-Gitea-Event", "X-Gogs-Event") }, want: ErrMissingHeader},
		{name: "GET", edit: func(r *http.Request) { r.Method = http.MethodGet }, want: ErrMethod},
		{name: "text/plain", edit: func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, want: ErrUnsupportedMediaType},
		{name: "no content type", edit: func(r *http.Request) { r.Header.Del("Content-Type") }, want: ErrUnsupportedMediaType},
		{name: "json with charset", edit: func(r *http.Request) { r.Header.Set("Content-Type", "application/json; charset=utf-8") }},
		{name: "form without payload field", edit: func(r *http.Request) {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			setBody(r, []byte("other="+url.QueryEscape(f.Body)))
		}, want: ErrMalformed},
		{name: "oversize by Content-Length", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: 100}, want: ErrTooLarge},
		{name: "oversize, length unknown", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: 100}, edit: func(r *http.Request) {
			r.ContentLength = -1
		}, want: ErrTooLarge},
		{name: "at the cap", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: int64(len(body))}},
		{name: "at the cap, length unknown", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: int64(len(body))}, edit: func(r *http.Request) {
			r.ContentLength = -1
		}},
		{name: "a byte over the cap, length unknown", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: int64(len(body)) - 1}, edit: func(r *http.Request) {
			r.ContentLength = -1
		}, want: ErrTooLarge},
		{name: "endless body", v: &Verifier{Secrets: [][]byte{[]byte(f.Secret)}, MaxBody: 1 << 20}, edit: func(r *http.Request) {
			r.Body, r.ContentLength = io.NopCloser(endless{}), -1
		}, want: ErrTooLarge},
		{name: "cap set by http.MaxBytesReader", edit: func(r *http.Request) {
			r.Body, r.ContentLength = http.MaxBytesReader(nil, r.Body, 100), -1
		}, want: ErrTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := tt.v
			if v == nil {
				v = f.verifier()
			}
			r := f.request()
			if tt.edit != nil {
				tt.edit(r)
			}
			d, err := v.Read(r)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Read error = %v, want %v", err, tt.want)
			}
			if err != nil && d != nil {
				t.Errorf("Read returned a delivery with error %v", err)
			}
		})
	}
}

// TestPayloadOutlivesItsBuffer: bodies are read into recycled buffers; a
// delivery's payload must not change when the next body is read.
func TestPayloadOutlivesItsBuffer(t *testing.T) {
	first := loadFixture(t, "gitea/13-pull_request-opened.json") // larger than the next ones
	d, err := first.verifier().Read(first.request())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gitea/09-push-fast-forward.json", "gitea/22-delete-branch.json"} {
		f := loadFixture(t, name)
		if _, err := f.verifier().Read(f.request()); err != nil {
			t.Fatal(err)
		}
		r := f.request()
		r.Header.Set("X-Gitea-Signature", strings.Repeat("0", 64))
		if _, err := f.verifier().Read(r); !errors.Is(err, ErrBadSignature) {
			t.Fatalf("wrong signature: %v", err)
		}
	}
	if string(d.Payload) != first.Body {
		t.Fatal("the first delivery's payload changed when later bodies were read")
	}
}

// TestReadOverHTTP sends a fixture through a real server, so the body is
// read the way the daemon will read it.
func TestReadOverHTTP(t *testing.T) {
	f := loadFixture(t, "forgejo/76-pull_request-opened-form-hook.json")
	v := f.verifier()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d, err := v.Read(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if _, err := Parse(d); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	req, err := http.NewRequestWithContext(t.Context(), f.Method, srv.URL+f.Path, strings.NewReader(f.Body))
	if err != nil {
		t.Fatal(err)
	}
	for k, val := range f.Headers {
		req.Header.Set(k, val)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d: %s", resp.StatusCode, msg)
	}
}

// chunky hands out at most n bytes per Read, as a slow or chunked sender
// does.
type chunky struct {
	b []byte
	n int
}

func (c *chunky) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	k := copy(p[:min(len(p), c.n)], c.b)
	c.b = c.b[k:]
	return k, nil
}

// FuzzReadBody: a body is taken whole when it is at most the cap and
// refused with ErrTooLarge otherwise, declared or not, however the sender
// splits it, and whatever the reused buffer held before.
func FuzzReadBody(f *testing.F) {
	big := bytes.Repeat([]byte("x"), 70<<10) // past doublingLimit
	f.Add([]byte("{}"), uint32(2), true, uint16(1))
	f.Add([]byte("{}"), uint32(1), false, uint16(1))
	f.Add([]byte{}, uint32(0), false, uint16(1))
	f.Add(big, uint32(len(big)), false, uint16(4096))
	f.Add(big, uint32(len(big)-1), false, uint16(65535))
	f.Add(big, uint32(1<<20), true, uint16(333))
	buf := new([]byte)
	f.Fuzz(func(t *testing.T, body []byte, max uint32, declared bool, step uint16) {
		limit := int64(max%(2<<20)) + 1
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		r.Body, r.ContentLength = io.NopCloser(&chunky{b: body, n: int(step) + 1}), -1
		if declared {
			r.ContentLength = int64(len(body))
		}
		before := cap(*buf)
		got, err := readBody(r, limit, buf)
		if int64(len(body)) > limit {
			if !errors.Is(err, ErrTooLarge) || got != nil {
				t.Fatalf("%d bytes, cap %d: %d bytes, %v; want ErrTooLarge", len(body), limit, len(got), err)
			}
		} else if err != nil || !bytes.Equal(got, body) {
			t.Fatalf("%d bytes, cap %d: %d bytes, %v; want the body", len(body), limit, len(got), err)
		}
		// Never past the cap and the byte that shows it passed, but for the
		// allocator's rounding (size classes, then whole 8 KiB pages).
		if grown := int64(cap(*buf)); cap(*buf) > before && grown > (limit+1)*9/8+8<<10 {
			t.Fatalf("buffer grew from %d to %d for a cap of %d", before, grown, limit)
		}
	})
}
