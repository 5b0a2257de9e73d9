package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
)

// TestTimesOneFormat: every time the CLI prints is to the second with its
// zone's name; --utc (before or after the command) switches the zone.
func TestTimesOneFormat(t *testing.T) {
	at := time.Date(2026, 3, 1, 7, 55, 37, 500, time.UTC)
	cet := time.FixedZone("CET", 3600)
	if got := eventLine(&checkpointd.Event{Seq: 1, At: at, Kind: "session.created"}, cet); !strings.Contains(got, "2026-03-01 08:55:37 CET") {
		t.Errorf("an event in CET: %q", got)
	}
	if got := when(at, at.Add(time.Minute).In(cet)); got != "2026-03-01 08:55:37 CET (1m ago)" {
		t.Errorf("when in CET: %q", got)
	}
	for _, args := range [][]string{{"checkpointd", "--utc", "sub"}, {"checkpointd", "sub", "--utc"}, {"checkpointd", "sub"}} {
		var zone *time.Location
		app := &cli.Command{Name: "checkpointd", Flags: []cli.Flag{utcFlag()},
			Commands: []*cli.Command{{Name: "sub", Action: func(_ context.Context, c *cli.Command) error { zone = zoneOf(c); return nil }}}}
		if err := app.Run(t.Context(), args); err != nil {
			t.Fatal(err)
		}
		want := time.Local
		if len(args) == 3 {
			want = time.UTC
		}
		if zone != want {
			t.Errorf("%v: zone %v, want %v", args, zone, want)
		}
	}
	// The real command tree takes it too.
	db := storeArgs(t.TempDir(), "")
	out, errOut, err := runCLI(t, nil, append(append([]string{"--utc", "token"}, db...), "create", "--role", "operator", "--name", "u", "--expires", "1h")...)
	if err != nil || !regexp.MustCompile(`expires \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)`).MatchString(out) {
		t.Errorf("checkpointd --utc token create: %v %s\n%s", err, errOut, out)
	}
}
