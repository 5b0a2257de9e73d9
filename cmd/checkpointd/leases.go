package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/present"
)

// leasesCommand lists the leases of a running daemon (reader) and
// force-releases one (operator).
func leasesCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	withJSON := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", true)
	plain := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", false)
	return &cli.Command{
		Name:  "leases",
		Usage: "list the leases of a running daemon, and force-release one",
		Commands: []*cli.Command{
			{
				Name:  "ls",
				Usage: "list leases, newest first (GET /v1/leases)",
				Flags: withJSON(
					&cli.StringFlag{Name: "repo", Usage: "owner/name"},
					&cli.StringFlag{Name: "session", Usage: "a session id (or its start): its leases only"},
					&cli.StringFlag{Name: "kind", Usage: "issue, pr or branch"},
					&cli.StringFlag{Name: "state", Usage: "held, released or expired"},
					&cli.IntFlag{Name: "limit", Value: 50, Usage: "how many leases (1-500)"},
					&cli.StringFlag{Name: "cursor", Usage: "the cursor a previous page printed (with the same filters)"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					opts := client.LeaseListOptions{Repo: c.String("repo"), SessionID: c.String("session"),
						Kind: checkpointd.ResourceKind(c.String("kind")), State: checkpointd.LeaseState(c.String("state")),
						ListOptions: client.ListOptions{Limit: c.Int("limit"), Cursor: c.String("cursor")}}
					cl, err := newReaderClient(c)
					if err != nil {
						return err
					}
					if opts.SessionID != "" {
						if opts.SessionID, err = resolveSession(ctx, c, cl, opts.SessionID); err != nil {
							return err
						}
					}
					if forScripts(c) {
						q := url.Values{}
						for k, v := range map[string]string{"repo": opts.Repo, "session_id": opts.SessionID, "kind": string(opts.Kind),
							"state": string(opts.State), "cursor": opts.Cursor, "limit": strconv.Itoa(opts.Limit)} {
							if v != "" && v != "0" {
								q.Set(k, v)
							}
						}
						var raw json.RawMessage
						if err := cl.Do(ctx, http.MethodGet, "/v1/leases", q, nil, &raw); err != nil {
							return apiError("leases ls", err)
						}
						return printAnswer(c, stdout, raw)
					}
					page, err := cl.Leases().List(ctx, opts)
					if err != nil {
						return apiError("leases ls", err)
					}
					printLeases(stdout, page.Items, time.Now(), outputOf(c) == "wide")
					if page.NextCursor != "" {
						fmt.Fprintf(stdout, "more: --cursor %s\n", page.NextCursor)
					}
					return nil
				},
			},
			{
				Name:      "release",
				Usage:     "force-release a lease whatever run holds it (DELETE /v1/leases/{id} without run_id; operator): the resource is free for another run, and the holder's next renewal gets lease_lost",
				ArgsUsage: "ID",
				Flags:     plain(),
				Action: func(ctx context.Context, c *cli.Command) error {
					if c.Args().Len() != 1 {
						return argError(c, "want exactly one lease id")
					}
					cl, err := newOperatorClient(c)
					if err != nil {
						return err
					}
					id, err := resolveLease(ctx, c, cl, c.Args().First())
					if err != nil {
						return err
					}
					if err := cl.Leases().Release(ctx, id, ""); err != nil {
						var pe *client.Error
						if errors.As(err, &pe) && pe.Status == http.StatusNotFound {
							return fmt.Errorf("leases release: no lease %s in the token's scope (404 not_found); list them with: checkpointd leases ls", id)
						}
						if isCode(err, "invalid_request") {
							return fmt.Errorf("leases release: %s (a force release needs an operator token)", describeProblem(pe))
						}
						return apiError("leases release", err)
					}
					fmt.Fprintf(stdout, "lease %s released; its holder's next renewal or checkpoint naming it gets lease_lost\n", id)
					return nil
				},
			},
		},
	}
}

// printLeases lists leases as `leases ls` shows them: ids short (whole
// with -o wide), as `sessions ls` shows them.
func printLeases(w io.Writer, items []checkpointd.Lease, now time.Time, wide bool) {
	short := present.ShortID
	if wide {
		short = func(id string) string { return id }
	}
	if len(items) == 0 {
		fmt.Fprintln(w, "no leases")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LEASE\tRESOURCE\tSESSION\tTOKEN\tSTATE\tUNTIL")
	for _, l := range items {
		state, until := string(l.State), ""
		switch {
		case l.State == checkpointd.LeaseHeld && !now.Before(l.ExpiresAt):
			state, until = "expired", age(now.Sub(l.ExpiresAt))+" ago"
		case l.State == checkpointd.LeaseHeld:
			until = "in " + age(l.ExpiresAt.Sub(now))
		case l.EndedAt != nil:
			until = age(now.Sub(*l.EndedAt)) + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", short(l.ID), ellipsis(resourceName(l.Resource), 24), short(l.Holder.SessionID),
			l.FencingToken, state, until)
	}
	tw.Flush()
}

// resourceName is a resource the way the forge names it: owner/name#12
// (issue), owner/name!7 (PR), owner/name@branch.
func resourceName(r checkpointd.Resource) string {
	switch r.Kind {
	case checkpointd.ResourceIssue:
		return r.Repo + "#" + strconv.FormatInt(r.Number, 10)
	case checkpointd.ResourcePR:
		return r.Repo + "!" + strconv.FormatInt(r.Number, 10)
	}
	return r.Repo + "@" + r.Branch
}

// resolveLease is the whole id of the lease a person named (resolveID),
// in any state, in the token's scope.
func resolveLease(ctx context.Context, c *cli.Command, cl *client.Client, arg string) (string, error) {
	return resolveID(c, arg, idKind{prefix: checkpointd.PrefixLease, noun: "lease", list: "checkpointd leases ls",
		find: func(prefix string) ([]string, bool, error) {
			page, err := cl.Leases().List(ctx, client.LeaseListOptions{IDPrefix: prefix, ListOptions: client.ListOptions{Limit: 3}})
			if err != nil {
				return nil, false, err
			}
			ids := make([]string, len(page.Items))
			for i, l := range page.Items {
				ids[i] = l.ID
			}
			return ids, page.NextCursor != "", nil
		}})
}
