package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/checkpointd/checkpointd"
)

// printSessionView is `sessions show` for a person: a "key  value" block
// (identity, agent, run, validity, latest checkpoint with its blocker,
// next action and recovery, the resume verdict), then the leases held and
// the latest events as tables; times in now's zone.
func printSessionView(w io.Writer, v *sessionView, now time.Time) error {
	d, err := decodeView(v)
	if err != nil {
		return err
	}
	s := &d.session
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
		state += " at " + when(*s.EndedAt, now)
	}
	row("state", state)
	row("created", when(s.CreatedAt, now))
	if s.Worktree != "" {
		row("worktree", s.Worktree)
	}
	printRun(row, s, now)
	validity := string(s.Validity)
	if s.ValidityReason != "" {
		validity += ": " + s.ValidityReason
	}
	row("validity", validity+" (since "+when(s.ValidityAt, now)+")")
	printCheckpoint(row, s, d.checkpoint, now)
	printResume(row, s, d)
	tw.Flush()
	printHeldLeases(w, d.leases, now)
	printShowEvents(w, d.events, now.Location())
	return nil
}

// when is a time for a person, in now's zone, with how long ago.
func when(t time.Time, now time.Time) string {
	return stamp(t, now.Location()) + " (" + age(now.Sub(t)) + " ago)"
}

// printRun tells the agent and its run: live, unresponsive since when,
// or parked (no run) with what to do.
func printRun(row func(k, v string), s *checkpointd.Session, now time.Time) {
	r := s.CurrentRun
	if r == nil {
		if s.State == checkpointd.SessionActive {
			row("run", "none: the session is parked; the next run takes it over (or: checkpointd sessions end "+s.ID+" --outcome abandoned --reason …)")
		}
		return
	}
	a := r.Agent
	agent := strings.TrimSpace(strings.Join([]string{a.Runtime, a.RuntimeVersion}, " "))
	if a.Provider != "" || a.Model != "" {
		agent += " (" + strings.Trim(a.Provider+"/"+a.Model, "/") + ")"
	}
	if a.Instance != "" {
		agent += " on " + a.Instance
	}
	row("agent", strings.TrimSpace(agent))
	run := fmt.Sprintf("%s (fencing token %d, started %s)", r.ID, r.FencingToken, when(r.StartedAt, now))
	if r.TakeoverReason != "" {
		run += fmt.Sprintf(", took over: %q", r.TakeoverReason)
	}
	row("run", run)
	seen := "never heard from"
	if r.LastSeenAt != nil {
		seen = "last seen " + when(*r.LastSeenAt, now)
	}
	switch {
	case r.Live == nil:
		row("  live", seen)
	case *r.Live:
		row("  live", "live, "+seen)
	default:
		row("  live", "unresponsive, "+seen+"; if the agent is gone: checkpointd sessions park "+s.ID+" --reason …")
	}
}

// printCheckpoint tells the latest checkpoint: its summary from the
// session, then from the document what it waits for, what comes next and
// how to recover.
func printCheckpoint(row func(k, v string), s *checkpointd.Session, cp *checkpointd.Checkpoint, now time.Time) {
	c := s.Latest
	if c == nil {
		row("checkpoint", "none yet")
		return
	}
	complete := "complete"
	if !c.Complete {
		complete = "incomplete, missing " + strings.Join(c.Missing, ", ")
	}
	row("checkpoint", fmt.Sprintf("%d (%s) at %s", c.Seq, complete, when(c.CreatedAt, now)))
	row("  stage", c.Stage)
	if c.Branch != "" || c.Head != "" {
		row("  branch", strings.TrimSpace(c.Branch+" "+c.Head))
	}
	row("  run", c.RunID)
	if cp == nil {
		return
	}
	if b := cp.Blocker; b != nil {
		v := b.Kind
		if b.Summary != "" {
			v += ": " + b.Summary
		}
		if b.WaitingOn != "" {
			v += " (waiting on " + b.WaitingOn + ")"
		}
		row("blocker", v)
	}
	if n := cp.NextAction; n != nil {
		actor := n.Actor
		if actor == "" {
			actor = "-"
		}
		row("next action", actor+": "+n.Action)
		if n.Prompt != "" {
			row("  prompt", n.Prompt)
		}
	}
	if r := cp.Recovery; r != nil {
		row("recovery", r.Instructions)
		for _, cmd := range r.Commands {
			row("", "$ "+cmd)
		}
	}
	if p := cp.PendingOperation; p != nil {
		row("pending op", strings.TrimSuffix(p.Kind+": "+p.Summary, ": "))
	}
}

// printResume tells the resume verdict; a token that may not read it (a
// reader's) gets the validity, which says the same for valid or not, and
// the pending mutation from the document.
func printResume(row func(k, v string), s *checkpointd.Session, d *decoded) {
	if r := d.resume; r != nil {
		v := "resumable"
		if !r.Resumable {
			// The stable words on the line, what each means below it.
			words := make([]string, 0, len(r.Explanations))
			for _, e := range r.Explanations {
				words = append(words, e.Reason)
			}
			if len(words) == 0 {
				words = r.Reasons
			}
			v = "not resumable: " + strings.Join(words, ", ")
		}
		row("resume", v)
		for _, e := range r.Explanations {
			row("", "- "+e.Reason+": "+e.Explanation)
		}
		if p := r.PendingMutation; p != nil {
			row("pending", pendingMutation(p.Kind, p.Target, p.IdempotencyKey, p.Summary, p.MutationAnswer))
		}
		return
	}
	if e := d.resumeErr; e != nil {
		why := describeProblem(e)
		if e.Status == 403 {
			why = "the token may not read it (GET …/resume needs an agent or operator token)"
		}
		v := fmt.Sprintf("not read: %s; validity %s", why, s.Validity)
		if s.Validity != checkpointd.ValidityValid {
			v += ", so not resumable"
		}
		row("resume", v)
	}
	if d.checkpoint != nil && d.checkpoint.PendingMutation != nil {
		p := d.checkpoint.PendingMutation
		row("pending", pendingMutation(p.Kind, p.Target, p.IdempotencyKey, p.Summary,
			checkpointd.MutationAnswer{Outcome: checkpointd.MutationUnknown, Reason: "the resume answer was not read"}))
	}
}

func pendingMutation(kind, target, key, summary string, ans checkpointd.MutationAnswer) string {
	v := kind
	if target != "" {
		v += " on " + target
	}
	if summary != "" {
		v += ": " + summary
	}
	v += " — " + string(ans.Outcome)
	if ans.Reason != "" {
		v += " (" + ans.Reason + ")"
	}
	switch {
	case ans.Outcome == checkpointd.MutationDone:
		v += "; do not do it again"
	case ans.Outcome == checkpointd.MutationNotDone:
		v += "; do it, with the same idempotency key"
	case key != "":
		v += "; check it by its idempotency key " + key + " before acting again"
	}
	return v
}

func printHeldLeases(w io.Writer, leases []checkpointd.Lease, now time.Time) {
	if len(leases) == 0 {
		fmt.Fprintln(w, "leases: none held")
		return
	}
	fmt.Fprintf(w, "leases held: %d\n", len(leases))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  LEASE\tRESOURCE\tTOKEN\tEXPIRES")
	for _, l := range leases {
		fmt.Fprintf(tw, "  %s\t%s\t%d\tin %s\n", l.ID, resourceName(l.Resource), l.FencingToken, age(l.ExpiresAt.Sub(now)))
	}
	tw.Flush()
}

func printShowEvents(w io.Writer, events []checkpointd.Event, zone *time.Location) {
	if len(events) == 0 {
		return
	}
	fmt.Fprintf(w, "latest events (all: checkpointd events %s):\n", events[0].SessionID)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, e := range events {
		fmt.Fprintln(tw, "  "+eventLine(&e, zone))
	}
	tw.Flush()
}
