// Package webhooktest sends signed Gitea deliveries to a daemon under test:
// what a forge does, for tests of what a delivery changes elsewhere (the
// console, MCP subscriptions, the CLI). Tests of the webhook handler itself
// replay the captured deliveries in webhook/testdata byte for byte.
package webhooktest

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"testing"
)

// Post posts body to base's /webhooks/gitea as a Gitea delivery of event,
// signed with secret, and returns the answer's status and body.
func Post(t testing.TB, base, secret, event, delivery string, body []byte) (int, []byte) {
	t.Helper()
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	req, err := http.NewRequest("POST", base+"/webhooks/gitea", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gitea-Event", event)
	req.Header.Set("X-Gitea-Event-Type", event)
	req.Header.Set("X-Gitea-Delivery", delivery)
	req.Header.Set("X-Gitea-Signature", hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, raw
}

// Push delivers a signed push moving branch of repo (repository id 7)
// from before to after, and fails the test unless it is accepted.
func Push(t testing.TB, base, secret, delivery, repo, branch, before, after string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"ref": "refs/heads/" + branch, "before": before, "after": after,
		"repository": map[string]any{"id": 7, "full_name": repo}})
	if status, raw := Post(t, base, secret, "push", delivery, body); status != http.StatusOK {
		t.Fatalf("push delivery %s: %d %s", delivery, status, raw)
	}
}
