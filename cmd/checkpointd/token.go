package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store"
)

// openMigratedStore opens the store for a command that may be the first to
// touch a new database.
func openMigratedStore(ctx context.Context, c *cli.Command) (*store.Store, error) {
	s, err := openStore(ctx, c, nil)
	if err != nil {
		return nil, err
	}
	if _, err := s.Migrate(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// problemMessage is what a validation error says about its first problem,
// without the API's framing.
func problemMessage(err error) string {
	var ve *checkpointd.ValidationError
	if errors.As(err, &ve) && len(ve.Problems) > 0 {
		return ve.Problems[0].Message
	}
	return err.Error()
}

// tokenCommand administers API tokens directly in the database, so it works
// for bootstrap and while a daemon serves the same database.
func tokenCommand(dataFlags []cli.Flag, stdout, stderr io.Writer) *cli.Command {
	return &cli.Command{
		Name:  "token",
		Usage: "create, list and revoke API tokens (directly in the database)",
		Flags: dataFlags,
		Commands: []*cli.Command{
			{
				Name:  "create",
				Usage: "create a token; prints it alone on the last line of stdout (it is shown once)",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "role", Required: true, Usage: "agent, reader or operator"},
					&cli.StringFlag{Name: "name", Required: true, Usage: "who or what the token is for"},
					&cli.StringSliceFlag{Name: "scope", Usage: "repo the token may act on: owner/name, owner/* or * (repeatable; none: every repo)"},
					&cli.DurationFlag{Name: "expires", Usage: "the token stops working this long after now, e.g. 720h (default: never)"},
				},
				Action: func(ctx context.Context, c *cli.Command) error {
					spec := checkpointd.TokenSpec{Role: checkpointd.TokenRole(c.String("role")), Name: strings.TrimSpace(c.String("name")),
						Scope: c.StringSlice("scope")}
					if !spec.Role.Valid() {
						return fmt.Errorf("--role must be agent, reader or operator, not %q", spec.Role)
					}
					if err := checkpointd.ValidateTokenName(spec.Name); err != nil {
						return fmt.Errorf("--name %s", problemMessage(err))
					}
					for _, sc := range spec.Scope {
						if !checkpointd.ValidScope(sc) {
							return fmt.Errorf("--scope %q: want owner/name, owner/* or *", sc)
						}
					}
					if c.IsSet("expires") {
						spec.ExpiresIn = c.Duration("expires")
						if spec.ExpiresIn <= 0 || spec.ExpiresIn > checkpointd.MaxTokenLifetime {
							return fmt.Errorf("--expires must be positive and at most %v, not %v", checkpointd.MaxTokenLifetime, spec.ExpiresIn)
						}
					}
					// The fixed words keep working (an agent token without
					// --scope may act on every repo), but say so: the API
					// refuses such a token unless "*" is said.
					if spec.Role == checkpointd.RoleAgent && len(spec.Scope) == 0 {
						fmt.Fprintln(stderr, `checkpointd: warning: this agent token may act on every repo; say --scope owner/name (or --scope '*') to make that explicit`)
					}
					s, err := openMigratedStore(ctx, c)
					if err != nil {
						return err
					}
					defer s.Close()
					secret := checkpointd.NewTokenSecret()
					t, err := s.CreateToken(ctx, spec, checkpointd.HashToken(secret))
					if err != nil {
						return err
					}
					expires := ""
					if t.ExpiresAt != nil {
						expires = ", expires " + stamp(*t.ExpiresAt, zoneOf(c))
					}
					fmt.Fprintf(stdout, "created %s token %s (%s%s)\n", t.Role, t.ID, t.Name, expires)
					fmt.Fprintln(stdout, secret)
					return nil
				},
			},
			{
				Name:  "list",
				Usage: "list tokens (never their secrets)",
				Action: func(ctx context.Context, c *cli.Command) error {
					s, err := openMigratedStore(ctx, c)
					if err != nil {
						return err
					}
					defer s.Close()
					tokens, err := s.ListTokens(ctx, "", 0)
					if err != nil {
						return err
					}
					printTokens(stdout, tokens, zoneOf(c))
					return nil
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a token by id (or its start)",
				ArgsUsage: "TOKEN_ID",
				Action: func(ctx context.Context, c *cli.Command) error {
					id := c.Args().First()
					if id == "" {
						return argError(c, "want a TOKEN_ID (token list shows them)")
					}
					s, err := openMigratedStore(ctx, c)
					if err != nil {
						return err
					}
					defer s.Close()
					id, err = resolveID(c, id, idKind{prefix: checkpointd.PrefixToken, noun: "token", list: "checkpointd token list", local: true,
						find: func(prefix string) ([]string, bool, error) {
							tokens, err := s.ListTokens(ctx, "", 0)
							var ids []string
							for _, t := range tokens {
								if strings.HasPrefix(t.ID, prefix) {
									ids = append(ids, t.ID)
								}
							}
							return ids, false, err
						}})
					if err != nil {
						return err
					}
					if err := s.RevokeToken(ctx, id); err != nil {
						if errors.Is(err, checkpointd.ErrNotFound) {
							return fmt.Errorf("no unrevoked token %s", id)
						}
						return err
					}
					fmt.Fprintf(stdout, "revoked %s\n", id)
					return nil
				},
			},
		},
	}
}

// printTokens lists tokens as `token list` shows them.
func printTokens(w io.Writer, tokens []checkpointd.Token, zone *time.Location) {
	at := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return stamp(*t, zone)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tROLE\tSCOPE\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
	for _, t := range tokens {
		scope := strings.Join(t.Scope, ",")
		if scope == "" {
			scope = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, checkpointd.DisplayTokenName(t.Name), t.Role, scope,
			at(&t.CreatedAt), at(t.ExpiresAt), at(t.LastUsedAt), at(t.RevokedAt))
	}
	_ = tw.Flush()
}
