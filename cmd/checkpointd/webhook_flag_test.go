package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/webhook/webhooktest"
)

// TestServeWebhookMaxBody: --webhook-max-body-bytes reaches the webhook
// endpoint (a signed delivery over it is refused with 413, one under it is
// taken), and a cap that is not positive stops the start.
func TestServeWebhookMaxBody(t *testing.T) {
	t.Parallel()
	const secret = "max-body-secret"
	env := environ{"CHECKPOINTD_WEBHOOK_SECRET": secret}
	d := startServe(t, env, "--data-dir", t.TempDir(), "--webhook-max-body-bytes", "400")
	post := func(id string, pad int) (int, string) {
		body, _ := json.Marshal(map[string]any{"ref": "refs/tags/v1", "before": strings.Repeat("0", 40),
			"after": strings.Repeat("1", 40), "repository": map[string]any{"id": 7, "full_name": "acme/widgets"},
			"pad": strings.Repeat(" ", pad)})
		status, raw := webhooktest.Post(t, d.URL, secret, "push", id, body)
		var p struct{ Code string }
		_ = json.Unmarshal(raw, &p)
		return status, p.Code
	}
	if code, problem := post("over-the-cap", 500); code != http.StatusRequestEntityTooLarge || problem != "payload_too_large" {
		t.Errorf("delivery over the cap: %d %s, want 413 payload_too_large", code, problem)
	}
	if code, problem := post("under-the-cap", 10); code != http.StatusOK {
		t.Errorf("delivery under the cap: %d %s, want 200", code, problem)
	}
	for _, bad := range []string{"0", "-1"} {
		err := serveRefused(t, env, "--data-dir", t.TempDir(), "--webhook-max-body-bytes", bad)
		if !strings.Contains(err.Error(), "--webhook-max-body-bytes must be positive") {
			t.Errorf("--webhook-max-body-bytes %s: %v", bad, err)
		}
	}
}

// TestServeGiteaRateRefused: a forge rate that is not a positive number
// of requests a second stops the start, naming the flag.
func TestServeGiteaRateRefused(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"0", "-5", "NaN", "+Inf"} {
		err := serveRefused(t, nil, "--data-dir", t.TempDir(), "--gitea-url", "http://127.0.0.1:1", "--gitea-rate", bad)
		if !strings.Contains(err.Error(), "--gitea-rate must be a positive number") {
			t.Errorf("--gitea-rate %s: %v", bad, err)
		}
	}
}
