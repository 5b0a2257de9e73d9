package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	neturl "net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/envvar"
	"github.com/checkpointd/checkpointd/store"
)

// run is the whole program: main only wires signals and exit codes.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	return newApp(getenv, stdout, stderr).Run(ctx, hoistGlobalFlags(args))
}

// globalFlags may come before the command's name, as kubectl's do
// (`checkpointd --token X drain start`): each command defines them, and
// they are moved after its name. Each takes a value.
var globalFlags = map[string]bool{"url": true, "token": true, "data-dir": true, "database-url": true}

// hoistGlobalFlags moves the global flags that come before the first
// command name to the end of the arguments (before a "--"), where the
// command they belong to reads them; flags are read wherever they are
// among the arguments. Anything else before the command is left where it
// is, for the command line library to refuse or read.
func hoistGlobalFlags(args []string) []string {
	if len(args) < 2 {
		return args
	}
	var hoisted []string
	i := 1
	for i < len(args) {
		name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !strings.HasPrefix(args[i], "-") || args[i] == "--" || !globalFlags[name] {
			break
		}
		if hasValue {
			hoisted = append(hoisted, "--"+name+"="+value)
			i++
			continue
		}
		if i+1 >= len(args) {
			break // a flag without its value: let the library say so
		}
		hoisted = append(hoisted, "--"+name+"="+args[i+1])
		i += 2
	}
	if len(hoisted) == 0 {
		return args
	}
	rest := args[i:]
	out := append([]string{args[0]}, rest...)
	if dash := slices.Index(out, "--"); dash >= 0 {
		return slices.Concat(out[:dash], hoisted, out[dash:])
	}
	return append(out, hoisted...)
}

// newApp builds the command tree.
func newApp(getenv func(string) string, stdout, stderr io.Writer) *cli.Command {
	from := envvar.From(getenv)
	dataFlags := []cli.Flag{
		&cli.StringFlag{Name: "data-dir", Value: "data", Sources: from("CHECKPOINTD_DATA_DIR"),
			Usage: "directory for the SQLite database, the key file and the bootstrap operator token"},
		&cli.StringFlag{Name: "database-url", Sources: from("CHECKPOINTD_DATABASE_URL"),
			Usage: "postgres://… for PostgreSQL; empty for SQLite at <data-dir>/checkpointd.db"},
	}
	logFlags := []cli.Flag{
		&cli.StringFlag{Name: "log-format", Value: "text", Sources: from("CHECKPOINTD_LOG_FORMAT"), Usage: "text or json"},
		&cli.StringFlag{Name: "log-level", Value: "info", Sources: from("CHECKPOINTD_LOG_LEVEL"), Usage: "debug, info, warn or error"},
	}
	clientFlagsWith := func(tokenUsage string) []cli.Flag {
		return []cli.Flag{
			&cli.StringFlag{Name: "url", Value: "http://127.0.0.1:8080", Sources: from("CHECKPOINTD_URL"), Usage: "base URL of a running daemon"},
			&cli.StringFlag{Name: "token", Sources: from("CHECKPOINTD_TOKEN"), Usage: tokenUsage},
		}
	}
	clientFlags := clientFlagsWith("API token (default: the bootstrap operator token in <data-dir>/operator.token)")
	app := &cli.Command{
		Name:      "checkpointd",
		Usage:     "durable, redacted checkpoints and fenced leases for autonomous coding agents on Gitea/Forgejo",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once by main, not by the CLI library as well.
		ExitErrHandler: func(context.Context, *cli.Command, error) {},
		// `checkpointd completion bash|zsh|fish` prints the script; the
		// scripts ask the binary itself which words follow.
		EnableShellCompletion: true,
		Flags:                 []cli.Flag{utcFlag()},
		Commands: []*cli.Command{
			serveCommand(from, dataFlags, logFlags, getenv),
			{
				Name:  "migrate",
				Usage: "apply pending database migrations and exit",
				Flags: append(append([]cli.Flag{}, dataFlags...), logFlags...),
				Action: func(ctx context.Context, c *cli.Command) error {
					s, err := openStore(ctx, c, nil)
					if err != nil {
						return err
					}
					defer s.Close()
					v, err := s.Migrate(ctx)
					if err != nil {
						return err
					}
					fmt.Fprintf(stdout, "database at version %d\n", v)
					return nil
				},
			},
			tokenCommand(dataFlags, stdout, stderr),
			keyCommand(from, dataFlags, getenv, stdout),
			reconcileCommand(from, clientFlags, stdout),
			drainCommand(from, clientFlags, stdout),
			sessionsCommand(from, clientFlags, stdout),
			leasesCommand(from, clientFlags, stdout),
			eventsCommand(from, clientFlags, stdout),
			errorsCommand(from, clientFlags, stdout),
			mcpCommand(clientFlagsWith("agent token the tools act with (required; the bridge reads no token file)")),
			watchCommand(from, clientFlags, stdout),
			{
				Name:  "version",
				Usage: "print the version",
				Action: func(context.Context, *cli.Command) error {
					fmt.Fprintln(stdout, "checkpointd", version())
					return nil
				},
			},
		},
	}
	finishCommandTree(app)
	return app
}

// databaseURL is the configured database, or SQLite in the data directory.
func databaseURL(c *cli.Command) string {
	if u := c.String("database-url"); u != "" {
		return strings.TrimPrefix(u, "sqlite://")
	}
	return filepath.Join(c.String("data-dir"), "checkpointd.db")
}

// checkDatabaseURL refuses a --database-url that is neither PostgreSQL
// nor SQLite before anything is created: any other "scheme://…" would
// otherwise become the path of a new SQLite file. The message never
// repeats the URL, which may carry a password.
func checkDatabaseURL(c *cli.Command) error {
	raw := c.String("database-url")
	scheme, _, hasScheme := strings.Cut(raw, "://")
	switch {
	case store.IsPostgres(raw):
		if _, err := neturl.Parse(raw); err != nil {
			return errors.New("--database-url is not a valid postgres:// URL (a character in the password may need %-escaping)")
		}
	case hasScheme && scheme != "sqlite" && !strings.ContainsAny(scheme, "/\\"):
		return fmt.Errorf("--database-url with scheme %q: want postgres://… (or postgresql://…) for PostgreSQL, or sqlite://PATH or a file path for SQLite", scheme)
	}
	return nil
}

func openStore(ctx context.Context, c *cli.Command, log *slog.Logger) (*store.Store, error) {
	if err := checkDatabaseURL(c); err != nil {
		return nil, err
	}
	url := databaseURL(c)
	if !store.IsPostgres(url) {
		if err := ensureDir(filepath.Dir(url)); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// --database-max-conns is serve's; other commands take the default.
	return store.Open(ctx, store.Config{URL: url, Logger: log, Clock: checkpointd.SystemClock{}, MaxConns: int(c.Int("database-max-conns"))})
}

func newLogger(c *cli.Command, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch c.String("log-format") {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format must be text or json, not %q", c.String("log-format"))
}
