package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/present"
)

// errorsScanMax bounds the records `errors --session/--repo` reads: GET
// /v1/errors filters by source and time only, so those two filter here,
// over the newest records.
const errorsScanMax = 5000

// errorsCommand prints the durable error log: failed checkpoint writes,
// refused webhook deliveries, reconcile failures (GET /v1/errors).
func errorsCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	flags := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", true)
	return &cli.Command{
		Name:  "errors",
		Usage: "print the durable error log, newest first: failed checkpoint writes, refused webhook deliveries, reconcile failures (GET /v1/errors)",
		Flags: flags(
			&cli.StringFlag{Name: "source", Usage: "checkpoint_write, reconcile or webhook"},
			&cli.StringFlag{Name: "since", Usage: "only records at or after this RFC 3339 time, or this long ago (e.g. 1h)"},
			&cli.StringFlag{Name: "session", Usage: "only records about this session, or those whose id begins with it (filtered here, over the newest 5000 records)"},
			&cli.StringFlag{Name: "repo", Usage: "only records about this owner/name (filtered here, over the newest 5000 records)"},
			&cli.IntFlag{Name: "limit", Value: 50, Usage: "how many records (1-500)"},
			&cli.StringFlag{Name: "cursor", Usage: "the cursor a previous page printed (without --session and --repo)"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			opts := client.ErrorListOptions{Source: checkpointd.ErrorSource(c.String("source")),
				ListOptions: client.ListOptions{Limit: c.Int("limit"), Cursor: c.String("cursor")}}
			if s := c.String("since"); s != "" {
				if d, err := time.ParseDuration(s); err == nil && d > 0 {
					opts.Since = time.Now().Add(-d)
				} else if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
					opts.Since = t
				} else {
					return argError(c, fmt.Sprintf("--since %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or a duration (1h)", s))
				}
			}
			session, repo := c.String("session"), c.String("repo")
			// A session as tables show it (short, without ses_) or whole:
			// the records whose session id begins with it.
			if session != "" && !strings.HasPrefix(session, checkpointd.PrefixSession) {
				session = checkpointd.PrefixSession + session
			}
			filtered := session != "" || repo != ""
			if filtered && opts.Cursor != "" {
				return argError(c, "--cursor pages the unfiltered log: give it without --session and --repo")
			}
			cl, err := newReaderClient(c)
			if err != nil {
				return err
			}
			if !filtered {
				if forScripts(c) {
					var raw json.RawMessage
					if err := cl.Do(ctx, http.MethodGet, "/v1/errors", errorQuery(opts), nil, &raw); err != nil {
						return apiError("errors", err)
					}
					return printAnswer(c, stdout, raw)
				}
				page, err := cl.ErrorLog().List(ctx, opts)
				if err != nil {
					return apiError("errors", err)
				}
				printErrors(stdout, page.Items, zoneOf(c))
				if page.NextCursor != "" {
					fmt.Fprintf(stdout, "more: --cursor %s\n", page.NextCursor)
				}
				return nil
			}
			// Filtered here: walk the newest records until enough match.
			want := opts.Limit
			scan := opts
			scan.ListOptions = client.ListOptions{Limit: 500}
			var items []checkpointd.ErrorRecord
			scanned, capped := 0, false
			for rec, err := range cl.ErrorLog().All(ctx, scan) {
				if err != nil {
					return apiError("errors", err)
				}
				if scanned++; scanned > errorsScanMax {
					capped = true
					break
				}
				if (session == "" || strings.HasPrefix(rec.SessionID, session)) && (repo == "" || rec.Repo == repo) {
					if items = append(items, rec); len(items) >= want {
						break
					}
				}
			}
			if forScripts(c) {
				b, err := json.Marshal(map[string]any{"items": append([]checkpointd.ErrorRecord{}, items...), "next_cursor": nil})
				if err != nil {
					return err
				}
				return printAnswer(c, stdout, b)
			}
			printErrors(stdout, items, zoneOf(c))
			if capped {
				fmt.Fprintf(stdout, "note: only the newest %d records were searched (the daemon filters by --source and --since, not by session or repo)\n", errorsScanMax)
			}
			return nil
		},
	}
}

func errorQuery(o client.ErrorListOptions) url.Values {
	q := url.Values{}
	if o.Source != "" {
		q.Set("source", string(o.Source))
	}
	if !o.Since.IsZero() {
		q.Set("since", o.Since.UTC().Format(time.RFC3339Nano))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

func printErrors(w io.Writer, items []checkpointd.ErrorRecord, zone *time.Location) {
	if len(items) == 0 {
		fmt.Fprintln(w, "no errors")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTIME\tSOURCE\tCODE\tABOUT\tDETAIL")
	for _, e := range items {
		about := present.ShortID(e.SessionID)
		if about == "" {
			about = e.Repo
		}
		if about == "" && e.Delivery != "" {
			about = "delivery " + e.Delivery
		}
		if about == "" {
			about = "-"
		}
		detail := e.Detail
		if detail == "" {
			detail = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", e.ID, stamp(e.At, zone), e.Source,
			ellipsis(e.Code, 24), about, ellipsis(detail, 100))
	}
	tw.Flush()
}
