package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// sse writes Server-Sent Events, one flush per event. Every write has a
// deadline: a client that stops reading fails the write instead of
// holding the handler (and so its buffer) forever.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
	// timedOut records that a write hit its deadline: the client stopped
	// reading (a drop, counted), rather than went away.
	timedOut bool
}

// writeError is a write to the client that failed: it is gone, or it
// stopped reading (timeout).
type writeError struct {
	err     error
	timeout bool
}

func (e *writeError) Error() string { return "write to the watch client: " + e.err.Error() }

func newSSE(w http.ResponseWriter, timeout time.Duration) *sse {
	rc := http.NewResponseController(w)
	// A stream outlives the server's ReadTimeout, which would otherwise
	// end it: the read deadline only guards reading the request.
	_ = rc.SetReadDeadline(time.Time{})
	return &sse{w: w, rc: rc, timeout: timeout}
}

// comment writes a comment line (keep-alives; clients ignore them).
func (s *sse) comment(text string) error {
	s.buf.Reset()
	s.buf.WriteString(": " + text + "\n\n")
	return s.flush()
}

// event writes one event; id "" leaves the client's last id as it was.
func (s *sse) event(id, typ string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	s.buf.Reset()
	if id != "" {
		s.buf.WriteString("id: " + id + "\n")
	}
	s.buf.WriteString("event: " + typ + "\n")
	s.buf.WriteString("data: ")
	s.buf.Write(b) // JSON has no raw newline
	s.buf.WriteString("\n\n")
	return s.flush()
}

func (s *sse) flush() error {
	deadline := time.Now().Add(s.timeout)
	_ = s.rc.SetWriteDeadline(deadline)
	_, err := s.w.Write(s.buf.Bytes())
	if err == nil {
		err = s.rc.Flush()
	}
	if err != nil {
		// net/http may report a timed-out write as a plain failure of the
		// connection; the clock says which it was.
		timeout := errors.Is(err, os.ErrDeadlineExceeded) || !time.Now().Before(deadline)
		s.timedOut = s.timedOut || timeout
		return &writeError{err: err, timeout: timeout}
	}
	return nil
}

// feedType is the SSE event type of a change.
func feedType(e store.FeedEvent) string {
	if e.DrainID != "" {
		return checkpointd.FeedDrain
	}
	k, _ := checkpointd.FeedKindOf(e.Kind)
	return k.Type
}

// feedData is the JSON of a change: what its event log row says, with the
// session, repo, run, time and log seq on top (docs/watch.md). A validity
// change groups what it was judged on under evidence.
func feedData(e store.FeedEvent) map[string]any {
	if e.DrainID != "" {
		return map[string]any{"drain_id": e.DrainID, "change": strings.TrimPrefix(e.Kind, "drain."), "at": e.At}
	}
	var logged map[string]any
	_ = json.Unmarshal(e.Data, &logged) // the store wrote it; unreadable is empty
	out := map[string]any{}
	k, _ := checkpointd.FeedKindOf(e.Kind)
	if k.Type == checkpointd.FeedValidity {
		evidence := map[string]any{}
		for key, v := range logged {
			switch key {
			case "from", "to", "reason":
				out[key] = v
			default:
				evidence[key] = v
			}
		}
		out["evidence"] = evidence
	} else {
		for key, v := range logged {
			out[key] = v
		}
	}
	out["session_id"], out["repo"], out["at"], out["event_seq"] = e.SessionID, e.Repo, e.At, e.Seq
	if e.RunID != "" {
		out["run_id"] = e.RunID
	}
	if k.Change != "" {
		out["change"] = k.Change
	}
	return out
}
