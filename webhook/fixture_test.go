package webhook

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fixture is one delivery captured from a real server; testdata/README.md
// describes the fields.
type fixture struct {
	Forge               string            `json:"forge"`
	EventType           string            `json:"event_type"`
	HookType            string            `json:"hook_type"`
	ContentType         string            `json:"content_type"`
	Method              string            `json:"method"`
	Path                string            `json:"path"`
	Headers             map[string]string `json:"headers"`
	Body                string            `json:"body"`
	BodySHA256          string            `json:"body_sha256"`
	Secret              string            `json:"secret"`
	SignedPayloadSHA256 string            `json:"signed_payload_sha256"`
}

// loadFixture reads testdata/<name> and checks the body is still byte-exact.
func loadFixture(t testing.TB, name string) fixture {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if got := sha256Hex([]byte(f.Body)); got != f.BodySHA256 {
		t.Fatalf("%s: body sha256 %s, recorded %s", name, got, f.BodySHA256)
	}
	if cl := f.Headers["Content-Length"]; cl != strconv.Itoa(len(f.Body)) {
		t.Fatalf("%s: Content-Length %s, body has %d bytes", name, cl, len(f.Body))
	}
	return f
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// request rebuilds the delivery as a Go server hands it to a handler: same
// method, path, header values and body bytes (header names canonicalised,
// Host moved to r.Host, as net/http does).
func (f fixture) request() *http.Request {
	r := httptest.NewRequest(f.Method, f.Path, strings.NewReader(f.Body))
	for k, v := range f.Headers {
		if k == "Host" {
			r.Host = v
			continue
		}
		r.Header.Set(k, v)
	}
	return r
}

func (f fixture) verifier() *Verifier {
	return &Verifier{Secrets: [][]byte{[]byte(f.Secret)}}
}

// Expected events, spelled out from the fixture files.
var demo = Repo{ID: 1, FullName: "operator/demo"}

const zero40 = "0000000000000000000000000000000000000000"

func push(branch, before, after string) Event {
	return Push{Repo: demo, Branch: branch, Before: before, After: after}
}

func deleted(branch string) Event { return BranchDeleted{Repo: demo, Branch: branch} }

func pr(number int64, action, headSHA, headRef, headLabel, baseRef string, closed, merged bool) Event {
	return PullRequest{Repo: demo, Number: number, Action: action, HeadSHA: headSHA,
		HeadRef: headRef, HeadLabel: headLabel, BaseRef: baseRef, Closed: closed, Merged: merged}
}

func ignored(event, reason string) Event { return Ignored{Event: event, Reason: reason} }

// TestFixtures reads and parses every captured delivery with its own secret.
func TestFixtures(t *testing.T) {
	for dir, want := range map[string]map[string]Event{"gitea": wantGitea, "forgejo": wantForgejo} {
		files, err := filepath.Glob(filepath.Join("testdata", dir, "[0-9]*.json"))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			names = append(names, filepath.Base(f))
		}
		var listed []string
		for name := range want {
			listed = append(listed, name)
		}
		slices.Sort(listed)
		if diff := cmp.Diff(listed, names); diff != "" {
			t.Errorf("%s: expectations vs files (-want +got):\n%s", dir, diff)
		}
		for _, name := range names {
			t.Run(dir+"/"+name, func(t *testing.T) {
				f := loadFixture(t, filepath.Join(dir, name))
				d, err := f.verifier().Read(f.request())
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				checkDelivery(t, dir, f, d)
				got, err := Parse(d)
				if err != nil {
					t.Fatalf("Parse: %v", err)
				}
				if diff := cmp.Diff(want[name], got); diff != "" {
					t.Errorf("Parse (-want +got):\n%s", diff)
				}
			})
		}
	}
}

func checkDelivery(t *testing.T, dir string, f fixture, d *Delivery) {
	t.Helper()
	if d.ID != f.Headers["X-Gitea-Delivery"] || d.ID == "" {
		t.Errorf("ID = %q, want %q", d.ID, f.Headers["X-Gitea-Delivery"])
	}
	if d.Event != f.EventType {
		t.Errorf("Event = %q, want %q", d.Event, f.EventType)
	}
	if d.Forge != dir {
		t.Errorf("Forge = %q, want %q", d.Forge, dir)
	}
	if f.ContentType == "form" {
		if got := sha256Hex(d.Payload); got != f.SignedPayloadSHA256 {
			t.Errorf("form payload sha256 = %s, want %s", got, f.SignedPayloadSHA256)
		}
	} else if string(d.Payload) != f.Body {
		t.Errorf("Payload differs from the raw body")
	}
}
