package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/present"
)

// errNoDrain reports a status or wait with no drain open.
var errNoDrain = errors.New("no drain is open: start one with: checkpointd drain start --reason …")

// waitDrained polls the status until nothing blocks the drain, printing a
// progress line whenever the counts change, and the sessions still
// blocking when it gives up.
func waitDrained(ctx context.Context, cl *client.Client, w io.Writer, limit int, timeout, interval time.Duration) error {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	// --timeout bounds the waiting, not a poll: a poll in flight at the
	// deadline finishes (within --request-timeout), so even a short wait
	// reports where the drain stands.
	start := time.Now()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	var last checkpointd.DrainCounts
	var seen *drainStatus // the last status read
	for first := true; ; first = false {
		st, err := cl.Drain().Status(ctx, client.ListOptions{Limit: limit})
		if err != nil {
			return apiError("drain status", err)
		}
		if st.Drain == nil || !st.Draining || st.Counts == nil {
			return errNoDrain
		}
		seen = st
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
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain status --wait: %w", context.Cause(ctx))
		case <-deadline.C:
			printBlocking(w, seen.Blocking, last.Blocking)
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
	if len(st.Replicas) > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "REPLICA\tHOST\tPID\tVERSION\tLAST HEARD\tPENDING")
		for _, r := range st.Replicas {
			pending := fmt.Sprint(r.Pending)
			if r.Unknown != "" {
				pending = string(r.Unknown)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s ago\t%s\n", r.ID, r.Host, r.PID, r.Version,
				now.Sub(r.HeardAt).Round(time.Second), pending)
		}
		tw.Flush()
	}
	if st.Notice != "" {
		fmt.Fprintln(w, "note: "+st.Notice)
	}
}

// drainWhen says when a drain entered the state it is in: a running one
// since its start, an ended one at its end (ended_at; lifted_at for a
// completed drain that no longer gates), with how long it ran.
func drainWhen(d *checkpointd.Drain, now time.Time) string {
	at := func(t time.Time) string { return stamp(t, now.Location()) }
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", present.ShortID(b.SessionID), b.Repo, b.Role, strings.Join(reasons, "; "), action)
	}
	tw.Flush()
	// Then the action in words, naming the session's own command.
	for _, b := range bs {
		if b.Unblock != nil {
			fmt.Fprintf(w, "  %s: %s\n", present.ShortID(b.SessionID), b.Unblock.Detail)
		}
	}
	if more := total - int64(len(bs)); more > 0 {
		fmt.Fprintf(w, "… and %d more (--limit, or GET /v1/drain with its cursor)\n", more)
	}
}
