package inproc_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd/internal/inproc"
)

func TestRoundTrip(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Header.Get("Authorization")+"|"+r.URL.RawQuery+"|"+r.RemoteAddr)
		w.WriteHeader(http.StatusTeapot)
		w.Write(append([]byte("got "), b...))
	})
	c := &http.Client{Transport: &inproc.Transport{Handler: h}}
	req, _ := http.NewRequestWithContext(t.Context(), "POST", "http://daemon/v1/x?a=1", strings.NewReader("body"))
	req.Header.Set("Authorization", "Bearer t")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusTeapot || string(b) != "got body" || resp.Header.Get("X-Seen") != "Bearer t|a=1|inproc" {
		t.Errorf("status %d body %q header %q", resp.StatusCode, b, resp.Header.Get("X-Seen"))
	}
}

// TestStreams: a streaming handler's writes arrive as they are made, and
// closing the body ends the handler's request.
func TestStreams(t *testing.T) {
	ended := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; ; i++ {
			if _, err := io.WriteString(w, "data: tick\n\n"); err != nil {
				ended <- err
				return
			}
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	c := &http.Client{Transport: &inproc.Transport{Handler: h}}
	resp, err := c.Get("http://daemon/v1/watch")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	for n := 0; n < 3; {
		if !sc.Scan() {
			t.Fatal("stream ended early", sc.Err())
		}
		if sc.Text() == "data: tick" {
			n++
		}
	}
	resp.Body.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Error("the handler ended without an error")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("closing the body did not end the handler")
	}
}

// TestContextEndsBeforeHeader: a request whose context ends before the
// handler answers returns the context's error.
func TestContextEndsBeforeHeader(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c := &http.Client{Transport: &inproc.Transport{Handler: h}, Timeout: 50 * time.Millisecond}
	_, err := c.Get("http://daemon/slow")
	var ue *url.Error
	if !errors.As(err, &ue) || !ue.Timeout() {
		t.Fatalf("want a timeout, got %v", err)
	}
}

type key struct{}

// TestCallerValuesStayOut: the handler sees none of the caller's context
// values (a router's would misroute it), but the caller's cancellation.
func TestCallerValuesStayOut(t *testing.T) {
	seen := make(chan any, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen <- r.Context().Value(key{}) })
	ctx := context.WithValue(t.Context(), key{}, "outer")
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://daemon/x", nil)
	resp, err := (&inproc.Transport{Handler: h}).RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if v := <-seen; v != nil {
		t.Errorf("the handler saw the caller's value %v", v)
	}
}

// TestPanicStaysInTheRequest: a handler that panics fails its request
// with a 500, not the process.
func TestPanicStaysInTheRequest(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { panic("boom") })
	resp, err := (&http.Client{Transport: &inproc.Transport{Handler: h}}).Get("http://daemon/x")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if _, err := io.ReadAll(resp.Body); resp.StatusCode != http.StatusInternalServerError || err == nil {
		t.Errorf("status %d, body error %v", resp.StatusCode, err)
	}
}
