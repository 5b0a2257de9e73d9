package client_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// TestTokens mints a token through the client, uses it, finds it in the
// list without its secret, revokes it and sees it refused.
func TestTokens(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	ctx := t.Context()
	op := d.client(t, d.operator)

	_, err := op.Tokens().Create(ctx, client.TokenRequest{Role: checkpointd.RoleAgent, Name: "no scope"})
	expectCode(t, err, http.StatusUnprocessableEntity, "invalid_request")

	m, err := op.Tokens().Create(ctx, client.TokenRequest{Role: checkpointd.RoleAgent, Name: "ci", Scopes: []string{"acme/*"},
		ExpiresIn: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if m.Secret == "" || m.Token.ExpiresAt == nil || time.Until(*m.Token.ExpiresAt) < 23*time.Hour || m.Token.Scope[0] != "acme/*" {
		t.Fatalf("minted %+v", m)
	}
	agent := d.client(t, m.Secret)
	newSession(t, agent)

	// last_used_at is written in the background, soon after the use.
	found := false
	for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for tk, err := range op.Tokens().All(ctx, client.ListOptions{Limit: 2}) {
			if err != nil {
				t.Fatal(err)
			}
			if tk.ID == m.Token.ID {
				found = tk.LastUsedAt != nil && tk.Name == "ci"
			}
		}
	}
	if !found {
		t.Errorf("the list lacks the used token %s with its last use", m.Token.ID)
	}

	if err := op.Tokens().Revoke(ctx, m.Token.ID); err != nil {
		t.Fatal(err)
	}
	_, err = agent.Sessions().List(ctx, client.SessionListOptions{})
	expectCode(t, err, http.StatusUnauthorized, "unauthorized")
	expectCode(t, op.Tokens().Revoke(ctx, m.Token.ID), http.StatusNotFound, "not_found")
}
