package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// TestRedirectsAreNeverFollowed: a 307 would resend the body and the bearer
// token to wherever Location points (another port of the same host here);
// a 302 would turn the POST into a GET whose 200 reads as a lease acquired.
// The client follows neither, whatever http.Client it was given: a 3xx is
// an *Error with its status, and nothing reaches the other side.
func TestRedirectsAreNeverFollowed(t *testing.T) {
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"lease":{"id":"lse_x","fencing_token":1}}`)
	}))
	t.Cleanup(other.Close)
	for _, status := range []int{http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusSeeOther} {
		redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, other.URL+"/v1/leases?token=s3cret", status)
		}))
		t.Cleanup(redirecting.Close)
		for _, hc := range []struct {
			name string
			c    *http.Client
		}{{"the default client", nil}, {"a caller's client that follows", &http.Client{}}} {
			c, err := client.New(client.Config{Address: redirecting.URL, Token: "cpd_secret", HTTPClient: hc.c})
			if err != nil {
				t.Fatal(err)
			}
			lease, err := c.Leases().Acquire(t.Context(), &client.AcquireRequest{
				Resource: checkpointd.Resource{Repo: "acme/widgets", Kind: checkpointd.ResourceIssue, Number: 1}, SessionID: "ses_x", RunID: "run_x", TTLSeconds: 60})
			var ce *client.Error
			if !errors.As(err, &ce) || ce.Status != status || lease != nil {
				t.Fatalf("%d via %s: lease %v, err %v; want an *Error with status %d", status, hc.name, lease, err, status)
			}
			if !strings.Contains(ce.Error(), "redirect") || strings.Contains(ce.Error(), "s3cret") {
				t.Errorf("%d via %s: the error %q should say redirect and not carry the query", status, hc.name, ce.Error())
			}
			var werr error
			for _, err := range c.Watch(t.Context(), client.WatchOptions{}) {
				werr = err
				break
			}
			if !errors.As(werr, &ce) || ce.Status != status {
				t.Errorf("%d via %s: the watch feed yields %v, want an *Error with status %d", status, hc.name, werr, status)
			}
			if hc.c != nil && hc.c.CheckRedirect != nil {
				t.Errorf("the caller's http.Client was changed")
			}
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("%d requests reached the redirect's target", n)
	}
}
