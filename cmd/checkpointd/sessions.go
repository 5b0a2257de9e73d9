package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
)

// sessionsCommand lists, shows and force-clears the sessions of a running
// daemon over HTTP, with an operator token.
func sessionsCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	withJSON := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", true)
	plain := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", false)
	return &cli.Command{
		Name:  "sessions",
		Usage: "list, show and force-clear the sessions of a running daemon",
		Commands: []*cli.Command{
			{
				Name:  "ls",
				Usage: "list sessions, newest first (GET /v1/sessions)",
				Flags: withJSON(
					&cli.StringFlag{Name: "state", Usage: "active or ended"},
					&cli.StringFlag{Name: "repo", Usage: "owner/name"},
					&cli.StringFlag{Name: "validity", Usage: "valid, stale, lease_lost, invalidated or unverified"},
					&cli.IntFlag{Name: "limit", Value: 50, Usage: "how many sessions (1-500)"},
					&cli.StringFlag{Name: "cursor", Usage: "the next_cursor of a previous page"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					dc, err := newReaderClient(c)
					if err != nil {
						return err
					}
					q := url.Values{}
					for _, f := range []string{"state", "repo", "validity", "cursor"} {
						if v := c.String(f); v != "" {
							q.Set(f, v)
						}
					}
					q.Set("limit", strconv.Itoa(c.Int("limit")))
					status, raw, err := daemonCall(ctx, dc, http.MethodGet, "/v1/sessions?"+q.Encode(), nil)
					if err != nil {
						return err
					}
					if status != http.StatusOK {
						return fmt.Errorf("sessions ls: %s", describeStatus(status, raw))
					}
					if c.Bool("json") {
						return printJSON(stdout, raw)
					}
					var page struct {
						Items      []checkpointd.Session `json:"items"`
						NextCursor string                `json:"next_cursor"`
					}
					if err := json.Unmarshal(raw, &page); err != nil {
						return fmt.Errorf("sessions ls: unreadable answer: %w", err)
					}
					printSessions(stdout, page.Items)
					if page.NextCursor != "" {
						fmt.Fprintf(stdout, "more: --cursor %s\n", page.NextCursor)
					}
					return nil
				},
			},
			{
				Name:      "show",
				Usage:     "show a session: its run, latest checkpoint and validity (GET /v1/sessions/{id})",
				ArgsUsage: "ID",
				Flags:     withJSON(),
				Action: func(ctx context.Context, c *cli.Command) error {
					id, err := sessionArg(c)
					if err != nil {
						return err
					}
					dc, err := newReaderClient(c)
					if err != nil {
						return err
					}
					status, raw, err := daemonCall(ctx, dc, http.MethodGet, "/v1/sessions/"+url.PathEscape(id), nil)
					if err != nil {
						return err
					}
					if status == http.StatusGone {
						return goneError(id, raw)
					}
					if status != http.StatusOK {
						return fmt.Errorf("sessions show: %s", describeStatus(status, raw))
					}
					if c.Bool("json") {
						return printJSON(stdout, raw)
					}
					var r struct{ Session checkpointd.Session }
					if err := json.Unmarshal(raw, &r); err != nil {
						return fmt.Errorf("sessions show: unreadable answer: %w", err)
					}
					printSession(stdout, &r.Session)
					return nil
				},
			},
			{
				Name:      "drop",
				Usage:     "force-clear a session with its checkpoints, runs, leases and events (DELETE /v1/sessions/{id}); irreversible, so --yes is required",
				ArgsUsage: "ID",
				Flags: plain(
					&cli.StringFlag{Name: "reason", Required: true, Usage: "why, kept (redacted) in the session's tombstone"},
					&cli.BoolFlag{Name: "yes", Usage: "confirm: the session cannot be restored"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					id, err := sessionArg(c)
					if err != nil {
						return err
					}
					if !c.Bool("yes") {
						return fmt.Errorf("refusing to drop session %s without --yes: it deletes the session's checkpoints, runs, leases and events for good (a tombstone records the clear)", id)
					}
					dc, err := newDaemonClient(c)
					if err != nil {
						return err
					}
					status, raw, err := daemonCall(ctx, dc, http.MethodDelete, "/v1/sessions/"+url.PathEscape(id),
						map[string]string{"reason": c.String("reason")})
					if err != nil {
						return err
					}
					switch status {
					case http.StatusNoContent:
						fmt.Fprintf(stdout, "session %s cleared; later requests naming it answer 410 gone\n", id)
						return nil
					case http.StatusGone:
						return goneError(id, raw)
					}
					return fmt.Errorf("sessions drop: %s; nothing was cleared", describeStatus(status, raw))
				},
			},
		},
	}
}

func sessionArg(c *cli.Command) (string, error) {
	if c.Args().Len() != 1 {
		return "", argError(c, "want exactly one session id")
	}
	return c.Args().First(), nil
}

// newReaderClient is a client for a command that only reads: a reader
// token is enough, and the bootstrap operator token is the fallback.
func newReaderClient(c *cli.Command) (*daemonClient, error) {
	token, err := clientToken(c, "a reader or operator token")
	if err != nil {
		return nil, err
	}
	return daemonClientWith(c, token)
}

// clientToken is --token (or CHECKPOINTD_TOKEN), else the bootstrap
// operator token in the data directory; need says, when there is none,
// which token the command takes.
func clientToken(c *cli.Command, need string) (string, error) {
	if t := strings.TrimSpace(c.String("token")); t != "" {
		return t, nil
	}
	path := filepath.Join(c.String("data-dir"), "operator.token")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s is required: --token, CHECKPOINTD_TOKEN or %s (%v)", need, path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// daemonCall is daemonClient.do with errors named after the request.
func daemonCall(ctx context.Context, dc *daemonClient, method, path string, body any) (int, []byte, error) {
	status, raw, err := dc.do(ctx, method, path, body)
	var ue *url.Error
	if errors.As(err, &ue) {
		return 0, nil, fmt.Errorf("%s %s: %w", method, dc.base+path, ue.Err)
	}
	return status, raw, err
}

// goneError explains a 410: the session was cleared or pruned. An
// operator's answer carries the whole tombstone (by, reason, removed),
// which it tells too.
func goneError(id string, raw []byte) error {
	var p struct {
		Kind    string               `json:"kind"`
		At      time.Time            `json:"at"`
		By      string               `json:"by"`
		Reason  string               `json:"reason"`
		Removed *checkpointd.Removed `json:"removed"`
	}
	_ = json.Unmarshal(raw, &p)
	msg := fmt.Sprintf("session %s is gone: %s at %s", id, p.Kind, p.At.Local().Format(time.DateTime))
	if p.By != "" {
		msg += " by " + p.By
	}
	if p.Reason != "" {
		msg += fmt.Sprintf(" (reason: %q)", p.Reason)
	}
	if r := p.Removed; r != nil {
		msg += fmt.Sprintf("; removed %d checkpoints, %d runs, %d events, %d leases (%d released), %d idempotency keys",
			r.Checkpoints, r.Runs, r.Events, r.Leases, r.LeasesReleased, r.IdempotencyKeys)
	}
	return errors.New(msg)
}

func printSessions(w io.Writer, items []checkpointd.Session) {
	if len(items) == 0 {
		fmt.Fprintln(w, "no sessions")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tREPO\tTARGET\tROLE\tSTATE\tVALIDITY\tCHECKPOINT\tSTAGE\tUPDATED")
	for _, s := range items {
		state := string(s.State)
		if s.Outcome != "" {
			state += " (" + string(s.Outcome) + ")"
		}
		seq, stage := "-", "-"
		if s.Latest != nil {
			seq, stage = strconv.FormatInt(s.Latest.Seq, 10), s.Latest.Stage
			if !s.Latest.Complete {
				seq += " (incomplete)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.Repo, target(&s), s.Role, state, s.Validity, seq, stage,
			s.UpdatedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
}

// target names what a session works on: #issue, !pr, branch.
func target(s *checkpointd.Session) string {
	var parts []string
	if s.Issue > 0 {
		parts = append(parts, "#"+strconv.FormatInt(s.Issue, 10))
	}
	if s.PR > 0 {
		parts = append(parts, "!"+strconv.FormatInt(s.PR, 10))
	}
	if s.Branch != "" {
		parts = append(parts, s.Branch)
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}

func printSession(w io.Writer, s *checkpointd.Session) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("session", s.ID)
	row("repo", s.Repo)
	row("target", target(s))
	row("role", s.Role)
	state := string(s.State)
	if s.Outcome != "" {
		state += " (" + string(s.Outcome) + ")"
	}
	if s.EndedAt != nil {
		state += " at " + s.EndedAt.Local().Format(time.DateTime)
	}
	row("state", state)
	row("created", s.CreatedAt.Local().Format(time.DateTime))
	validity := string(s.Validity)
	if s.ValidityReason != "" {
		validity += ": " + s.ValidityReason
	}
	row("validity", validity+" (since "+s.ValidityAt.Local().Format(time.DateTime)+")")
	if r := s.CurrentRun; r != nil {
		row("run", fmt.Sprintf("%s (fencing token %d, started %s)", r.ID, r.FencingToken, r.StartedAt.Local().Format(time.DateTime)))
	}
	if s.Worktree != "" {
		row("worktree", s.Worktree)
	}
	if c := s.Latest; c != nil {
		complete := "complete"
		if !c.Complete {
			complete = "incomplete, missing " + strings.Join(c.Missing, ", ")
		}
		row("checkpoint", fmt.Sprintf("%d (%s) at %s", c.Seq, complete, c.CreatedAt.Local().Format(time.DateTime)))
		row("  stage", c.Stage)
		if c.Branch != "" || c.Head != "" {
			row("  branch", strings.TrimSpace(c.Branch+" "+c.Head))
		}
		row("  run", c.RunID)
	} else {
		row("checkpoint", "none yet")
	}
	tw.Flush()
}
