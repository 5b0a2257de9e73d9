package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// WatchOptions filter the change feed (GET /v1/watch).
type WatchOptions struct {
	// Session keeps one session's changes; Repo an owner/name or owner/*.
	Session, Repo string
	// LastEventID resumes after that event (an ID a previous watch
	// yielded): the feed sends what came after it, with no gap and no
	// duplicate, or a reset event when it no longer reaches that far.
	LastEventID string
}

// WatchEvent is one event of the change feed.
type WatchEvent struct {
	// ID is the event's resume position (send it back as
	// WatchOptions.LastEventID); empty for events that have none.
	ID string
	// Type is the SSE event type: validity, lease, run, checkpoint,
	// session, drain, or reset (the feed could not resume: re-read the
	// state; the events after it are the current state, then live).
	Type string
	// Data is the event's JSON.
	Data json.RawMessage
	// Event is Data decoded by Type: *ValidityEvent, *LeaseEvent,
	// *RunEvent, *CheckpointEvent, *SessionEvent, *DrainEvent, *ResetEvent
	// or *ErrorEvent; nil for a type this client does not know (Data
	// still has it). A type switch reads it:
	//
	//	switch e := ev.Event.(type) {
	//	case *client.ValidityEvent:
	//		if e.To != checkpointd.ValidityValid { … }
	//	case *client.LeaseEvent:
	//		…
	//	}
	Event any
}

// SessionID is the session the event is about ("" for drain and reset).
func (e WatchEvent) SessionID() string {
	var d struct {
		SessionID string `json:"session_id"`
	}
	_ = json.Unmarshal(e.Data, &d)
	return d.SessionID
}

// Watch follows the change feed until ctx ends or the caller stops,
// reconnecting after a lost stream from the last event it yielded
// (Last-Event-ID), with a bounded backoff. A problem answer (401, 403, 404,
// 422) ends the watch with that *Error: it would not go away by retrying.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) iter.Seq2[WatchEvent, error] {
	return func(yield func(WatchEvent, error) bool) {
		last := opts.LastEventID
		for try := 1; ; {
			n, err := c.watchOnce(ctx, opts, &last, yield)
			if errors.Is(err, errStopped) {
				return
			}
			if ctx.Err() != nil {
				return
			}
			var p *Error
			if errors.As(err, &p) && !transient(p) {
				yield(WatchEvent{}, err)
				return
			}
			if n > 0 {
				try = 1 // the stream worked: the next loss starts the backoff again
			}
			t := time.NewTimer(c.backoff(try))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			try++
		}
	}
}

var errStopped = errors.New("the caller stopped")

// watchOnce reads one stream, updating *last with each event's id; it
// returns how many events it yielded and why the stream ended.
func (c *Client) watchOnce(ctx context.Context, opts WatchOptions, last *string, yield func(WatchEvent, error) bool) (int, error) {
	q := url.Values{}
	if opts.Session != "" {
		q.Set("session", opts.Session)
	}
	if opts.Repo != "" {
		q.Set("repo", opts.Repo)
	}
	r := &request{method: http.MethodGet, path: "/v1/watch", query: q}
	req, err := c.newHTTPRequest(ctx, r)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return 0, newError(r, &answer{status: resp.StatusCode, header: resp.Header, body: body})
	}
	n := 0
	err = readEvents(resp.Body, func(ev WatchEvent) bool {
		if ev.ID != "" {
			*last = ev.ID
		}
		n++
		return yield(ev, nil)
	})
	return n, err
}

// readEvents parses a text/event-stream (the subset the daemon sends:
// id, event, data, comments) and calls emit per event until the stream
// ends (io.EOF is returned as a lost stream) or emit returns false.
func readEvents(body io.Reader, emit func(WatchEvent) bool) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var ev WatchEvent
	var data strings.Builder
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			if data.Len() > 0 || ev.Type != "" {
				ev.Data = json.RawMessage(data.String())
				if ev.Type == "" {
					ev.Type = "message"
				}
				ev.Event = decodeEvent(ev.Type, ev.Data)
				if !emit(ev) {
					return errStopped
				}
			}
			ev, data = WatchEvent{}, strings.Builder{}
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a keep-alive comment
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			ev.ID = value
		case "event":
			ev.Type = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the watch stream ended: %w", io.ErrUnexpectedEOF)
}
