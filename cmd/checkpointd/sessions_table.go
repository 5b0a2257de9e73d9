package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
)

// The session table. Every column of the fleet view (14) cannot fit 120
// columns: the default table keeps the columns an operator scans a fleet
// by (who works where, alive or not, at which stage, how old, valid or
// not, waiting on whom), shows the session id short (present.ShortID: a
// prefix every command takes) and fits the line in lsWidth by cutting the
// widest values with an ellipsis, only as much as needed; --wide shows the
// whole id and adds role, instance, completeness, next actor and leases,
// and cuts nothing.

// lsWidth is the line the default table fits in.
const lsWidth = 120

// lsColumn is one column of the table: its header, its value for a
// session, the width it may be cut down to (0: never cut, as the id) and
// whether only --wide shows it. The repo, target and stage keep the most:
// they say what the work is and where it stands.
type lsColumn struct {
	header string
	value  func(s *checkpointd.Session, now time.Time, wide bool) string
	cut    int
	wide   bool
}

var lsColumns = []lsColumn{
	{"SESSION", sessionID, 0, false},
	{"REPO", func(s *checkpointd.Session, _ time.Time, _ bool) string { return s.Repo }, 14, false},
	{"TARGET", func(s *checkpointd.Session, _ time.Time, _ bool) string { return target(s) }, 14, false},
	{"ROLE", func(s *checkpointd.Session, _ time.Time, _ bool) string { return s.Role }, 6, true},
	{"AGENT", func(s *checkpointd.Session, _ time.Time, _ bool) string { return agentName(s) }, 8, false},
	{"INSTANCE", func(s *checkpointd.Session, _ time.Time, _ bool) string { return agentOf(s).Instance }, 8, true},
	{"LIVE", liveness, 0, false},
	{"STAGE", func(s *checkpointd.Session, _ time.Time, _ bool) string { return latestStage(s) }, 17, false},
	{"AGE", checkpointAge, 0, false},
	{"COMPLETE", func(s *checkpointd.Session, _ time.Time, _ bool) string { return completeness(s) }, 0, true},
	{"VALIDITY", func(s *checkpointd.Session, _ time.Time, _ bool) string { return string(s.Validity) }, 0, false},
	{"WAITING", func(s *checkpointd.Session, _ time.Time, _ bool) string { return waitingOn(s) }, 8, false},
	{"NEXT", func(s *checkpointd.Session, _ time.Time, _ bool) string { return nextActor(s) }, 6, true},
	{"LEASES", func(s *checkpointd.Session, _ time.Time, _ bool) string { return leaseCount(s) }, 0, true},
}

// lsPadding is the space between columns.
const lsPadding = 2

func printSessions(w io.Writer, items []checkpointd.Session, now time.Time, wide, noHeaders bool) {
	if len(items) == 0 {
		fmt.Fprintln(w, "no sessions")
		return
	}
	var cols []lsColumn
	for _, col := range lsColumns {
		if wide || !col.wide {
			cols = append(cols, col)
		}
	}
	rows := make([][]string, 0, len(items)+1)
	head := make([]string, len(cols))
	for i, col := range cols {
		head[i] = col.header
	}
	rows = append(rows, head)
	for i := range items {
		row := make([]string, len(cols))
		for j, col := range cols {
			if row[j] = col.value(&items[i], now, wide); row[j] == "" {
				row[j] = "-"
			}
		}
		rows = append(rows, row)
	}
	if !wide {
		fitColumns(cols, rows, lsWidth)
	}
	tw := tabwriter.NewWriter(w, 0, 4, lsPadding, ' ', 0)
	for i, row := range rows {
		if i == 0 && noHeaders {
			continue // measured with the header, so the columns stay put
		}
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	tw.Flush()
}

// fitColumns cuts the values of the columns that may be cut so that a
// line fits in width: the column furthest over its cut width loses a
// character at a time, down to that width, until the line fits or nothing
// can be cut. So a long agent name gives way before a stage does.
func fitColumns(cols []lsColumn, rows [][]string, width int) {
	widths := make([]int, len(cols))
	for _, row := range rows {
		for j, v := range row {
			widths[j] = max(widths[j], utf8.RuneCountInString(v))
		}
	}
	total := lsPadding * (len(cols) - 1)
	for _, n := range widths {
		total += n
	}
	for total > width {
		most, over := -1, 0
		for j, col := range cols {
			if n := widths[j] - max(col.cut, len(col.header)); col.cut > 0 && n > over {
				most, over = j, n
			}
		}
		if most < 0 {
			break
		}
		widths[most]--
		total--
	}
	for _, row := range rows[1:] {
		for j := range row {
			row[j] = ellipsis(row[j], widths[j])
		}
	}
}

// ellipsis cuts s to n runes, the last one an ellipsis when it cut.
func ellipsis(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// sessionID is the id as the table shows it: short, whole with --wide.
func sessionID(s *checkpointd.Session, _ time.Time, wide bool) string {
	if wide {
		return s.ID
	}
	return present.ShortID(s.ID)
}

// target is present.Target, "-" for none (a column is never empty).
func target(s *checkpointd.Session) string {
	if t := present.Target(s); t != "" {
		return t
	}
	return "-"
}

// agentOf is the agent of the session's current run (none while parked
// or ended).
func agentOf(s *checkpointd.Session) checkpointd.Agent {
	if s.CurrentRun == nil {
		return checkpointd.Agent{}
	}
	return s.CurrentRun.Agent
}

// agentName is runtime/model, or whichever of the two is known.
func agentName(s *checkpointd.Session) string {
	a := agentOf(s)
	switch {
	case a.Runtime != "" && a.Model != "":
		return a.Runtime + "/" + a.Model
	case a.Runtime != "":
		return a.Runtime
	}
	return a.Model
}

// liveness is the LIVE column: live, unresponsive with how long ago the
// run was last heard from ("unresp 3h" in the default table), parked, or
// ended; "?" from a daemon that does not judge liveness.
func liveness(s *checkpointd.Session, now time.Time, wide bool) string {
	switch {
	case s.State == checkpointd.SessionEnded:
		return "ended"
	case s.Parked || s.CurrentRun == nil:
		return "parked"
	case s.CurrentRun.Live == nil:
		return "?"
	case *s.CurrentRun.Live:
		return "live"
	}
	seen := "never"
	if t := s.CurrentRun.LastSeenAt; t != nil {
		seen = age(now.Sub(*t))
	}
	if wide {
		return "unresponsive (" + seen + ")"
	}
	return "unresp " + seen
}

func latestStage(s *checkpointd.Session) string {
	if s.Latest == nil {
		return ""
	}
	return s.Latest.Stage
}

// checkpointAge is how old the latest checkpoint is.
func checkpointAge(s *checkpointd.Session, now time.Time, _ bool) string {
	if s.Latest == nil {
		return "-"
	}
	return age(now.Sub(s.Latest.CreatedAt))
}

func completeness(s *checkpointd.Session) string {
	switch {
	case s.Latest == nil:
		return "-"
	case s.Latest.Complete:
		return "yes"
	}
	return "no"
}

// age is present.Age: the CLI and the console show ages alike.
func age(d time.Duration) string { return present.Age(d) }
