package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReadEvents(t *testing.T) {
	stream := ": keep-alive\n\nid: 7\nevent: validity\ndata: {\"session_id\":\"ses_1\",\ndata: \"to\":\"stale\"}\n\nevent: reset\ndata: {\"reason\":\"too old\"}\n\n"
	var got []WatchEvent
	err := readEvents(strings.NewReader(stream), func(e WatchEvent) bool { got = append(got, e); return true })
	if err == nil || !strings.Contains(err.Error(), "ended") {
		t.Errorf("the end of a stream is a lost stream: %v", err)
	}
	if len(got) != 2 || got[0].ID != "7" || got[0].Type != "validity" || got[0].SessionID() != "ses_1" ||
		string(got[0].Data) != "{\"session_id\":\"ses_1\",\n\"to\":\"stale\"}" || got[1].Type != "reset" || got[1].ID != "" {
		t.Errorf("events %+v", got)
	}
	if v, ok := got[0].Event.(*ValidityEvent); !ok || v.SessionID != "ses_1" || v.To != "stale" {
		t.Errorf("the validity event decoded: %#v", got[0].Event)
	}
	if r, ok := got[1].Event.(*ResetEvent); !ok || r.Reason != "too old" {
		t.Errorf("the reset event decoded: %#v", got[1].Event)
	}
	for typ, data := range map[string]string{"future": `{"a":1}`, "lease": `{"lease_id": 5}`} {
		if e := decodeEvent(typ, []byte(data)); e != nil {
			t.Errorf("%s %s decoded as %#v, want nil (Data still has it)", typ, data, e)
		}
	}
}

// TestWatchResumes: a stream that breaks is reopened with the id of the
// last event the caller got, so nothing is missed or repeated; a problem
// answer ends the watch.
func TestWatchResumes(t *testing.T) {
	var mu sync.Mutex
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.Header.Get("Last-Event-ID"))
		mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		// Each connection sends two events after the one asked for, then breaks.
		from := 0
		fmt.Sscan(r.Header.Get("Last-Event-ID"), &from)
		for i := from + 1; i <= from+2; i++ {
			fmt.Fprintf(w, "id: %d\nevent: run\ndata: {\"session_id\":\"ses_%d\"}\n\n", i, i)
			w.(http.Flusher).Flush()
		}
	}))
	defer srv.Close()
	c, _ := New(Config{Address: srv.URL, Token: "tok", RetryWait: time.Millisecond, RetryMaxWait: 5 * time.Millisecond})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var ids []string
	for ev, err := range c.Watch(ctx, WatchOptions{LastEventID: "0"}) {
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, ev.ID)
		if len(ids) == 5 {
			break
		}
	}
	if strings.Join(ids, ",") != "1,2,3,4,5" {
		t.Errorf("events %v: want each once, in order", ids)
	}
	mu.Lock()
	if strings.Join(asked[:3], ",") != "0,2,4" {
		t.Errorf("Last-Event-ID sent %v", asked)
	}
	mu.Unlock()

	bad, _ := New(Config{Address: srv.URL, Token: "wrong"})
	for _, err := range bad.Watch(ctx, WatchOptions{}) {
		if p, ok := err.(*Error); !ok || p.Status != http.StatusUnauthorized {
			t.Errorf("a refused watch: %v", err)
		}
	}
}
