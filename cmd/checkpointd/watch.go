package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd/client"
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
			if err := streamOutput(c); err != nil {
				return err
			}
			token, err := clientToken(c, needReader)
			if err != nil {
				return err
			}
			cl, err := watchClient(c, token)
			if err != nil {
				return err
			}
			p := &watchPrinter{w: stdout, json: forScripts(c), left: c.Int("count"), zone: zoneOf(c)}
			for ev, err := range cl.Watch(ctx, client.WatchOptions{Session: c.String("session"), Repo: c.String("repo")}) {
				if err != nil {
					return apiError("watch", err) // a refusal: retrying would be refused the same way
				}
				if err := p.print(ev); errors.Is(err, errWatchDone) {
					return nil
				} else if err != nil {
					return err
				}
			}
			return nil // interrupted
		},
	}
}

var errWatchDone = errors.New("enough events")

// watchClient is a client whose requests have no overall timeout (the
// stream lasts): --request-timeout bounds waiting for the answer's
// headers. A lost stream is reopened with Last-Event-ID after 1 s,
// doubling to 30 s (client.Watch): nothing is missed or printed twice.
func watchClient(c *cli.Command, token string) (*client.Client, error) {
	base := strings.TrimRight(c.String("url"), "/")
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.ResponseHeaderTimeout = c.Duration("request-timeout")
	cl, err := client.New(client.Config{Address: base, Token: token, UserAgent: "checkpointd-cli/" + version(),
		HTTPClient: &http.Client{Transport: t}, RetryWait: time.Second, RetryMaxWait: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port", base)
	}
	return cl, nil
}

// watchPrinter prints events, as lines for a person or as JSON.
type watchPrinter struct {
	w    io.Writer
	json bool
	left int // 0: no limit
	zone *time.Location
}

func (p *watchPrinter) print(e client.WatchEvent) error {
	var data map[string]any
	_ = json.Unmarshal(e.Data, &data)
	if p.json {
		b, err := json.Marshal(map[string]any{"id": e.ID, "type": e.Type, "data": json.RawMessage(orEmpty(string(e.Data)))})
		if err != nil {
			return err
		}
		fmt.Fprintln(p.w, string(b))
	} else {
		fmt.Fprintln(p.w, watchLine(e.Type, data, p.zone))
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
func watchLine(typ string, d map[string]any, zone *time.Location) string {
	str := func(k string) string { s, _ := d[k].(string); return s }
	at := str("at")
	if t, err := time.Parse(time.RFC3339Nano, at); err == nil {
		at = stamp(t, zone)
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
