package main

import (
	"net/http"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
	"github.com/checkpointd/checkpointd/webhook/webhooktest"
)

// deliverPush sends a signed Gitea push of branch fix-12 of acme/widgets,
// moving it from before to after.
func deliverPush(t *testing.T, base, secret, delivery, before, after string) {
	t.Helper()
	webhooktest.Push(t, base, secret, delivery, "acme/widgets", "fix-12", before, after)
}

// TestServeReplicaStartKeepsValidity: the first replica to start resets
// every session to unverified (webhooks sent while the service was down
// are lost); a replica that starts while another serves and reconciles
// keeps validity as it is, and so does every answer about it.
func TestServeReplicaStartKeepsValidity(t *testing.T) {
	storetest.RequirePostgres(t)
	t.Parallel()
	dbURL := storetest.URL(t, storetest.Postgres)
	const secret = "replica-test-secret"
	env := environ{"CHECKPOINTD_KEY": "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=", "CHECKPOINTD_WEBHOOK_SECRET": secret}
	dirA := t.TempDir()
	a := startServe(t, env, storeArgs(dirA, dbURL)...)
	operator := readSecret(t, tokenPath(dirA))

	s := newSession(t, a.URL, operator)
	const head = "0123456789abcdef0123456789abcdef01234567" // checkpointDoc's head
	call(t, "POST", a.URL+"/v1/sessions/"+s.id+"/checkpoints", operator, checkpointDoc(s, "before b starts")).expect(t, http.StatusCreated)
	deliverPush(t, a.URL, secret, "d-1", "1111111111111111111111111111111111111111", head)
	validity := func(base string) string {
		return call(t, "GET", base+"/v1/sessions/"+s.id, operator, nil).expect(t, http.StatusOK).str("session", "validity")
	}
	if v := validity(a.URL); v != "valid" {
		t.Fatalf("after the push the session is %q, want valid", v)
	}

	b := startServe(t, env, storeArgs(t.TempDir(), dbURL)...)
	if v := validity(b.URL); v != "valid" {
		t.Errorf("a second replica's start made the session %q; a serves and reconciles, nothing was lost", v)
	}

	// Both stop; the next start is the first again: the service was down.
	if err := b.stop(); err != nil {
		t.Fatal(err)
	}
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	c := startServe(t, env, storeArgs(t.TempDir(), dbURL)...)
	if v := validity(c.URL); v != "unverified" {
		t.Errorf("after every replica stopped, a start left the session %q, want unverified", v)
	}
}
