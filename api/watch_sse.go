package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// sse writes Server-Sent Events, one flush per batch of events. Every write has a
// deadline: a client that stops reading fails the write instead of
// holding the handler (and so its buffer) forever.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	// timedOut records that a write hit its deadline: the client stopped
	// reading (a drop, counted), rather than went away.
	timedOut bool
	// aborted is set by abort, from the hub's goroutine.
	aborted atomic.Bool
}

// abort makes the write in progress, and every later one, fail at once: the
// hub dropped the stream and its client is not waited for. Safe to call
// from any goroutine.
func (s *sse) abort() {
	s.aborted.Store(true)
	_ = s.rc.SetWriteDeadline(time.Unix(1, 0))
}

// writeError is a write to the client that failed: it is gone, or it
// stopped reading (timeout).
type writeError struct {
	err     error
	timeout bool
}

func (e *writeError) Error() string { return "write to the watch client: " + e.err.Error() }

// watchSendBuffer bounds the kernel's send buffer of a watch stream's
// connection. Left to autotuning it grows to megabytes: a client that
// stopped reading would look alive for as long as that takes to fill, at
// that cost in kernel memory per stream. 256 KiB still carries a busy
// feed over a 100 ms round trip.
const watchSendBuffer = 256 << 10

type connKey struct{}

// ConnContext, as an http.Server's ConnContext, lets a watch stream reach
// its connection to bound its send buffer (watchSendBuffer). Without it a
// stream works the same, with the kernel's default buffer.
func ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// boundSendBuffer applies watchSendBuffer to the request's connection.
func boundSendBuffer(r *http.Request) {
	c, _ := r.Context().Value(connKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if tcp, ok := c.(*net.TCPConn); ok {
		_ = tcp.SetWriteBuffer(watchSendBuffer)
	}
}

func newSSE(w http.ResponseWriter, timeout time.Duration) *sse {
	rc := http.NewResponseController(w)
	// A stream outlives the server's ReadTimeout, which would otherwise
	// end it: the read deadline only guards reading the request.
	_ = rc.SetReadDeadline(time.Time{})
	return &sse{w: w, rc: rc, timeout: timeout}
}

// comment writes a comment line (keep-alives; clients ignore them).
func (s *sse) comment(text string) error {
	return s.frames([][]byte{[]byte(": " + text + "\n\n")})
}

// event writes one event; id "" leaves the client's last id as it was.
func (s *sse) event(id, typ string, data any) error {
	frame, err := sseFrame(id, typ, data)
	if err != nil {
		return err
	}
	return s.frames([][]byte{frame})
}

// sseFrame is one event's lines.
func sseFrame(id, typ string, data any) ([]byte, error) {
	b, err := json.Marshal(data)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(b) + len(id) + len(typ) + 24)
	if id != "" {
		buf.WriteString("id: " + id + "\n")
	}
	buf.WriteString("event: " + typ + "\n")
	buf.WriteString("data: ")
	buf.Write(b) // JSON has no raw newline
	buf.WriteString("\n\n")
	return buf.Bytes(), nil
}

// feedFrame is a change's frame, as every stream that wants it sends it.
func feedFrame(e store.FeedEvent) []byte {
	frame, err := sseFrame(e.Pos.String(), feedType(e), feedData(e))
	if err != nil { // cannot happen: feedData is maps of JSON values
		frame, _ = sseFrame(e.Pos.String(), feedType(e), map[string]any{"session_id": e.SessionID})
	}
	return frame
}

// frames writes events as they are, then flushes once.
func (s *sse) frames(frames [][]byte) error {
	return s.write(func() error {
		for _, f := range frames {
			if _, err := s.w.Write(f); err != nil {
				return err
			}
		}
		return nil
	})
}

// write runs put and flushes, under one deadline.
func (s *sse) write(put func() error) error {
	deadline := time.Now().Add(s.timeout)
	_ = s.rc.SetWriteDeadline(deadline)
	if s.aborted.Load() { // after setting it: an abort in between still wins
		_ = s.rc.SetWriteDeadline(time.Unix(1, 0))
	}
	err := put()
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
