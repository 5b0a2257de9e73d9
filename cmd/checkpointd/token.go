package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

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
func tokenCommand(dataFlags []cli.Flag, stdout io.Writer) *cli.Command {
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
					&cli.StringSliceFlag{Name: "scope", Usage: "repo the token may act on: owner/name or owner/* (repeatable; none: every repo)"},
				},
				Action: func(ctx context.Context, c *cli.Command) error {
					role := checkpointd.TokenRole(c.String("role"))
					if !role.Valid() {
						return fmt.Errorf("--role must be agent, reader or operator, not %q", role)
					}
					name := strings.TrimSpace(c.String("name"))
					if err := checkpointd.ValidateTokenName(name); err != nil {
						return fmt.Errorf("--name %s", problemMessage(err))
					}
					scope := c.StringSlice("scope")
					for _, sc := range scope {
						if !checkpointd.ValidScope(sc) {
							return fmt.Errorf("--scope %q: want owner/name or owner/*", sc)
						}
					}
					s, err := openMigratedStore(ctx, c)
					if err != nil {
						return err
					}
					defer s.Close()
					secret := checkpointd.NewTokenSecret()
					t, err := s.CreateToken(ctx, name, role, scope, checkpointd.HashToken(secret))
					if err != nil {
						return err
					}
					fmt.Fprintf(stdout, "created %s token %s (%s)\n", t.Role, t.ID, t.Name)
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
					tokens, err := s.ListTokens(ctx)
					if err != nil {
						return err
					}
					tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "ID\tNAME\tROLE\tSCOPE\tCREATED\tREVOKED")
					for _, t := range tokens {
						revoked := "-"
						if t.RevokedAt != nil {
							revoked = t.RevokedAt.Format("2006-01-02T15:04:05Z")
						}
						scope := strings.Join(t.Scope, ",")
						if scope == "" {
							scope = "*"
						}
						fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, checkpointd.DisplayTokenName(t.Name), t.Role, scope, t.CreatedAt.Format("2006-01-02T15:04:05Z"), revoked)
					}
					return tw.Flush()
				},
			},
			{
				Name:      "revoke",
				Usage:     "revoke a token by id",
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
