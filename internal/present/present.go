// Package present holds how the CLI and the console show a session to a
// person, so both say the same thing the same way.
package present

import (
	"strconv"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
)

// Target names what a session works on: #issue, !pr, branch ("" for
// none).
func Target(s *checkpointd.Session) string {
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
	return strings.Join(parts, " ")
}

// Age is a duration in at most three characters and one unit, the way
// kubectl shows ages: 45s, 12m, 5h, 3d (days past 99 are still days).
func Age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return strconv.Itoa(int(d/time.Second)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d/time.Minute)) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d/time.Hour)) + "h"
	}
	return strconv.Itoa(int(d/(24*time.Hour))) + "d"
}
