package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/present"
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
					_, err := fmt.Fprintln(stdout, eventLine(e, zoneOf(c)))
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
				if gone := goneError(id, err, zoneOf(c)); gone != nil {
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

// eventLine is one event for a person: seq, time, kind, run (its id
// short, as tables show ids), and a short summary of its data.
func eventLine(e *checkpointd.Event, zone *time.Location) string {
	run := present.ShortID(e.RunID)
	if run == "" {
		run = "-"
	}
	return fmt.Sprintf("%5d  %s  %-23s  %-16s  %s", e.Seq, stamp(e.At, zone), e.Kind, run, dataSummary(e.Data))
}

// dataSummary is an event's data in one line cut to 100 characters
// (present.EventData).
func dataSummary(raw json.RawMessage) string { return ellipsis(present.EventData(raw), 100) }
