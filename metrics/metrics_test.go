package metrics_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/metrics"
)

// TestNilMetricsCountNothing: every method is safe on a nil *Metrics.
func TestNilMetricsCountNothing(t *testing.T) {
	var m *metrics.Metrics
	m.CheckpointWrite("ok", true, time.Second, 3)
	m.CheckpointRead(metrics.ReadGet, "ok")
	m.Idempotency(metrics.IdemReplayed)
	m.WebhookDelivery("push", "applied")
	m.WebhookAnswered(time.Millisecond)
	m.RefSettled(time.Millisecond)
	m.ValidityChanged("webhook", checkpointd.ValidityStale, 2)
	m.LeaseEvent("acquired")
	m.StoreError("read")
	m.ReconcilePass(metrics.PassOK, time.Second)
	m.ForgeCall("ok")
	m.SetDrainState(metrics.DrainDraining)
	m.SetDrainBlocking(3)
	m.DrainDecision("blocked")
	m.ErrorRecorded(checkpointd.ErrorSourceWebhook)
	m.ErrorDropped(checkpointd.ErrorSourceWebhook, metrics.DropRateLimited)
	m.HTTPRequest("GET", "/healthz", 200, time.Millisecond)
	m.SetWatchers(2)
	m.WatchDropped(metrics.WatchSlowClient)
	if m.Registry() != nil {
		t.Error("a nil Metrics has a registry")
	}
}

// TestUnknownLabelValuesAreOther: a value outside a label's fixed set is
// counted as "other", whatever it is.
func TestUnknownLabelValuesAreOther(t *testing.T) {
	m := metrics.New()
	m.WebhookDelivery("acme/secret-repo", "applied")
	m.WebhookDelivery("", "ses_0123")
	m.CheckpointWrite("ghp_abcdefghijklmnopqrstuvwxyz0123456789", false, 0, 0)
	m.ValidityChanged("someone", "weird", 1)
	m.HTTPRequest("BREW", "/v1/sessions", 418, time.Millisecond)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`checkpointd_webhook_deliveries_total{event="other",outcome="applied"} 1`,
		`checkpointd_webhook_deliveries_total{event="none",outcome="other"} 1`,
		`checkpointd_checkpoint_writes_total{outcome="other"} 1`,
		`checkpointd_validity_transitions_total{cause="other",to="other"} 1`,
		`checkpointd_http_requests_total{method="other",route="/v1/sessions",status="4xx"} 1`,
		`checkpointd_drain_state{state="none"} 1`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	for _, leak := range []string{"secret-repo", "ses_0123", "ghp_", "someone", "weird", "BREW"} {
		if strings.Contains(text, leak) {
			t.Errorf("exposition carries %q", leak)
		}
	}
}

// TestCountersStartAtZero: before any event, the labelled counters have a
// series at 0 for each known label value (an alert on increase() fires on
// the first event), and checkpointd_build_info says which build this is.
func TestCountersStartAtZero(t *testing.T) {
	m := metrics.New()
	m.SetBuildInfo("v1.4.0", "4adf5e7415fc014beb2be7286f19c1b523aec0ea", "go1.26.8")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	text := rec.Body.String()
	for _, want := range []string{
		`checkpointd_build_info{goversion="go1.26.8",revision="4adf5e7415fc014beb2be7286f19c1b523aec0ea",version="v1.4.0"} 1`,
		`checkpointd_checkpoint_writes_total{outcome="store_unavailable"} 0`,
		`checkpointd_checkpoint_reads_total{kind="resume",outcome="ok"} 0`,
		`checkpointd_webhook_deliveries_total{event="push",outcome="bad_signature"} 0`,
		`checkpointd_webhook_deliveries_total{event="none",outcome="missing_signature"} 0`,
		`checkpointd_validity_transitions_total{cause="webhook",to="invalidated"} 0`,
		`checkpointd_lease_events_total{event="expired"} 0`,
		`checkpointd_reconcile_passes_total{outcome="failed"} 0`,
		`checkpointd_reconcile_forge_calls_total{outcome="rate_limited"} 0`,
		`checkpointd_drain_decisions_total{outcome="failed"} 0`,
		`checkpointd_store_errors_total{op="write"} 0`,
		`checkpointd_store_retries_total{reason="conflict"} 0`,
		`checkpointd_errors_dropped_total{reason="store_failed",source="webhook"} 0`,
		`checkpointd_watch_dropped_total{reason="memory_budget"} 0`,
		`checkpointd_idempotency_total{result="conflict"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing %s", want)
		}
	}
	m.SetBuildInfo("v1.4.1", "", "go1.26.8")
	rec = httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if n := strings.Count(rec.Body.String(), "\ncheckpointd_build_info{"); n != 1 {
		t.Errorf("%d checkpointd_build_info series after a second SetBuildInfo, want 1", n)
	}
}

// TestTableRows: the dead and live rows by table, read once per 30 s
// whatever the scrapes; a failed read drops them rather than show stale
// numbers; no rows (SQLite) exports none.
func TestTableRows(t *testing.T) {
	m := metrics.New()
	clock := checkpointd.NewManualClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	reads, fail := 0, false
	rows := []metrics.TableRows{{Table: "sessions", Live: 9635, Dead: 176295}}
	m.WatchTableRows(func(context.Context) ([]metrics.TableRows, error) {
		reads++
		if fail {
			return nil, errors.New("down")
		}
		return rows, nil
	}, clock)
	scrape := func() string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	text := scrape()
	for _, want := range []string{`checkpointd_store_dead_rows{table="sessions"} 176295`, `checkpointd_store_live_rows{table="sessions"} 9635`} {
		if !strings.Contains(text, want) {
			t.Errorf("scrape lacks %s", want)
		}
	}
	scrape()
	clock.Advance(29 * time.Second)
	scrape()
	if reads != 1 {
		t.Errorf("%d reads within 30 s, want 1", reads)
	}
	fail = true
	clock.Advance(2 * time.Second)
	if text := scrape(); strings.Contains(text, "checkpointd_store_dead_rows{") || reads != 2 {
		t.Errorf("after a failed read (%d reads): %s", reads, text)
	}
	fail, rows = false, nil
	clock.Advance(31 * time.Second)
	if text := scrape(); strings.Contains(text, "checkpointd_store_dead_rows{") {
		t.Errorf("no rows exported some: %s", text)
	}
}
