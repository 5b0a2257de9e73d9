package main

import (
	"io"
	"net/http"
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
