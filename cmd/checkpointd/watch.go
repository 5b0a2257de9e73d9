package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
)

// watchCommand prints the change feed of a running daemon (GET /v1/watch,
// docs/watch.md): one line per change for a person, or one JSON object per
// line. It reconnects with Last-Event-ID when the stream ends, so nothing
// is missed or printed twice across a daemon restart.
func watchCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	flags := operatorFlags(from, clientFlags, 30*time.Second, "how long connecting may take (the stream itself has no limit)", true)
	return &cli.Command{
		Name:  "watch",
		Usage: "print what changes, as it changes (GET /v1/watch)",
		Flags: flags(
			&cli.StringFlag{Name: "session", Usage: "only this session's changes"},
			&cli.StringFlag{Name: "repo", Usage: "only this repo's changes: owner/name or owner/*"},
			&cli.IntFlag{Name: "count", Usage: "exit after this many changes (0: until interrupted)"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			dc, err := newReaderClient(c)
			if err != nil {
				return err
			}
			q := url.Values{}
			for _, f := range []string{"session", "repo"} {
				if v := c.String(f); v != "" {
					q.Set(f, v)
				}
			}
			p := &watchPrinter{w: stdout, json: c.Bool("json"), left: c.Int("count")}
			return watchLoop(ctx, dc, "/v1/watch?"+q.Encode(), c.Duration("request-timeout"), p)
		},
	}
}

// sseEvent is one event of the stream.
type sseEvent struct{ ID, Type, Data string }

var errWatchDone = errors.New("enough events")

// watchLoop streams and reconnects (1 s, doubling to 30 s) until ctx ends
// or the printer has had enough. A refusal (4xx) is final: retrying would
// be refused the same way.
func watchLoop(ctx context.Context, dc *daemonClient, path string, connect time.Duration, p *watchPrinter) error {
	lastID, wait := "", time.Second
	for {
		got, err := streamOnce(ctx, dc, path, lastID, connect, func(e sseEvent) error {
			if e.ID != "" {
				lastID = e.ID
			}
			return p.print(e)
		})
		switch {
		case errors.Is(err, errWatchDone):
			return nil
		case ctx.Err() != nil:
			return nil
		case errors.As(err, new(*refusedError)):
			return err
		}
		if got {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// refusedError is a watch request the daemon refused.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

// streamOnce is the one function here that speaks HTTP: it opens the
// stream from lastID and hands each event to fn until the stream ends. got
// reports whether any event arrived.
func streamOnce(ctx context.Context, dc *daemonClient, path, lastID string, connect time.Duration, fn func(sseEvent) error) (got bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, dc.base+path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+dc.token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	client := &http.Client{Transport: &http.Transport{ResponseHeaderTimeout: connect}}
	resp, err := client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		msg := "watch: " + describeStatus(resp.StatusCode, raw)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return false, &refusedError{msg}
		}
		return false, errors.New(msg)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var e sseEvent
	for sc.Scan() {
		line := sc.Text()
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if e.Type != "" || e.Data != "" {
				got = true
				if err := fn(e); err != nil {
					return got, err
				}
			}
			e = sseEvent{}
		case field == "id":
			e.ID = value
		case field == "event":
			e.Type = value
		case field == "data":
			e.Data = value
		}
	}
	return got, sc.Err()
}

// watchPrinter prints events, as lines for a person or as JSON.
type watchPrinter struct {
	w    io.Writer
	json bool
	left int // 0: no limit
}

func (p *watchPrinter) print(e sseEvent) error {
	var data map[string]any
	_ = json.Unmarshal([]byte(e.Data), &data)
	if p.json {
		b, err := json.Marshal(map[string]any{"id": e.ID, "type": e.Type, "data": json.RawMessage(orEmpty(e.Data))})
		if err != nil {
			return err
		}
		fmt.Fprintln(p.w, string(b))
	} else {
		fmt.Fprintln(p.w, watchLine(e.Type, data))
	}
	if e.Type == "error" || e.Type == "reset" {
		return nil // not a change; an error also ends the stream: reconnect
	}
	if p.left > 0 {
		if p.left--; p.left == 0 {
			return errWatchDone
		}
	}
	return nil
}

func orEmpty(s string) string {
	if s == "" {
		return "{}"
	}
	return s
}

// watchLine is one change for a person: time, type, repo and session,
// then what changed.
func watchLine(typ string, d map[string]any) string {
	str := func(k string) string { s, _ := d[k].(string); return s }
	at := str("at")
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		at = t.UTC().Format(time.RFC3339)
	}
	var what string
	switch typ {
	case "validity":
		what = fmt.Sprintf("%s → %s", str("from"), str("to"))
		if r := str("reason"); r != "" {
			what += ": " + r
		}
	case "lease":
		what = str("change") + " " + str("lease_id")
	case "run":
		what = str("change") + " " + str("run_id")
	case "checkpoint":
		state := "incomplete"
		if d["complete"] == true {
			state = "complete"
		}
		what = fmt.Sprintf("seq %v %s", d["seq"], state)
		if s := str("stage"); s != "" {
			what += " (" + s + ")"
		}
	case "session":
		what = str("change")
		if o := str("outcome"); o != "" {
			what += " (" + o + ")"
		}
	case "drain":
		return strings.TrimSpace(fmt.Sprintf("%-20s %-10s %s %s", at, typ, str("drain_id"), str("change")))
	default: // reset, error
		return fmt.Sprintf("%-20s %-10s %s %s", at, typ, str("reason"), str("detail"))
	}
	return fmt.Sprintf("%-20s %-10s %s %s %s", at, typ, str("repo"), str("session_id"), strings.TrimSpace(what))
}
