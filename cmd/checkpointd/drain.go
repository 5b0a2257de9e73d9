package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
		common = append(common, &cli.BoolFlag{Name: "json", Usage: "print the daemon's JSON answer"})
	}
	return func(extra ...cli.Flag) []cli.Flag {
		return append(append([]cli.Flag{}, common...), extra...)
	}
}

// drainCommand drives the drain of a running daemon over HTTP: start,
// status (optionally waiting until nothing blocks), complete, cancel.
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
					dc, err := newDaemonClient(c)
					if err != nil {
						return err
					}
					status, raw, err := dc.do(ctx, http.MethodPost, "/v1/drain", map[string]string{"reason": c.String("reason")})
					if err != nil {
						return err
					}
					if status != http.StatusCreated {
						return fmt.Errorf("drain start: %s", describeStatus(status, raw))
					}
					if c.Bool("json") {
						return printJSON(stdout, raw)
					}
					var r struct{ Drain checkpointd.Drain }
					if err := json.Unmarshal(raw, &r); err != nil {
						return fmt.Errorf("drain start: unreadable answer: %w", err)
					}
					fmt.Fprintf(stdout, "drain %s started: new sessions and runs are refused; every active session must write a fresh, complete checkpoint\n", r.Drain.ID)
					fmt.Fprintln(stdout, "follow it with: checkpointd drain status --wait")
					return nil
				},
			},
			{
				Name:  "status",
				Usage: "show the drain: counts and the sessions that block it (GET /v1/drain); --wait polls until nothing blocks",
				Flags: withJSON(limit,
					&cli.BoolFlag{Name: "wait", Usage: "poll until no session blocks the drain, showing progress; fail after --timeout"},
					&cli.DurationFlag{Name: "timeout", Value: 30 * time.Minute, Usage: "how long --wait waits"},
					&cli.DurationFlag{Name: "interval", Value: 2 * time.Second, Usage: "time between polls with --wait"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					dc, err := newDaemonClient(c)
					if err != nil {
						return err
					}
					if c.Bool("wait") {
						return waitDrained(ctx, dc, stdout, c.Int("limit"), c.Duration("timeout"), c.Duration("interval"))
					}
					st, raw, err := dc.status(ctx, c.Int("limit"))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(stdout, raw)
					}
					printDrainStatus(stdout, st, time.Now())
					return nil
				},
			},
			{
				Name:  "complete",
				Usage: "complete the drain if nothing blocks it (POST /v1/drain/complete); lists what blocks it otherwise and fails",
				Flags: withJSON(limit),
				Action: func(ctx context.Context, c *cli.Command) error {
					dc, err := newDaemonClient(c)
					if err != nil {
						return err
					}
					status, raw, err := dc.do(ctx, http.MethodPost, "/v1/drain/complete?limit="+strconv.Itoa(c.Int("limit")), nil)
					if err != nil {
						return err
					}
					if c.Bool("json") && (status == http.StatusOK || status == http.StatusConflict) {
						if err := printJSON(stdout, raw); err != nil {
							return err
						}
					}
					switch status {
					case http.StatusOK:
						if !c.Bool("json") {
							var r struct{ Drain checkpointd.Drain }
							_ = json.Unmarshal(raw, &r)
							n := int64(0)
							if r.Drain.Decision != nil {
								n = r.Drain.Decision.Counts.Active
							}
							fmt.Fprintf(stdout, "drain %s completed: all %d active sessions hold a fresh, complete, valid checkpoint\n", r.Drain.ID, n)
							fmt.Fprintln(stdout, "safe to stop the daemon; new sessions stay refused until it restarts (or: checkpointd drain cancel)")
						}
						return nil
					case http.StatusConflict:
						var p struct {
							Code     string
							Counts   checkpointd.DrainCounts
							Blocking []checkpointd.DrainBlocker
							Notice   string
						}
						_ = json.Unmarshal(raw, &p)
						if p.Code != "drain_blocked" {
							return fmt.Errorf("drain complete: %s", describeStatus(status, raw))
						}
						if !c.Bool("json") {
							printBlocking(stdout, p.Blocking, p.Counts.Blocking)
							if p.Notice != "" {
								fmt.Fprintln(stdout, "note: "+p.Notice)
							}
						}
						return fmt.Errorf("drain blocked: %d of %d active sessions block it; nothing was completed", p.Counts.Blocking, p.Counts.Active)
					}
					return fmt.Errorf("drain complete: %s; the drain was not completed", describeStatus(status, raw))
				},
			},
			{
				Name:  "cancel",
				Usage: "end the drain without completing it, or lift a completed one (POST /v1/drain/cancel): new sessions and runs are admitted again",
				Flags: withJSON(),
				Action: func(ctx context.Context, c *cli.Command) error {
					dc, err := newDaemonClient(c)
					if err != nil {
						return err
					}
					status, raw, err := dc.do(ctx, http.MethodPost, "/v1/drain/cancel", nil)
					if err != nil {
						return err
					}
					if status != http.StatusOK {
						return fmt.Errorf("drain cancel: %s", describeStatus(status, raw))
					}
					if c.Bool("json") {
						return printJSON(stdout, raw)
					}
					var r struct{ Drain checkpointd.Drain }
					_ = json.Unmarshal(raw, &r)
					what := "cancelled"
					if r.Drain.State == checkpointd.DrainCompleted {
						what = "lifted (it had completed)"
					}
					fmt.Fprintf(stdout, "drain %s %s: new sessions and runs are admitted again\n", r.Drain.ID, what)
					return nil
				},
			},
		},
	}
}

// daemonClient talks to a running daemon.
type daemonClient struct {
	base, token string
	http        *http.Client
}

func newDaemonClient(c *cli.Command) (*daemonClient, error) {
	token, err := clientToken(c, "an operator token")
	if err != nil {
		return nil, err
	}
	return daemonClientWith(c, token)
}

func daemonClientWith(c *cli.Command, token string) (*daemonClient, error) {
	base := strings.TrimRight(c.String("url"), "/")
	if u, err := url.Parse(base); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port", base)
	}
	return &daemonClient{base: base, token: token, http: &http.Client{Timeout: c.Duration("request-timeout")}}, nil
}

func (dc *daemonClient) do(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, dc.base+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+dc.token)
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := dc.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("drain: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("drain: %w", err)
	}
	return resp.StatusCode, raw, nil
}

// drainStatus is GET /v1/drain's answer.
type drainStatus struct {
	Drain    *checkpointd.Drain         `json:"drain"`
	Draining bool                       `json:"draining"`
	Counts   *checkpointd.DrainCounts   `json:"counts"`
	Blocking []checkpointd.DrainBlocker `json:"blocking"`
	Notice   string                     `json:"notice"`
}

func (dc *daemonClient) status(ctx context.Context, limit int) (*drainStatus, []byte, error) {
	status, raw, err := dc.do(ctx, http.MethodGet, "/v1/drain?limit="+strconv.Itoa(limit), nil)
	if err != nil {
		return nil, nil, err
	}
	if status != http.StatusOK {
		return nil, nil, fmt.Errorf("drain status: %s", describeStatus(status, raw))
	}
	var st drainStatus
	if err := json.Unmarshal(raw, &st); err != nil {
		return nil, nil, fmt.Errorf("drain status: unreadable answer: %w", err)
	}
	return &st, raw, nil
}

// errNoDrain reports a status or wait with no drain open.
var errNoDrain = errors.New("no drain is open: start one with: checkpointd drain start --reason …")

// waitDrained polls the status until nothing blocks the drain, printing a
// progress line whenever the counts change, and the sessions still
// blocking when it gives up.
func waitDrained(ctx context.Context, dc *daemonClient, w io.Writer, limit int, timeout, interval time.Duration) error {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	var last checkpointd.DrainCounts
	var st *drainStatus
	for first := true; ; first = false {
		var err error
		st, _, err = dc.status(ctx, limit)
		if err != nil && ctx.Err() == nil {
			return err
		}
		if err == nil {
			if st.Drain == nil || !st.Draining || st.Counts == nil {
				return errNoDrain
			}
			c := *st.Counts
			if first || c != last {
				fmt.Fprintf(w, "%s  %s  ready %d/%d  blocking %d%s\n", time.Now().Format("15:04:05"), progressBar(c, 24),
					c.Ready, c.Active, c.Blocking, reasonSummary(st.Blocking))
				last = c
			}
			if c.Blocking == 0 {
				fmt.Fprintf(w, "drain %s is ready after %s: complete it with: checkpointd drain complete\n", st.Drain.ID,
					time.Since(start).Round(time.Second))
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if st != nil {
				printBlocking(w, st.Blocking, last.Blocking)
			}
			return fmt.Errorf("drain not ready after %s: %d of %d active sessions still block it", timeout, last.Blocking, last.Active)
		case <-time.After(interval):
		}
	}
}

// progressBar draws the ready share of the active sessions.
func progressBar(c checkpointd.DrainCounts, width int) string {
	done := width
	if c.Active > 0 {
		done = int(c.Ready * int64(width) / c.Active)
	}
	return "[" + strings.Repeat("#", done) + strings.Repeat(".", width-done) + "]"
}

// reasonSummary counts the reasons among the listed blocking sessions.
func reasonSummary(bs []checkpointd.DrainBlocker) string {
	if len(bs) == 0 {
		return ""
	}
	n := map[checkpointd.BlockReason]int{}
	var order []checkpointd.BlockReason
	for _, b := range bs {
		for _, r := range b.Reasons {
			if n[r] == 0 {
				order = append(order, r)
			}
			n[r]++
		}
	}
	parts := make([]string, len(order))
	for i, r := range order {
		parts[i] = fmt.Sprintf("%s %d", r, n[r])
	}
	return fmt.Sprintf(" (of the first %d: %s)", len(bs), strings.Join(parts, ", "))
}

func printDrainStatus(w io.Writer, st *drainStatus, now time.Time) {
	if st.Drain == nil {
		fmt.Fprintln(w, "no drain has been started")
		return
	}
	d := st.Drain
	fmt.Fprintf(w, "drain %s: %s — %s\n", d.ID, drainWhen(d, now), d.Reason)
	if !st.Draining {
		fmt.Fprintln(w, "not draining: new sessions and runs are admitted")
		return
	}
	if d.State == checkpointd.DrainCompleted {
		fmt.Fprintln(w, "completed: safe to stop the daemon; new sessions and runs are refused until it restarts (or: checkpointd drain cancel)")
	}
	if st.Counts != nil {
		c := *st.Counts
		fmt.Fprintf(w, "%s  ready %d/%d  blocking %d\n", progressBar(c, 24), c.Ready, c.Active, c.Blocking)
		printBlocking(w, st.Blocking, c.Blocking)
	}
	if st.Notice != "" {
		fmt.Fprintln(w, "note: "+st.Notice)
	}
}

// drainWhen says when a drain entered the state it is in: a running one
// since its start, an ended one at its end (ended_at; lifted_at for a
// completed drain that no longer gates), with how long it ran.
func drainWhen(d *checkpointd.Drain, now time.Time) string {
	at := func(t time.Time) string { return t.Local().Format(time.DateTime) }
	ago := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() }
	if d.State == checkpointd.DrainRunning || d.EndedAt == nil {
		return fmt.Sprintf("%s since %s (%s)", d.State, at(d.StartedAt), ago(d.StartedAt))
	}
	s := fmt.Sprintf("%s at %s (%s ago; started %s, ran %s)", d.State, at(*d.EndedAt), ago(*d.EndedAt),
		at(d.StartedAt), d.EndedAt.Sub(d.StartedAt).Round(time.Second))
	if d.State == checkpointd.DrainCompleted && d.LiftedAt != nil {
		s += fmt.Sprintf(", lifted at %s (%s ago)", at(*d.LiftedAt), ago(*d.LiftedAt))
	}
	return s
}

// printBlocking lists blocking sessions with their reasons.
func printBlocking(w io.Writer, bs []checkpointd.DrainBlocker, total int64) {
	if len(bs) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tREPO\tROLE\tREASONS\tTO UNBLOCK")
	for _, b := range bs {
		reasons := make([]string, len(b.Reasons))
		for i, r := range b.Reasons {
			reasons[i] = string(r)
			switch {
			case r == checkpointd.BlockIncomplete && len(b.Missing) > 0:
				reasons[i] += " (missing " + strings.Join(b.Missing, ", ") + ")"
			case r == checkpointd.BlockWriteFailed && b.WriteFailure != "":
				reasons[i] += " (" + b.WriteFailure + ")"
			}
		}
		action := "-"
		if b.Unblock != nil {
			action = string(b.Unblock.Action)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", b.SessionID, b.Repo, b.Role, strings.Join(reasons, "; "), action)
	}
	tw.Flush()
	// Then the action in words, naming the session's own command.
	for _, b := range bs {
		if b.Unblock != nil {
			fmt.Fprintf(w, "  %s: %s\n", b.SessionID, b.Unblock.Detail)
		}
	}
	if more := total - int64(len(bs)); more > 0 {
		fmt.Fprintf(w, "… and %d more (--limit, or GET /v1/drain with its cursor)\n", more)
	}
}

func printJSON(w io.Writer, raw []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return fmt.Errorf("the daemon answered no JSON: %w", err)
	}
	_, err := fmt.Fprintln(w, out.String())
	return err
}
