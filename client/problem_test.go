package client_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestProblems decodes the daemon's problem answers: status, code, the
// problem paths, the sentinel of the code, and the code's extra members.
func TestProblems(t *testing.T) {
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		d := newDaemon(t, b)
		ctx := t.Context()
		agent, op := d.client(t, d.agent), d.client(t, d.operator)
		s := newSession(t, agent)
		old := s.Run
		if _, err := agent.Sessions().Takeover(ctx, s.Session.ID, "crash", testAgent); err != nil {
			t.Fatal(err)
		}
		gone := newSession(t, agent)
		if err := op.Sessions().Clear(ctx, gone.Session.ID, "stuck"); err != nil {
			t.Fatal(err)
		}
		badToken := d.client(t, "not-a-token")
		outsider := d.client(t, d.outsider)

		for _, tc := range []struct {
			name     string
			call     func() error
			status   int
			code     string
			sentinel error
			paths    []string
		}{
			{"not found", func() error { _, err := agent.Sessions().Get(ctx, "ses_nosuchsession"); return err },
				http.StatusNotFound, "not_found", checkpointd.ErrNotFound, nil},
			{"run superseded", func() error {
				_, err := agent.Checkpoints().Write(ctx, s.Session.ID, doc(old, "implementing"), nil)
				return err
			}, http.StatusConflict, "run_superseded", checkpointd.ErrRunSuperseded, nil},
			{"invalid request", func() error {
				_, err := agent.Sessions().Create(ctx, &client.CreateSessionRequest{Repo: "no-slash", Role: "nobody"}, nil)
				return err
			}, http.StatusUnprocessableEntity, "invalid_request", checkpointd.ErrInvalidRequest, []string{"/repo", "/role"}},
			{"invalid checkpoint", func() error {
				dc := doc(old, "implementing")
				dc.SchemaVersion, dc.Role = 7, ""
				_, err := agent.Checkpoints().Write(ctx, s.Session.ID, dc, nil)
				return err
			}, http.StatusUnprocessableEntity, "invalid_checkpoint", checkpointd.ErrInvalidCheckpoint, []string{"/role", "/schema_version"}},
			{"gone", func() error { _, err := agent.Sessions().Resume(ctx, gone.Session.ID, ""); return err },
				http.StatusGone, "gone", checkpointd.ErrGone, nil},
			{"unauthorized", func() error { _, err := badToken.Sessions().Get(ctx, s.Session.ID); return err },
				http.StatusUnauthorized, "unauthorized", checkpointd.ErrUnauthorized, nil},
			{"out of scope", func() error { _, err := outsider.Sessions().Get(ctx, s.Session.ID); return err },
				http.StatusForbidden, "forbidden", checkpointd.ErrForbidden, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := tc.call()
				p := expectCode(t, err, tc.status, tc.code)
				if !errors.Is(err, tc.sentinel) {
					t.Errorf("errors.Is(%v, %v) is false", err, tc.sentinel)
				}
				if !strings.Contains(err.Error(), tc.code) {
					t.Errorf("message %q does not name the code", err.Error())
				}
				if p.Method == "" || p.Path == "" || len(p.Body) == 0 || p.Title == "" {
					t.Errorf("problem without its request or body: %+v", p)
				}
				var te *client.TransportError
				if errors.As(err, &te) {
					t.Errorf("a problem answer is also a transport error: %v", te)
				}
				if tc.paths != nil {
					got := problemPaths(p)
					for i := range got {
						got[i] = strings.SplitN(got[i], "/", 3)[1] // "/role" and "/role/…" alike
						got[i] = "/" + got[i]
					}
					if diff := cmp.Diff(tc.paths, dedupe(got)); diff != "" {
						t.Errorf("problem paths (-want +got):\n%s\n%v", diff, p.Problems)
					}
				}
			})
		}

		// A 410 tells an agent in scope which session and how it went; an
		// operator gets the whole audit record.
		_, err := agent.Sessions().Get(ctx, gone.Session.ID)
		ts := expectCode(t, err, http.StatusGone, "gone").Tombstone()
		if ts == nil || ts.SessionID != gone.Session.ID || ts.Kind != checkpointd.TombstoneCleared || ts.At.IsZero() || ts.By != "" {
			t.Errorf("agent's tombstone %+v", ts)
		}
		_, err = op.Checkpoints().Latest(ctx, gone.Session.ID)
		ts = expectCode(t, err, http.StatusGone, "gone").Tombstone()
		if ts == nil || ts.Reason != "stuck" || ts.By == "" || ts.Repo != "acme/widgets" {
			t.Errorf("operator's tombstone %+v", ts)
		}
		// The accessors of other codes are nil on a gone.
		p := asProblem(t, err)
		if p.Holder() != nil || p.Blocked() != nil || p.RunningDrain() != nil {
			t.Error("a gone problem answered another code's accessor")
		}
	})
}

func dedupe(s []string) []string {
	var out []string
	for _, v := range s {
		if len(out) == 0 || out[len(out)-1] != v {
			out = append(out, v)
		}
	}
	return out
}

// TestNonProblemAnswer: an error answer that is no problem document (a
// proxy's page) is an *Error with the status and no code.
func TestNonProblemAnswer(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	var sent http.Header
	rt := roundTrip(func(r *http.Request) (*http.Response, error) {
		sent = r.Header.Clone()
		resp := problemAnswer(http.StatusTeapot, "x")
		resp.Header.Set("Content-Type", "text/html")
		resp.Request = r
		return resp, nil
	})
	_, err := d.client(t, d.agent, via(rt)).Sessions().Get(t.Context(), "ses_x")
	p := asProblem(t, err)
	if p.Status != http.StatusTeapot || p.Code != "" || p.Title != http.StatusText(http.StatusTeapot) || p.Unwrap() != nil {
		t.Errorf("problem %+v", p)
	}
	if sent.Get("Authorization") != "Bearer "+d.agent || sent.Get("User-Agent") != client.DefaultUserAgent {
		t.Errorf("sent Authorization %q, User-Agent %q", sent.Get("Authorization"), sent.Get("User-Agent"))
	}
}
