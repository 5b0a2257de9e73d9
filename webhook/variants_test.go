package webhook

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHeaderVariants edits a captured Gitea delivery into what other servers
// send: Forgejo's extra family, Forgejo's family alone, a server older than
// 1.16 without the fine event type.
func TestHeaderVariants(t *testing.T) {
	f := loadFixture(t, "gitea/16-pull_request-synchronized.json")
	id, sig := f.Headers["X-Gitea-Delivery"], f.Headers["X-Gitea-Signature"]
	addForgejo := func(r *http.Request) {
		r.Header.Set("X-Forgejo-Delivery", id)
		r.Header.Set("X-Forgejo-Event", "pull_request")
		r.Header.Set("X-Forgejo-Event-Type", "pull_request_sync")
		r.Header.Set("X-Forgejo-Signature", sig)
	}
	want := pr(1, "synchronized", gAlpha4, "feature/alpha", "feature/alpha", "main", false, false)
	tests := []struct {
		name                 string
		edit                 func(*http.Request)
		wantID, event, forge string
	}{
		{"as captured", func(*http.Request) {}, id, "pull_request_sync", "gitea"},
		{"plus X-Forgejo headers", addForgejo, id, "pull_request_sync", "forgejo"},
		{"only X-Forgejo headers", func(r *http.Request) {
			addForgejo(r)
			delHeaders(r, "X-Gitea-", "X-Gogs-", "X-Github-", "X-Hub-")
		}, id, "pull_request_sync", "forgejo"},
		{"Forgejo delivery id wins", func(r *http.Request) {
			addForgejo(r)
			r.Header.Set("X-Forgejo-Delivery", "forgejo-id")
		}, "forgejo-id", "pull_request_sync", "forgejo"},
		{"only X-Gogs headers", func(r *http.Request) {
			delHeaders(r, "X-Gitea-", "X-Github-", "X-Hub-")
		}, id, "pull_request_sync", "gitea"},
		{"server before 1.16: coarse event only", func(r *http.Request) {
			delHeaders(r, "X-Gitea-Event-Type", "X-Gogs-Event-Type", "X-Github-Event-Type")
		}, id, "pull_request", "gitea"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.request()
			tt.edit(r)
			d, err := f.verifier().Read(r)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if d.ID != tt.wantID || d.Event != tt.event || d.Forge != tt.forge {
				t.Errorf("Read = {ID %q, Event %q, Forge %q}, want {%q, %q, %q}", d.ID, d.Event, d.Forge, tt.wantID, tt.event, tt.forge)
			}
			got, err := Parse(d)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// signedRequest is a JSON delivery of payload, correctly signed.
func signedRequest(secret, event, payload string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hooks/gitea", strings.NewReader(payload))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Gitea-Delivery", "3f1c8d1e-0000-4000-8000-000000000001")
	r.Header.Set("X-Gitea-Event", event)
	r.Header.Set("X-Gitea-Event-Type", event)
	r.Header.Set("X-Gitea-Signature", sign(secret, []byte(payload)))
	return r
}

// TestSignedButMalformed shows that a valid signature does not make a bad
// payload acceptable: Read accepts it, Parse refuses it.
func TestSignedButMalformed(t *testing.T) {
	v := &Verifier{Secrets: [][]byte{[]byte("s3cret")}}
	for name, tt := range map[string]struct{ event, payload string }{
		"malformed JSON":                    {"push", `{"ref": "refs/heads/main", "before": `},
		"push without repository":           {"push", `{"ref": "refs/heads/main", "before": "` + shaA + `", "after": "` + shaB + `"}`},
		"pull_request with a string number": {"pull_request", `{"action": "opened", "number": "1"}`},
	} {
		t.Run(name, func(t *testing.T) {
			d, err := v.Read(signedRequest("s3cret", tt.event, tt.payload))
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if ev, err := Parse(d); !errors.Is(err, ErrMalformed) {
				t.Fatalf("Parse = %#v, %v; want ErrMalformed", ev, err)
			}
		})
	}
}

// TestFormSignature checks that a form delivery is verified over the
// decoded payload value and nothing else.
func TestFormSignature(t *testing.T) {
	f := loadFixture(t, "forgejo/73-push-new-branch-form-hook.json")
	vals, err := url.ParseQuery(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	payload := vals.Get("payload")
	tampered := strings.Replace(payload, "feature/zeta", "feature/zetb", 1)
	tests := []struct {
		name string
		body string
		sig  string
		want error
	}{
		{"as captured", f.Body, f.Headers["X-Forgejo-Signature"], nil},
		{"re-encoded form, same payload", url.Values{"payload": {payload}}.Encode(), f.Headers["X-Forgejo-Signature"], nil},
		{"tampered payload", url.Values{"payload": {tampered}}.Encode(), f.Headers["X-Forgejo-Signature"], ErrBadSignature},
		{"signature over the raw form body", f.Body, sign(f.Secret, []byte(f.Body)), ErrBadSignature},
		{"payload field twice", f.Body + "&" + f.Body, f.Headers["X-Forgejo-Signature"], ErrMalformed},
		{"bad escape", "payload=%zz", f.Headers["X-Forgejo-Signature"], ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := f.request()
			setBody(r, []byte(tt.body))
			r.Header.Set("X-Forgejo-Signature", tt.sig)
			d, err := f.verifier().Read(r)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Read error = %v, want %v", err, tt.want)
			}
			if err == nil && string(d.Payload) != payload {
				t.Errorf("Payload is not the decoded payload field")
			}
		})
	}
}
