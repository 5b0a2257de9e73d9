package webhook

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse feeds Parse every captured payload under its event type, and
// mutations of them: it must never panic, fail only with ErrMalformed, and
// every event it returns must hold the invariants the store relies on.
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*", "[0-9]*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, file := range files {
		fx := loadFixture(f, strings.TrimPrefix(file, "testdata"+string(filepath.Separator)))
		payload := fx.Body
		if fx.ContentType == "form" {
			vals, err := url.ParseQuery(fx.Body)
			if err != nil {
				f.Fatal(err)
			}
			payload = vals.Get("payload")
		}
		f.Add(fx.EventType, []byte(payload))
	}
	for _, ev := range []string{"pull_request_review_approved", "pull_request_comment", "issues", "delete"} {
		f.Add(ev, []byte(`{"action": "reviewed", "ref_type": "branch", "ref": "refs/heads/x"}`))
	}
	f.Fuzz(func(t *testing.T, event string, payload []byte) {
		d := &Delivery{ID: "fuzz", Event: event, Forge: "gitea", Payload: payload}
		ev, err := Parse(d)
		if err != nil {
			if !errors.Is(err, ErrMalformed) || ev != nil {
				t.Fatalf("Parse = %#v, %v; errors must wrap ErrMalformed and come alone", ev, err)
			}
			return
		}
		checkInvariants(t, d, ev)
	})
}

func checkInvariants(t *testing.T, d *Delivery, ev Event) {
	t.Helper()
	switch e := ev.(type) {
	case Push:
		checkRepo(t, e.Repo)
		if d.Event != "push" || !cleanName(e.Branch) || !lowerSHA(e.Before) || !lowerSHA(e.After) ||
			len(e.Before) != len(e.After) || e.Before == e.After || IsZeroSHA(e.After) {
			t.Fatalf("bad Push from %s: %#v", d.Event, e)
		}
	case BranchDeleted:
		checkRepo(t, e.Repo)
		if (d.Event != "push" && d.Event != "delete") || !cleanName(e.Branch) {
			t.Fatalf("bad BranchDeleted from %s: %#v", d.Event, e)
		}
	case PullRequest:
		checkRepo(t, e.Repo)
		if !strings.HasPrefix(d.Event, "pull_request") || d.Event == "pull_request_comment" ||
			e.Number <= 0 || !lowerSHA(e.HeadSHA) || IsZeroSHA(e.HeadSHA) ||
			!cleanName(e.HeadRef) || !cleanName(e.BaseRef) || (prEnds[e.Action] && !e.Closed) {
			t.Fatalf("bad PullRequest from %s: %#v", d.Event, e)
		}
		switch e.Action {
		case "opened", "reopened", "synchronized", "edited", "closed", "deleted":
		default:
			t.Fatalf("PullRequest with action %q", e.Action)
		}
	case Ignored:
		if e.Event != d.Event || e.Reason == "" {
			t.Fatalf("bad Ignored for %s: %#v", d.Event, e)
		}
	default:
		t.Fatalf("Parse returned %#v and no error", ev)
	}
}

func checkRepo(t *testing.T, r Repo) {
	t.Helper()
	parts := strings.Split(r.FullName, "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" || r.ID < 0 {
		t.Fatalf("bad Repo %#v", r)
	}
}

// lowerSHA and cleanName restate the rules independently of the package.
func lowerSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	return strings.Trim(s, "0123456789abcdef") == ""
}

func cleanName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool { return r < ' ' || r == 0x7f })
}

// FuzzSignature checks that no signature header value panics Read's header
// parsing, and that anything it accepts is a full SHA-256.
func FuzzSignature(f *testing.F) {
	for _, s := range []string{"", "sha256=", "sha256=" + strings.Repeat("ab", 32), strings.Repeat("AB", 32), "sha1=00"} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, gitea, hub string) {
		h := http.Header{"X-Gitea-Signature": {gitea}, "X-Hub-Signature-256": {hub}}
		sig, err := signature(h)
		if err == nil && len(sig) != 32 {
			t.Fatalf("accepted %d-byte signature", len(sig))
		}
		if err != nil && !errors.Is(err, ErrMissingSignature) && !errors.Is(err, ErrBadSignature) {
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func BenchmarkReadAndParse(b *testing.B) {
	fx := loadFixture(b, "gitea/09-push-fast-forward.json")
	v, r, body := fx.verifier(), fx.request(), []byte(fx.Body)
	var rd bytes.Reader
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		rd.Reset(body)
		r.Body = io.NopCloser(&rd)
		d, err := v.Read(r)
		if err != nil {
			b.Fatal(err)
		}
		ev, err := Parse(d)
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := ev.(Push); !ok {
			b.Fatalf("got %#v", ev)
		}
	}
}
