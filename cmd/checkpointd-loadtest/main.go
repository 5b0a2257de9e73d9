// Command checkpointd-loadtest measures checkpoint writes through the HTTP
// API of a running daemon, for capacity planning (docs/performance.md). It
// is a binary of its own: the daemon's carries no load generator.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd/internal/envvar"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkpointd-loadtest:", err)
		os.Exit(1)
	}
}

// run is the whole program: main only wires signals and exit codes.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	from := envvar.From(getenv)
	cmd := loadtestCommand(from, []cli.Flag{
		&cli.StringFlag{Name: "url", Value: "http://127.0.0.1:8080", Sources: from("CHECKPOINTD_URL"), Usage: "base URL of a running daemon"},
		&cli.StringFlag{Name: "token", Sources: from("CHECKPOINTD_TOKEN"), Usage: "agent or operator API token (required; reads no token file)"},
	}, stdout)
	cmd.Name, cmd.Writer, cmd.ErrWriter = "checkpointd-loadtest", stdout, stderr
	// Errors are printed once by main, not by the CLI library as well.
	cmd.ExitErrHandler = func(context.Context, *cli.Command, error) {}
	return cmd.Run(ctx, args)
}

// version names the build for the User-Agent: the module version, else
// "devel", and the VCS revision when the go command recorded one.
func version() string {
	v, rev := "devel", ""
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				rev = s.Value[:12]
			}
		}
	}
	if rev != "" {
		return v + "+" + rev
	}
	return v
}
