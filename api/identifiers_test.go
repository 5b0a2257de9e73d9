package api_test

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/redact"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// idSlot is an identifying field: a value the daemon matches against the
// forge, the session or the host (docs/redaction.md, "What else is
// scanned"). Redacting one would store a name that matches nothing, so one
// that looks like a secret is refused (422, naming the field) and nothing
// of it is stored.
type idSlot struct {
	where   string // "session", "lease" or "doc"
	path    []any
	problem string // the field the 422 names
	repo    bool   // the value is a repo: planted as acme/<value> when that fits owner/name
}

var idSlots = []idSlot{
	{"session", []any{"branch"}, "/branch", false},
	{"session", []any{"worktree"}, "/worktree", false},
	{"session", []any{"repo"}, "/repo", true},
	{"lease", []any{"resource", "branch"}, "/resource/branch", false},
	{"lease", []any{"resource", "repo"}, "/resource/repo", true},
	{"doc", []any{"workspace", "branch"}, "/workspace/branch", false},
	{"doc", []any{"workspace", "worktree"}, "/workspace/worktree", false},
	{"doc", []any{"target", "repo"}, "/target/repo", true},
}

var repoPart = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,100}$`)

// idBodies are the requests an identifying value is planted in, against
// the session s.
func idBodies(s apiSession) map[string]func() (string, map[string]any) {
	return map[string]func() (string, map[string]any){
		"session": func() (string, map[string]any) { return "/v1/sessions", plantedSession() },
		"lease": func() (string, map[string]any) {
			return "/v1/leases", map[string]any{"resource": map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "lease-me"},
				"session_id": s.id, "run_id": s.run, "ttl_seconds": 60}
		},
		"doc": func() (string, map[string]any) {
			return "/v1/sessions/" + s.id + "/checkpoints", plantedDoc(s.run, s.tok, headA)
		},
	}
}

// TestIdentifiersThatLookLikeSecretsRefused plants every secret of the
// corpus, in its context (and bare when its shape alone is recognised),
// in every identifying field of a session
// creation, a lease acquisition and a checkpoint: each is 422 naming the
// field, and no secret is in any answer, GET, event, lease list, log line
// or the raw database. An Idempotency-Key that looks like a secret (it is
// stored as sent) is 400. Every look-alike and real branch name is
// accepted in the same fields and comes back byte for byte.
func TestIdentifiersThatLookLikeSecretsRefused(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, logs, dbURL := loggedHarness(t, b)
		tr := &transcript{h: h}
		id, run, tok := h.newSession()
		base := apiSession{id, run, tok}
		bodies := idBodies(base)
		corpus := secretCorpus(t)
		planted := 0
		for _, e := range corpus {
			values := []string{e.text}
			if red, _, _ := redact.String(e.secret); red != e.secret {
				// Bare too, when its shape gives it away; one only its
				// context does is an ordinary name without that context.
				values = append(values, e.secret)
			}
			for _, v := range values {
				// A session or lease request holds the value in each of its
				// identifying fields at once, and its 422 must name every one;
				// a document holds it in one field at a time (a field the
				// schema refuses first hides the others).
				var requests [][]idSlot
				for _, where := range []string{"session", "lease"} {
					requests = append(requests, slices.DeleteFunc(slices.Clone(idSlots), func(s idSlot) bool { return s.where != where }))
				}
				for _, slot := range idSlots {
					if slot.where == "doc" {
						requests = append(requests, []idSlot{slot})
					}
				}
				for _, slots := range requests {
					where := slots[0].where
					path, body := bodies[where]()
					var want []string
					for _, slot := range slots {
						value := v
						if slot.repo {
							if !repoPart.MatchString(v) {
								continue // not owner/name: refused as malformed, says nothing new
							}
							value = "acme/" + v
						}
						setPath(body, slot.path, value)
						want = append(want, slot.problem)
					}
					if want == nil {
						continue
					}
					code := "invalid_request"
					if where == "doc" {
						code = "invalid_checkpoint"
					}
					r := tr.do("POST", path, h.agent, body)
					got := problemPaths(r)
					if r.status != 422 || r.str("code") != code || slices.ContainsFunc(want, func(p string) bool { return !slices.Contains(got, p) }) {
						t.Errorf("secrets.txt:%d in %s %v: %d %s, want 422 %s naming each", e.line, where, want, r.status, r.raw, code)
					}
					planted += len(want)
				}
			}
			// The key is stored as sent: one that looks like a secret is
			// refused. (A bare secret that only its context gives away, such
			// as a 40-hex Gitea token, is a plain key by shape.)
			for _, key := range []string{e.secret, "token=" + e.secret} {
				red, _, _ := redact.String(key)
				if red == key || len(key) > 255 || strings.ContainsFunc(key, func(r rune) bool { return r < ' ' || r > '~' }) {
					continue
				}
				r := tr.doKey("POST", "/v1/sessions", h.agent, key, plantedSession())
				if r.status != 400 || r.str("code") != "invalid_idempotency_key" {
					t.Errorf("secrets.txt:%d in an Idempotency-Key: %d %s, want 400 invalid_idempotency_key", e.line, r.status, r.raw)
				}
			}
		}

		// End names a run and an outcome; neither takes free text.
		for _, e := range corpus[:10] {
			tr.do("POST", "/v1/sessions/"+id+"/end", h.agent, map[string]any{"run_id": e.secret, "outcome": "completed"})
			tr.do("POST", "/v1/sessions/"+id+"/end", h.agent, map[string]any{"run_id": run, "outcome": e.text})
		}

		// Everything a reader can see, and what the daemon wrote.
		tr.do("GET", "/v1/sessions/"+id, h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/sessions/"+id+"/events?limit=500", h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/sessions/"+id+"/checkpoints", h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/sessions?limit=500", h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/leases?limit=500", h.operator, nil).expect(t, 200, "")
		tr.do("GET", "/v1/errors?limit=500", h.operator, nil).expect(t, 200, "")
		needles := secretNeedles(corpus)
		for _, x := range tr.received {
			if leaked := found(x.raw, needles); leaked != nil {
				t.Errorf("the answer to %s holds %v", x.label, leaked)
			}
		}
		if leaked := found(logs.Bytes(), needles); leaked != nil {
			t.Errorf("the log holds %v", leaked)
		}
		h.do("POST", "/v1/sessions/"+id+"/checkpoints", h.agent, plantedDoc(run, tok, headA)).expect(t, 201, "") // a row for rawDatabase
		raw := rawDatabase(t, b, dbURL)
		if leaked := found(raw, needles); leaked != nil {
			t.Errorf("the raw database holds %v", leaked)
		}
		t.Logf("%d identifying values refused", planted)
	})
}

// TestIdentifiersKeptByteForByte: look-alikes and real branch names are
// accepted as identifying values and stored as sent.
func TestIdentifiersKeptByteForByte(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		names := []string{"fix-12", "feature/login-token-refresh", "users/bob/password-reset", "release/v1.2.3",
			"renovate/github.com-go-chi-chi-v5-5.x", "dependabot/npm_and_yarn/lodash-4.17.21", "revert-34-token_rotation"}
		for _, l := range lookalikeCorpus(t) {
			if checkpointd.ValidBranch(l) && !strings.Contains(l, "[REDACTED:") {
				names = append(names, l)
			}
		}
		slices.Sort(names)
		names = slices.Compact(names)
		for _, n := range names {
			sess := plantedSession()
			sess["branch"], sess["worktree"] = n, n
			created := h.do("POST", "/v1/sessions", h.agent, sess).expect(t, 201, "")
			if got := created.str("session", "branch"); got != n {
				t.Errorf("session branch %q came back as %q", n, got)
			}
			if got := created.str("session", "worktree"); got != n {
				t.Errorf("session worktree %q came back as %q", n, got)
			}
			s := apiSession{created.str("session", "id"), created.str("run", "id"), created.num("run", "fencing_token")}
			l := h.acquire(s, map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": n}, 60)
			if got := l["resource"].(map[string]any)["branch"]; got != n {
				t.Errorf("lease branch %q came back as %q", n, got)
			}
			doc := plantedDoc(s.run, s.tok, headA)
			doc["workspace"].(map[string]any)["branch"] = n
			doc["workspace"].(map[string]any)["worktree"] = n
			h.do("POST", "/v1/sessions/"+s.id+"/checkpoints", h.agent, doc).expect(t, 201, "")
			got := h.do("GET", "/v1/sessions/"+s.id, h.reader, nil).expect(t, 200, "")
			if got.str("session", "branch") != n || got.str("session", "worktree") != n {
				t.Errorf("the checkpoint moved the session to %q %q, want %q", got.str("session", "branch"), got.str("session", "worktree"), n)
			}
		}
		leases := map[string]bool{}
		for _, it := range h.do("GET", "/v1/leases?kind=branch&limit=500", h.reader, nil).expect(t, 200, "").get("items").([]any) {
			leases[it.(map[string]any)["resource"].(map[string]any)["branch"].(string)] = true
		}
		for _, n := range names {
			if !leases[n] {
				t.Errorf("no lease on %q listed", n)
			}
		}
		t.Logf("%d names", len(names))
	})
}
