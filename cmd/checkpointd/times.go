package main

import (
	"time"

	"github.com/urfave/cli/v3"
)

// The CLI prints every time one way: to the second, in the local zone
// with the zone's name, or in UTC with --utc (a flag of the root command,
// so it goes before or after the command's name). Ages ("3m") stay ages.
const timeLayout = "2006-01-02 15:04:05 MST"

// utcFlag is --utc.
func utcFlag() cli.Flag {
	return &cli.BoolFlag{Name: "utc", Usage: "print times in UTC instead of the local time zone"}
}

// zoneOf is the zone the command prints times in.
func zoneOf(c *cli.Command) *time.Location {
	if c.Bool("utc") {
		return time.UTC
	}
	return time.Local
}

// nowIn is the time now in the zone the command prints times in: the
// printers that show ages as well take the zone from it.
func nowIn(c *cli.Command) time.Time { return time.Now().In(zoneOf(c)) }

// stamp is t as the CLI prints a time, in zone.
func stamp(t time.Time, zone *time.Location) string { return t.In(zone).Format(timeLayout) }
