package ui

import (
	"io"
	"net/http"
	"time"
)

// liveSessionCheck is how often a relayed feed asks the store whether its
// console session still lives: not at every event.
const liveSessionCheck = 2 * time.Second

// events relays the change feed (GET /v1/watch) to the signed-in browser:
// EventSource cannot send a bearer token, so the console asks with the
// session's token and passes the stream on; the feed's own scope filter
// applies. A resume id (Last-Event-ID) is passed through.
func (c *console) events(w http.ResponseWriter, r *http.Request) {
	s := sessionOf(r)
	req, err := http.NewRequestWithContext(r.Context(), "GET", "http://checkpointd.inproc/v1/watch", nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		req.Header.Set("Last-Event-ID", id)
	}
	resp, err := c.transport(s).RoundTrip(req)
	if err != nil {
		return // the browser went away
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusUnauthorized {
		_ = c.sessions.end(r.Context(), s.id)
	}
	if resp.StatusCode != http.StatusOK {
		w.WriteHeader(resp.StatusCode) // EventSource stops on an error status
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	buf := make([]byte, 16<<10)
	checked := time.Now()
	for {
		n, err := resp.Body.Read(buf)
		// A session signed out (on any replica) stops hearing within
		// liveSessionCheck; the API's own re-authentication ends a
		// revoked token's stream.
		if time.Since(checked) >= liveSessionCheck {
			if cur, err := c.sessions.get(r.Context(), s.id); err != nil || cur == nil {
				return
			}
			checked = time.Now()
		}
		if n > 0 {
			// A browser that stops reading (a laptop asleep) is let go
			// like the API lets go of any slow client.
			_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err == io.EOF || err != nil {
			return
		}
	}
}
