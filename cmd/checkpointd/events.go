package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// eventsCommand prints a session's event log, and with --follow keeps
// printing what is appended to it, by polling (the change feed, GET
// /v1/watch, is `checkpointd watch`).
func eventsCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	flags := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", true)
	return &cli.Command{
		Name:      "events",
		Usage:     "print a session's event log, oldest first, one line per event (GET /v1/sessions/{id}/events); --follow keeps printing new ones",
		ArgsUsage: "SESSION",
		Flags: flags(
			&cli.Int64Flag{Name: "after", Usage: "start after this event seq"},
			&cli.BoolFlag{Name: "follow", Aliases: []string{"f"}, Usage: "keep polling for new events until interrupted"},
			&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "time between polls with --follow"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			if err := streamOutput(c); err != nil {
				return err
			}
			id, err := sessionArg(c)
			if err != nil {
				return err
			}
			if c.Int64("after") < 0 {
				return argError(c, "--after must not be negative")
			}
			cl, err := newReaderClient(c)
			if err != nil {
				return err
			}
			if id, err = resolveSession(ctx, c, cl, id); err != nil {
				return err
			}
			emit := func(e *checkpointd.Event) error {
				if !forScripts(c) {
					_, err := fmt.Fprintln(stdout, eventLine(e))
					return err
				}
				b, err := json.Marshal(e) // one object per line: the daemon's own form
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(stdout, "%s\n", b)
				return err
			}
			err = followEvents(ctx, cl, id, c.Int64("after"), c.Bool("follow"), c.Duration("interval"), emit)
			if err != nil {
				if gone := goneError(id, err); gone != nil {
					return gone
				}
				return sessionError("events", id, err)
			}
			return nil
		},
	}
}

// followEvents prints every event after seq after, page by page; with
// follow it then polls every interval for events after the last one it
// printed, until ctx ends (a clean stop: nil). Each event is printed once
// and none is skipped: every read starts after the last seq printed, and
// seqs only grow.
func followEvents(ctx context.Context, cl *client.Client, id string, after int64, follow bool, interval time.Duration,
	emit func(*checkpointd.Event) error) error {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	for {
		page, err := cl.Sessions().Events(ctx, id, client.EventListOptions{After: after, ListOptions: client.ListOptions{Limit: 500}})
		if err != nil {
			if follow && ctx.Err() != nil {
				return nil
			}
			return err
		}
		for i := range page.Items {
			if e := &page.Items[i]; e.Seq > after {
				if err := emit(e); err != nil {
					return err
				}
				after = e.Seq
			}
		}
		if page.NextCursor != "" && len(page.Items) > 0 {
			continue // more at once
		}
		if !follow {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// eventLine is one event for a person: seq, time, kind, run, and a short
// summary of its data.
func eventLine(e *checkpointd.Event) string {
	run := e.RunID
	if run == "" {
		run = "-"
	}
	return fmt.Sprintf("%5d  %s  %-23s  %-36s  %s", e.Seq, e.At.Local().Format(time.DateTime), e.Kind, run, dataSummary(e.Data))
}

// summaryFirst are the data members a person reads first, in this order;
// the others follow sorted.
var summaryFirst = []string{"outcome", "reason", "from", "to", "seq", "stage", "complete"}

// dataSummary is an event's data as key=value pairs (summaryFirst, then
// the rest sorted), the members of a nested object as key.member=value
// (one level; deeper ones elided), the whole cut to 100 characters.
func dataSummary(raw json.RawMessage) string {
	var m map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return ""
	}
	var parts []string
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		ia, ib := slices.Index(summaryFirst, a), slices.Index(summaryFirst, b)
		switch {
		case ia >= 0 && ib >= 0:
			return ia - ib
		case ia >= 0:
			return -1
		case ib >= 0:
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		if sub, ok := m[k].(map[string]any); ok {
			for _, sk := range slices.Sorted(maps.Keys(sub)) {
				if v, ok := scalar(sub[sk]); ok {
					parts = append(parts, k+"."+sk+"="+v)
				}
			}
			continue
		}
		if v, ok := scalar(m[k]); ok {
			parts = append(parts, k+"="+v)
		}
	}
	return ellipsis(strings.Join(parts, " "), 100)
}

// scalar is a JSON value in a summary; false for a null.
func scalar(v any) (string, bool) {
	switch x := v.(type) {
	case nil:
		return "", false
	case string:
		if strings.ContainsAny(x, " =") {
			return strconv.Quote(x), true
		}
		return x, true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(x), true
	case []any:
		return fmt.Sprintf("[%d]", len(x)), true
	}
	return "{…}", true
}
