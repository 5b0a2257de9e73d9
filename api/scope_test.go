package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// scopeRequest is one request of the scope matrix, with the session whose
// state it must not change when refused.
type scopeRequest struct {
	method, path, key string
	body              any
	session           string
}

// scopeState is a state a session (or its lease) can be in, and how a
// request meets it: setup builds a fresh fixture and returns the request;
// status and code are the answer a caller allowed to act gets.
type scopeState struct {
	endpoint, state string
	setup           func(h *leaseHarness) scopeRequest
	status          int
	code            string
}

// send sends a matrix request, with its Idempotency-Key when it has one.
func (h *leaseHarness) send(q scopeRequest, token string) response {
	h.t.Helper()
	if q.key != "" {
		return h.doKey(q.method, q.path, token, q.key, q.body)
	}
	return h.do(q.method, q.path, token, q.body)
}

// scopeStates are the states of sessions, runs, leases and idempotency
// keys that a write, a lease call, an end or a takeover can meet, each
// built fresh on acme/widgets.
func scopeStates() []scopeState {
	cp := func(h *leaseHarness, s apiSession, run string, tok int64, mutate ...func(map[string]any)) scopeRequest {
		return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/checkpoints", body: checkpointDoc(run, tok, mutate...), session: s.id}
	}
	takeover := func(h *leaseHarness, s apiSession) apiSession {
		r := h.do("POST", "/v1/sessions/"+s.id+"/runs", h.agent, map[string]any{"takeover": true}).expect(h.t, 201, "")
		return apiSession{s.id, r.str("run", "id"), r.num("run", "fencing_token")}
	}
	end := func(h *leaseHarness, s apiSession) {
		h.do("POST", "/v1/sessions/"+s.id+"/end", h.agent, map[string]any{"run_id": s.run, "outcome": "abandoned"}).expect(h.t, 200, "")
	}
	clear := func(h *leaseHarness, s apiSession) {
		h.do("DELETE", "/v1/sessions/"+s.id, h.operator, nil).expect(h.t, 204, "")
	}
	branch := func(s apiSession) map[string]any {
		return map[string]any{"kind": "branch", "repo": "acme/widgets", "branch": "scope-" + s.id}
	}
	acq := func(s apiSession, runID string, res map[string]any) scopeRequest {
		return scopeRequest{method: "POST", path: "/v1/leases", body: map[string]any{"resource": res, "session_id": s.id,
			"run_id": runID, "ttl_seconds": 60}, session: s.id}
	}
	leased := func(h *leaseHarness) (apiSession, string) {
		s := h.session()
		return s, h.acquire(s, branch(s), 60)["id"].(string)
	}
	renew := func(s apiSession, lease, run string) scopeRequest {
		return scopeRequest{method: "POST", path: "/v1/leases/" + lease + "/renew", body: map[string]any{"run_id": run}, session: s.id}
	}
	release := func(s apiSession, lease, run string) scopeRequest {
		return scopeRequest{method: "DELETE", path: "/v1/leases/" + lease + "?run_id=" + run, session: s.id}
	}
	const unknown = "ses_00000000000000000000000000000000"
	return []scopeState{
		{"write", "current run", func(h *leaseHarness) scopeRequest { s := h.session(); return cp(h, s, s.run, s.tok) }, 201, ""},
		{"write", "stale fencing token", func(h *leaseHarness) scopeRequest { s := h.session(); return cp(h, s, s.run, 999) }, 409, "run_superseded"},
		{"write", "superseded run", func(h *leaseHarness) scopeRequest {
			s := h.session()
			takeover(h, s)
			return cp(h, s, s.run, s.tok)
		}, 409, "run_superseded"},
		{"write", "ended session", func(h *leaseHarness) scopeRequest { s := h.session(); end(h, s); return cp(h, s, s.run, s.tok) }, 409, "session_ended"},
		{"write", "cleared session", func(h *leaseHarness) scopeRequest { s := h.session(); clear(h, s); return cp(h, s, s.run, s.tok) }, 410, "gone"},
		{"write", "another role", func(h *leaseHarness) scopeRequest {
			s := h.session()
			return cp(h, s, s.run, s.tok, func(d map[string]any) { d["role"] = "reviewer" })
		}, 422, "invalid_checkpoint"},
		{"write", "key replayed", func(h *leaseHarness) scopeRequest {
			s := h.session()
			q := cp(h, s, s.run, s.tok)
			q.key = "deploy-42"
			h.send(q, h.agent).expect(h.t, 201, "")
			return q
		}, 200, ""},
		{"write", "key used for another document", func(h *leaseHarness) scopeRequest {
			s := h.session()
			q := cp(h, s, s.run, s.tok)
			q.key = "deploy-42"
			h.send(q, h.agent).expect(h.t, 201, "")
			q.body = checkpointDoc(s.run, s.tok, func(d map[string]any) { d["note"] = "another document" })
			return q
		}, 422, "idempotency_conflict"},
		{"write", "key in flight", func(h *leaseHarness) scopeRequest {
			s := h.session()
			q := cp(h, s, s.run, s.tok)
			q.key = "deploy-42"
			if _, _, err := h.store.ClaimIdempotency(h.t.Context(), s.id, q.key, mustDigest(h.t, h.harness, q.body.(map[string]any))); err != nil {
				h.t.Fatal(err)
			}
			return q
		}, 409, "idempotency_in_flight"},

		{"acquire", "current run", func(h *leaseHarness) scopeRequest { s := h.session(); return acq(s, s.run, branch(s)) }, 201, ""},
		{"acquire", "superseded run", func(h *leaseHarness) scopeRequest {
			s := h.session()
			takeover(h, s)
			return acq(s, s.run, branch(s))
		}, 409, "run_superseded"},
		{"acquire", "ended session", func(h *leaseHarness) scopeRequest { s := h.session(); end(h, s); return acq(s, s.run, branch(s)) }, 409, "session_ended"},
		{"acquire", "cleared session", func(h *leaseHarness) scopeRequest { s := h.session(); clear(h, s); return acq(s, s.run, branch(s)) }, 410, "gone"},
		{"acquire", "held by another session", func(h *leaseHarness) scopeRequest {
			holder, s := h.session(), h.session()
			h.acquire(holder, branch(s), 60)
			return acq(s, s.run, branch(s))
		}, 409, "lease_held"},
		{"acquire", "a resource of the caller's repo", func(h *leaseHarness) scopeRequest {
			s := h.session()
			return acq(s, s.run, map[string]any{"kind": "branch", "repo": "other/x", "branch": "main"})
		}, 422, "invalid_request"},

		{"renew", "held", func(h *leaseHarness) scopeRequest { s, l := leased(h); return renew(s, l, s.run) }, 200, ""},
		{"renew", "released", func(h *leaseHarness) scopeRequest {
			s, l := leased(h)
			h.send(release(s, l, s.run), h.agent).expect(h.t, 204, "")
			return renew(s, l, s.run)
		}, 409, "lease_lost"},
		{"renew", "moved to a new run", func(h *leaseHarness) scopeRequest { s, l := leased(h); takeover(h, s); return renew(s, l, s.run) }, 409, "lease_lost"},
		{"renew", "ended session", func(h *leaseHarness) scopeRequest { s, l := leased(h); end(h, s); return renew(s, l, s.run) }, 409, "lease_lost"},

		{"release", "held", func(h *leaseHarness) scopeRequest { s, l := leased(h); return release(s, l, s.run) }, 204, ""},
		{"release", "released", func(h *leaseHarness) scopeRequest {
			s, l := leased(h)
			h.send(release(s, l, s.run), h.agent).expect(h.t, 204, "")
			return release(s, l, s.run)
		}, 409, "lease_lost"},
		{"release", "moved to a new run", func(h *leaseHarness) scopeRequest { s, l := leased(h); takeover(h, s); return release(s, l, s.run) }, 409, "lease_lost"},

		{"end", "current run", func(h *leaseHarness) scopeRequest {
			s := h.session()
			return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/end", body: map[string]any{"run_id": s.run, "outcome": "completed"}, session: s.id}
		}, 200, ""},
		{"end", "superseded run", func(h *leaseHarness) scopeRequest {
			s := h.session()
			takeover(h, s)
			return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/end", body: map[string]any{"run_id": s.run, "outcome": "completed"}, session: s.id}
		}, 409, "run_superseded"},
		{"end", "ended session", func(h *leaseHarness) scopeRequest {
			s := h.session()
			end(h, s)
			return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/end", body: map[string]any{"run_id": s.run, "outcome": "completed"}, session: s.id}
		}, 409, "session_ended"},

		{"run", "run active, no takeover", func(h *leaseHarness) scopeRequest {
			s := h.session()
			return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/runs", body: map[string]any{}, session: s.id}
		}, 409, "run_active"},
		{"run", "ended session", func(h *leaseHarness) scopeRequest {
			s := h.session()
			end(h, s)
			return scopeRequest{method: "POST", path: "/v1/sessions/" + s.id + "/runs", body: map[string]any{"takeover": true}, session: s.id}
		}, 409, "session_ended"},

		// A session that does not exist has no scope to hide: 404 for any
		// caller whose role may make the request.
		{"write", "unknown session", func(h *leaseHarness) scopeRequest {
			s := h.session()
			q := cp(h, s, s.run, s.tok)
			q.path, q.key = "/v1/sessions/"+unknown+"/checkpoints", "deploy-42"
			return q
		}, 404, "not_found"},
		{"acquire", "unknown session", func(h *leaseHarness) scopeRequest {
			s := h.session()
			q := acq(s, s.run, branch(s))
			q.body.(map[string]any)["session_id"] = unknown
			return q
		}, 404, "not_found"},
	}
}

// scopeSnapshot is what a refused request must leave as it was: the
// session (or what answers for it), its events and its leases, as the
// operator sees them.
func scopeSnapshot(h *leaseHarness, id string) string {
	var b strings.Builder
	for _, p := range []string{"/v1/sessions/" + id, "/v1/sessions/" + id + "/events?limit=500", "/v1/leases?limit=500&session_id=" + id} {
		r := h.do("GET", p, h.operator, nil)
		fmt.Fprintf(&b, "%s %d %s\n", p, r.status, r.raw)
	}
	return b.String()
}

// TestScopeBeforeState drives role × scope × endpoint × state for the
// calls that act on a session (checkpoint writes, lease acquires, renewals
// and releases, ends and takeovers): a reader, or an agent whose scope
// does not cover the session's repo, gets 403 forbidden before anything
// about the session is looked at — its run, fencing token, end, leases or
// idempotency keys — with one and the same answer whatever the state, and
// changes nothing. Agents in scope and operators (whose scope does not
// restrict them) get the state's own answer.
func TestScopeBeforeState(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newLeaseHarness(t, b)
		type caller struct {
			name    string
			token   string
			allowed bool
		}
		callers := []caller{
			{"agent in scope", h.agent, true},
			{"operator scoped elsewhere", h.token(checkpointd.RoleOperator, []string{"other/*"}), true},
			{"agent of another repo", h.token(checkpointd.RoleAgent, []string{"other/x"}), false},
			{"agent of another owner", h.token(checkpointd.RoleAgent, []string{"other/*"}), false},
			{"reader in scope", h.reader, false},
			{"reader of another repo", h.token(checkpointd.RoleReader, []string{"other/x"}), false},
		}
		// forbidden collects, per endpoint and caller, the distinct 403
		// bodies: one each, or the answer tells states apart.
		forbidden := map[string]map[string]bool{}
		cells := 0
		for _, st := range scopeStates() {
			t.Run(st.endpoint+"/"+st.state, func(t *testing.T) {
				parent := h.t
				h.t = t // the fixtures' failures are this state's
				defer func() { h.t = parent }()
				// The refused callers share one fixture: none may change it.
				shared := st.setup(h)
				before := scopeSnapshot(h, shared.session)
				for _, c := range callers {
					if c.allowed {
						continue
					}
					t.Run(c.name, func(t *testing.T) {
						cells++
						status, code := 403, "forbidden"
						if st.status == 404 && !strings.HasPrefix(c.name, "reader") {
							status, code = st.status, st.code // no session, no scope to hide
						}
						r := h.send(shared, c.token).expect(t, status, code)
						if status != 403 {
							return
						}
						if r.header.Get("Idempotent-Replayed") != "" || r.get("checkpoint") != nil {
							t.Errorf("a 403 with a replay: %s", r.raw)
						}
						for _, leak := range []string{"fencing", "run_", "ended", "held", "lease", "key", "role \"", "acme", "widgets"} {
							if strings.Contains(string(r.raw), leak) {
								t.Errorf("the 403 tells %q: %s", leak, r.raw)
							}
						}
						k := st.endpoint + "/" + c.name
						if forbidden[k] == nil {
							forbidden[k] = map[string]bool{}
						}
						forbidden[k][string(r.raw)] = true
						if after := scopeSnapshot(h, shared.session); after != before {
							t.Errorf("a 403 changed state:\n%s→\n%s", before, after)
						}
					})
				}
				if shared.key != "" && st.status == 200 {
					// The key's owner still gets its replay: the refused
					// requests neither took nor spoiled the key.
					h.send(shared, h.agent).expect(t, 200, "")
				}
				// The allowed callers get the state's answer, each on a
				// fixture of its own (the answer may change it).
				for _, c := range callers {
					if !c.allowed {
						continue
					}
					t.Run(c.name, func(t *testing.T) {
						cells++
						prev := h.t
						h.t = t
						defer func() { h.t = prev }()
						q := st.setup(h)
						h.send(q, c.token).expect(t, st.status, st.code)
					})
				}
			})
		}
		for k, bodies := range forbidden {
			if len(bodies) != 1 {
				var all []string
				for b := range bodies {
					all = append(all, b)
				}
				t.Errorf("%s: %d different 403 answers tell states apart:\n%s", k, len(bodies), strings.Join(all, "\n"))
			}
		}
		t.Logf("%d cells", cells)
	})
}

// TestIdempotencyKeyAfterScope is the attack of issue 13 item 5: agent A
// (acme/*) writes with Idempotency-Key deploy-42; agent O, scoped to
// other/x, sends the same key with the same body, with another body, and a
// fresh key: each is the same 403, without a replay and without telling
// that the key exists, and A's replay still works. A key sent for a
// session that does not exist is not claimed at all.
func TestIdempotencyKeyAfterScope(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h, _, url := loggedHarness(t, b)
		id, run, tok := h.newSession()
		path := "/v1/sessions/" + id + "/checkpoints"
		doc := checkpointDoc(run, tok, func(d map[string]any) { d["note"] = "the unsealed note of deploy 42" })
		first := h.doKey("POST", path, h.agent, "deploy-42", doc).expect(t, 201, "")

		o := h.token(checkpointd.RoleAgent, []string{"other/x"})
		same := h.doKey("POST", path, o, "deploy-42", doc).expect(t, 403, "forbidden")
		other := h.doKey("POST", path, o, "deploy-42", checkpointDoc(run, tok)).expect(t, 403, "forbidden")
		fresh := h.doKey("POST", path, o, "never-used", checkpointDoc(run, tok)).expect(t, 403, "forbidden")
		for _, r := range []response{same, other, fresh} {
			if r.header.Get("Idempotent-Replayed") != "" || strings.Contains(string(r.raw), "deploy 42") {
				t.Errorf("the out-of-scope answer replays: %s %s", r.header, r.raw)
			}
		}
		if !bytes.Equal(same.raw, other.raw) || !bytes.Equal(same.raw, fresh.raw) {
			t.Errorf("the answers tell a used key from a fresh one:\n%s\n%s\n%s", same.raw, other.raw, fresh.raw)
		}
		replay := h.doKey("POST", path, h.agent, "deploy-42", doc).expect(t, 200, "")
		if !bytes.Equal(replay.raw, first.raw) {
			t.Errorf("the owner's replay changed:\n%s\n%s", first.raw, replay.raw)
		}

		// A key for a session that does not exist: 404, nothing claimed.
		const unknown = "ses_00000000000000000000000000000000"
		h.doKey("POST", "/v1/sessions/"+unknown+"/checkpoints", h.agent, "deploy-43", doc).expect(t, 404, "not_found")
		db, rebind := rawSQL(t, b, url)
		var n int
		if err := db.QueryRow(rebind(`SELECT COUNT(*) FROM idempotency WHERE scope = ?`), unknown).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%d idempotency keys claimed for a session that does not exist", n)
		}

		// Session creation keys are the token's own: another token's same
		// key creates its own session, never replays A's.
		created := h.doKey("POST", "/v1/sessions", h.agent, "create-1", sessionBody).expect(t, 201, "")
		oAcme := h.token(checkpointd.RoleAgent, []string{"acme/widgets"})
		again := h.doKey("POST", "/v1/sessions", oAcme, "create-1", sessionBody).expect(t, 201, "")
		if again.header.Get("Idempotent-Replayed") != "" || again.str("session", "id") == created.str("session", "id") {
			t.Errorf("another token's key replayed the session: %s", again.raw)
		}
		h.doKey("POST", "/v1/sessions", o, "create-1", sessionBody).expect(t, 403, "forbidden")
	})
}

// TestIdempotencyKeyOnce: a request with two Idempotency-Key header lines
// names no one key (Go would join them as "a,b"): 400
// invalid_idempotency_key, and nothing is written.
func TestIdempotencyKeyOnce(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		id, run, tok := h.newSession()
		send := func(path string, body any, keys ...string) response {
			j, _ := json.Marshal(body)
			req := httptest.NewRequest("POST", path, bytes.NewReader(j))
			req.Header.Set("Authorization", "Bearer "+h.agent)
			req.Header.Set("Content-Type", "application/json")
			for _, k := range keys {
				req.Header.Add("Idempotency-Key", k)
			}
			rec := httptest.NewRecorder()
			h.serve(rec, req)
			r := response{status: rec.Code, header: rec.Header(), raw: rec.Body.Bytes()}
			_ = json.Unmarshal(r.raw, &r.body)
			return r
		}
		count := func() string {
			s := h.do("GET", "/v1/sessions?limit=500", h.operator, nil).expect(t, 200, "")
			c := h.do("GET", "/v1/sessions/"+id+"/checkpoints", h.operator, nil).expect(t, 200, "")
			return fmt.Sprintf("%d sessions, %d checkpoints", len(s.get("items").([]any)), len(c.get("items").([]any)))
		}
		before := count()
		for _, keys := range [][]string{{"a", "b"}, {"a", "a"}, {"a", ""}} {
			r := send("/v1/sessions", sessionBody, keys...).expect(t, 400, "invalid_idempotency_key")
			if !strings.Contains(r.str("detail"), "once") {
				t.Errorf("the detail does not say why: %s", r.raw)
			}
			send("/v1/sessions/"+id+"/checkpoints", checkpointDoc(run, tok), keys...).expect(t, 400, "invalid_idempotency_key")
		}
		if after := count(); after != before {
			t.Errorf("refused requests wrote: %s → %s", before, after)
		}
		// One line is one key, commas and all.
		send("/v1/sessions/"+id+"/checkpoints", checkpointDoc(run, tok), "a,b").expect(t, 201, "")
		send("/v1/sessions/"+id+"/checkpoints", checkpointDoc(run, tok), "a,b").expect(t, 200, "")
	})
}
