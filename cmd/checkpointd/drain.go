package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// operatorFlags returns a builder of the flags of a CLI word that calls a
// running daemon with the operator token: --url and --token (clientFlags),
// --data-dir (where operator.token is read), --request-timeout, --json
// when withJSON, then the word's own.
func operatorFlags(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, timeout time.Duration, timeoutUsage string, withJSON bool) func(extra ...cli.Flag) []cli.Flag {
	common := append(append([]cli.Flag{}, clientFlags...),
		&cli.StringFlag{Name: "data-dir", Value: "data", Sources: from("CHECKPOINTD_DATA_DIR"),
			Usage: "where operator.token is read from when no --token is given"},
		&cli.DurationFlag{Name: "request-timeout", Value: timeout, Usage: timeoutUsage})
	if withJSON {
		common = append(common, &cli.BoolFlag{Name: "json", Usage: "print the daemon's JSON answer (-o json)"}, outputFlag())
	}
	return func(extra ...cli.Flag) []cli.Flag {
		return append(append([]cli.Flag{}, common...), extra...)
	}
}

// drainCommand drives the drain of a running daemon: start, status
// (optionally waiting until nothing blocks), complete, cancel.
func drainCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	withJSON := operatorFlags(from, clientFlags, 2*time.Minute,
		"how long one request may take (completing a drain writes an event per active session)", true)
	limit := &cli.IntFlag{Name: "limit", Value: 20, Usage: "how many blocking sessions to list (1-500)"}
	return &cli.Command{
		Name:  "drain",
		Usage: "drain a running daemon before a deploy or restart: refuse new sessions and runs, wait until every active session holds a fresh, complete, valid checkpoint",
		Commands: []*cli.Command{
			{
				Name:  "start",
				Usage: "start a drain (POST /v1/drain)",
				Flags: withJSON(&cli.StringFlag{Name: "reason", Required: true, Usage: "why, e.g. the deploy the drain prepares"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					cl, err := newOperatorClient(c)
					if err != nil {
						return err
					}
					body := map[string]string{"reason": c.String("reason")}
					if forScripts(c) {
						return doJSON(ctx, cl, stdout, "drain start", http.MethodPost, "/v1/drain", nil, body)
					}
					d, err := cl.Drain().Start(ctx, c.String("reason"))
					if err != nil {
						var pe *client.Error
						if errors.As(err, &pe) {
							if running := pe.RunningDrain(); running != nil {
								return fmt.Errorf("drain start: 409 drain_running: drain %s is already running since %s (%q); follow it with: checkpointd drain status --wait",
									running.ID, stamp(running.StartedAt, zoneOf(c)), running.Reason)
							}
						}
						return apiError("drain start", err)
					}
					fmt.Fprintf(stdout, "drain %s started: new sessions and runs are refused; every active session must write a fresh, complete checkpoint\n", d.ID)
					fmt.Fprintln(stdout, "follow it with: checkpointd drain status --wait")
					return nil
				},
			},
			{
				Name:  "status",
				Usage: "show the drain: counts and the sessions that block it, with what unblocks each (GET /v1/drain); --wait polls until nothing blocks",
				Flags: withJSON(limit,
					&cli.BoolFlag{Name: "wait", Usage: "poll until no session blocks the drain, showing progress; fail after --timeout"},
					&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "how long --wait waits"},
					&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "time between polls with --wait"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					cl, err := newReaderClient(c)
					if err != nil {
						return err
					}
					if c.Bool("wait") {
						return waitDrained(ctx, cl, stdout, c.Int("limit"), c.Duration("timeout"), c.Duration("interval"))
					}
					if forScripts(c) {
						return doJSON(ctx, cl, stdout, "drain status", http.MethodGet, "/v1/drain", limitQuery(c.Int("limit")), nil)
					}
					st, err := cl.Drain().Status(ctx, client.ListOptions{Limit: c.Int("limit")})
					if err != nil {
						return apiError("drain status", err)
					}
					printDrainStatus(stdout, st, nowIn(c))
					return nil
				},
			},
			{
				Name:  "complete",
				Usage: "complete the drain if nothing blocks it (POST /v1/drain/complete); lists what blocks it otherwise and fails",
				Flags: withJSON(limit, &cli.StringSliceFlag{Name: "override-replica",
					Usage: "complete past this replica although it did not confirm it keeps no unrecorded failed write (repeatable; you vouch for it, and the decision records it)"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					cl, err := newOperatorClient(c)
					if err != nil {
						return err
					}
					override := c.StringSlice("override-replica")
					if forScripts(c) {
						var body any
						if len(override) > 0 {
							body = map[string][]string{"override_replicas": override}
						}
						var raw json.RawMessage
						err := cl.Do(ctx, http.MethodPost, "/v1/drain/complete", limitQuery(c.Int("limit")), body, &raw)
						var pe *client.Error
						switch {
						case err == nil:
							return printAnswer(c, stdout, raw)
						case errors.As(err, &pe) && pe.Blocked() != nil:
							if err := printAnswer(c, stdout, pe.Body); err != nil {
								return err
							}
							return blockedError(pe.Blocked())
						}
						return fmt.Errorf("%s; the drain was not completed", apiError("drain complete", err))
					}
					d, err := cl.Drain().Complete(ctx, client.CompleteOptions{Limit: c.Int("limit"), OverrideReplicas: override})
					if err != nil {
						var pe *client.Error
						if errors.As(err, &pe) && pe.Blocked() != nil {
							b := pe.Blocked()
							printBlocking(stdout, b.Blocking, b.Counts.Blocking)
							printUnconfirmed(stdout, b.Unconfirmed, zoneOf(c))
							var notice string
							if pe.Member("notice", &notice) && notice != "" {
								fmt.Fprintln(stdout, "note: "+notice)
							}
							return blockedError(b)
						}
						return fmt.Errorf("%s; the drain was not completed", apiError("drain complete", err))
					}
					n := int64(0)
					if d.Decision != nil {
						n = d.Decision.Counts.Active
					}
					fmt.Fprintf(stdout, "drain %s completed: all %d active sessions hold a fresh, complete, valid checkpoint\n", d.ID, n)
					if d.Decision != nil {
						for _, o := range d.Decision.Overridden {
							fmt.Fprintf(stdout, "overridden, as you vouched: replica %s (host %s, pid %d, %s)\n", o.ID, o.Host, o.PID, o.Reason)
						}
					}
					fmt.Fprintln(stdout, "safe to stop the daemon; new sessions stay refused until it restarts (or: checkpointd drain cancel)")
					return nil
				},
			},
			{
				Name:  "cancel",
				Usage: "end the drain without completing it, or lift a completed one (POST /v1/drain/cancel): new sessions and runs are admitted again",
				Flags: withJSON(),
				Action: func(ctx context.Context, c *cli.Command) error {
					cl, err := newOperatorClient(c)
					if err != nil {
						return err
					}
					if forScripts(c) {
						return doJSON(ctx, cl, stdout, "drain cancel", http.MethodPost, "/v1/drain/cancel", nil, nil)
					}
					d, err := cl.Drain().Cancel(ctx)
					if err != nil {
						var pe *client.Error
						if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
							return fmt.Errorf("drain cancel: 404 not_found: no drain is running or gating; nothing to cancel")
						}
						return apiError("drain cancel", err)
					}
					what := "cancelled"
					if d.State == checkpointd.DrainCompleted {
						what = "lifted (it had completed)"
					}
					fmt.Fprintf(stdout, "drain %s %s: new sessions and runs are admitted again\n", d.ID, what)
					return nil
				},
			},
		},
	}
}

// blockedError is the failure of a complete that sessions or replicas
// block.
func blockedError(b *client.DrainBlocked) error {
	if b.Counts.Blocking == 0 && len(b.Unconfirmed) > 0 {
		return fmt.Errorf("drain blocked: %d replicas did not confirm that they keep no unrecorded failed checkpoint write; nothing was completed (start each again on its data directory, or, if it is gone for good, complete with --override-replica ID)",
			len(b.Unconfirmed))
	}
	return fmt.Errorf("drain blocked: %d of %d active sessions block it; nothing was completed (what unblocks each is listed above; follow with: checkpointd drain status --wait)",
		b.Counts.Blocking, b.Counts.Active)
}

// printUnconfirmed lists the replicas a completion could not hear from.
func printUnconfirmed(w io.Writer, us []checkpointd.UnconfirmedReplica, zone *time.Location) {
	if len(us) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tHOST\tPID\tLAST HEARD\tPENDING\tREASON")
	for _, u := range us {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\n", u.ID, u.Host, u.PID, stamp(u.HeardAt, zone), u.Pending, u.Reason)
	}
	tw.Flush()
}

// doJSON sends one request and prints the daemon's answer as sent.
func doJSON(ctx context.Context, cl *client.Client, w io.Writer, what, method, path string, q url.Values, body any) error {
	var raw json.RawMessage
	if err := cl.Do(ctx, method, path, q, body, &raw); err != nil {
		return apiError(what, err)
	}
	return printJSON(w, raw)
}

func limitQuery(limit int) url.Values {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	return q
}

// drainStatus is GET /v1/drain's answer.
type drainStatus = client.DrainStatus
