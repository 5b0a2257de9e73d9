package main

import (
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd/store/storetest"
)

var metricsAddrRE = regexp.MustCompile(`metrics_addr=(\S+)`)

func scrapeText(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServeMetrics: GET /metrics answers on the API listener by default,
// with the daemon's metrics (the request it just served counted); with
// --metrics-listen it answers there and no longer on the API listener.
func TestServeMetrics(t *testing.T) {
	d := startServe(t, nil, storeArgs(t.TempDir(), backendURL(t, storetest.SQLite))...)
	call(t, "GET", d.URL+"/v1/sessions", "", nil).expect(t, http.StatusUnauthorized)
	status, text := scrapeText(t, d.URL+"/metrics")
	if status != 200 || !strings.Contains(text, `checkpointd_http_requests_total{method="GET",route="/v1/sessions",status="4xx"} 1`) ||
		!strings.Contains(text, "go_goroutines") || !strings.Contains(text, `checkpointd_drain_state{state="none"} 1`) {
		t.Fatalf("GET /metrics on the API listener: %d\n%s", status, text)
	}

	env := environ{"CHECKPOINTD_METRICS_LISTEN": "127.0.0.1:0"}
	d2 := startServe(t, env, storeArgs(t.TempDir(), "")...)
	m := metricsAddrRE.FindStringSubmatch(d2.stderr.String())
	if m == nil || m[1] == "" {
		t.Fatalf("serve did not log its metrics address:\n%s", d2.stderr)
	}
	if status, text := scrapeText(t, "http://"+m[1]+"/metrics"); status != 200 || !strings.Contains(text, "checkpointd_drain_state") {
		t.Fatalf("GET /metrics on --metrics-listen: %d\n%s", status, text)
	}
	if status, _ := scrapeText(t, d2.URL+"/metrics"); status != http.StatusNotFound {
		t.Errorf("GET /metrics on the API listener with --metrics-listen: %d, want 404", status)
	}
	if err := d2.stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := http.Get("http://" + m[1] + "/metrics"); err == nil {
		t.Errorf("the metrics listener still answers after serve returned")
	}
}

// TestServeMetricsDrainAcrossReplicas: two replicas on one PostgreSQL; a
// drain started through one shows in the other's gauges at its next
// scrape, and its end too, though the other served no drain call.
func TestServeMetricsDrainAcrossReplicas(t *testing.T) {
	url := backendURL(t, storetest.Postgres)
	env := environ{"CHECKPOINTD_KEY": "k1 AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}
	dirA := t.TempDir()
	a := startServe(t, env, storeArgs(dirA, url)...)
	b := startServe(t, env, storeArgs(t.TempDir(), url)...)
	tok, err := os.ReadFile(tokenPath(dirA))
	if err != nil {
		t.Fatal(err)
	}
	op := strings.TrimSpace(string(tok))
	if _, text := scrapeText(t, b.URL+"/metrics"); !strings.Contains(text, `checkpointd_drain_state{state="none"} 1`) {
		t.Fatalf("before the drain, b says:\n%s", grepLines(text, "checkpointd_drain"))
	}
	call(t, "POST", a.URL+"/v1/drain", op, map[string]any{"reason": "deploy"}).expect(t, http.StatusCreated)
	if _, text := scrapeText(t, b.URL+"/metrics"); !strings.Contains(text, `checkpointd_drain_state{state="draining"} 1`) ||
		!strings.Contains(text, `checkpointd_drain_state{state="none"} 0`) {
		t.Fatalf("a drain started on a: b says:\n%s", grepLines(text, "checkpointd_drain"))
	}
	call(t, "POST", a.URL+"/v1/drain/cancel", op, nil).expect(t, http.StatusOK)
	if _, text := scrapeText(t, b.URL+"/metrics"); !strings.Contains(text, `checkpointd_drain_state{state="none"} 1`) {
		t.Fatalf("the drain cancelled on a: b says:\n%s", grepLines(text, "checkpointd_drain"))
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
