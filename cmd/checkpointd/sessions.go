package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// sessionsCommand lists, shows, parks, ends and force-clears the sessions
// of a running daemon. Reading takes a reader token; acting an operator's.
func sessionsCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	withJSON := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", true)
	plain := operatorFlags(from, clientFlags, 30*time.Second, "how long one request may take", false)
	return &cli.Command{
		Name:  "sessions",
		Usage: "list, show, park, end and force-clear the sessions of a running daemon",
		Commands: []*cli.Command{
			{
				Name:  "ls",
				Usage: "list sessions, one line each, most recently active first (GET /v1/sessions)",
				Flags: withJSON(
					&cli.StringFlag{Name: "state", Usage: "active or ended (default: active, unless --all)"},
					&cli.BoolFlag{Name: "all", Usage: "ended sessions too (by default ls lists the active ones)"},
					&cli.StringFlag{Name: "repo", Usage: "owner/name, or owner/* for every repository of an owner"},
					&cli.StringFlag{Name: "validity", Usage: "valid, stale, lease_lost, invalidated or unverified"},
					&cli.StringFlag{Name: "stage", Usage: "the latest checkpoint's stage, e.g. blocked"},
					&cli.StringFlag{Name: "waiting-on", Usage: "the latest checkpoint's blocker.waiting_on, e.g. operator"},
					&cli.StringFlag{Name: "live", Usage: "true: sessions whose run is live; false: unresponsive ones"},
					&cli.StringFlag{Name: "sort", Usage: "created (newest first) or activity (last heard from first); default activity, or the daemon's (created) with --json"},
					&cli.BoolFlag{Name: "wide", Usage: "every column (role, instance, completeness, next actor, leases), untruncated (-o wide)"},
					&cli.BoolFlag{Name: "no-headers", Usage: "no header line (for a script reading the table)"},
					&cli.IntFlag{Name: "limit", Value: 50, Usage: "how many sessions (1-500)"},
					&cli.StringFlag{Name: "cursor", Usage: "the cursor a previous page printed (with the same filters and --sort)"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					return sessionsLs(ctx, c, stdout)
				},
			},
			{
				Name:      "show",
				Usage:     "show everything about a session: agent, run and liveness, validity, latest checkpoint (blocker, next action, recovery), leases, resume verdict, recent events",
				ArgsUsage: "ID",
				Flags:     withJSON(&cli.IntFlag{Name: "events", Value: 10, Usage: "how many of the latest events to show (0: none)"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					return sessionsShow(ctx, c, stdout)
				},
			},
			{
				Name:      "park",
				Usage:     "supersede the session's current run without starting one (POST /v1/sessions/{id}/park): for an agent that died or must stop, also during a drain; the next run takes over",
				ArgsUsage: "ID",
				Flags:     withJSON(&cli.StringFlag{Name: "reason", Required: true, Usage: "why, kept (redacted) in the session's event log"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					reason := c.String("reason")
					return sessionAct(ctx, c, stdout, "park", map[string]string{"reason": reason},
						func(ctx context.Context, cl *client.Client, id string) (*checkpointd.Session, error) {
							return cl.Sessions().Park(ctx, id, reason)
						})
				},
			},
			{
				Name:      "end",
				Usage:     "end a session on behalf of its agent (POST /v1/sessions/{id}/end without run_id): its leases are released; the event names the operator's token and the reason",
				ArgsUsage: "ID",
				Flags: withJSON(
					&cli.StringFlag{Name: "outcome", Required: true, Usage: "abandoned or completed"},
					&cli.StringFlag{Name: "reason", Required: true, Usage: "why, kept (redacted) in the session's event log"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					outcome := checkpointd.Outcome(c.String("outcome"))
					if !outcome.Valid() {
						return argError(c, fmt.Sprintf("--outcome must be abandoned or completed, not %q", outcome))
					}
					in := &client.EndRequest{Outcome: outcome, Reason: c.String("reason")}
					return sessionAct(ctx, c, stdout, "end", in,
						func(ctx context.Context, cl *client.Client, id string) (*checkpointd.Session, error) {
							return cl.Sessions().End(ctx, id, in)
						})
				},
			},
			{
				Name:      "drop",
				Usage:     "force-clear a session with its checkpoints, runs, leases and events (DELETE /v1/sessions/{id}); irreversible, so --yes is required",
				ArgsUsage: "ID",
				Flags: plain(
					&cli.StringFlag{Name: "reason", Required: true, Usage: "why, kept (redacted) in the session's tombstone"},
					&cli.BoolFlag{Name: "yes", Usage: "confirm: the session cannot be restored"}),
				Action: func(ctx context.Context, c *cli.Command) error {
					id, err := sessionArg(c)
					if err != nil {
						return err
					}
					if !c.Bool("yes") {
						return fmt.Errorf("refusing to drop session %s without --yes: it deletes the session's checkpoints, runs, leases and events for good (a tombstone records the clear)", id)
					}
					cl, err := newOperatorClient(c)
					if err != nil {
						return err
					}
					if id, err = resolveSession(ctx, c, cl, id); err != nil {
						return err
					}
					if err := cl.Sessions().Clear(ctx, id, c.String("reason")); err != nil {
						if gone := goneError(id, err, zoneOf(c)); gone != nil {
							return gone
						}
						return fmt.Errorf("%s; nothing was cleared", sessionError("sessions drop", id, err))
					}
					fmt.Fprintf(stdout, "session %s cleared; later requests naming it answer 410 gone\n", id)
					return nil
				},
			},
		},
	}
}

// sessionAct runs an operator's action on one session (park, end: POST
// /v1/sessions/{id}/VERB with body) and says what it left; with --json it
// prints the daemon's answer as sent (the same request through client.Do).
func sessionAct(ctx context.Context, c *cli.Command, stdout io.Writer, verb string, body any,
	act func(context.Context, *client.Client, string) (*checkpointd.Session, error)) error {
	id, err := sessionArg(c)
	if err != nil {
		return err
	}
	cl, err := newOperatorClient(c)
	if err != nil {
		return err
	}
	if id, err = resolveSession(ctx, c, cl, id); err != nil {
		return err
	}
	fail := func(err error) error {
		if gone := goneError(id, err, zoneOf(c)); gone != nil {
			return gone
		}
		return sessionError("sessions "+verb, id, err)
	}
	if forScripts(c) {
		var raw json.RawMessage
		if err := cl.Do(ctx, http.MethodPost, "/v1/sessions/"+url.PathEscape(id)+"/"+verb, nil, body, &raw); err != nil {
			return fail(err)
		}
		return printAnswer(c, stdout, raw)
	}
	s, err := act(ctx, cl, id)
	if err != nil {
		return fail(err)
	}
	switch verb {
	case "park":
		fmt.Fprintf(stdout, "session %s parked: its run is superseded and no run is current; the session stays active and resumable\n", s.ID)
		fmt.Fprintf(stdout, "the next agent takes it over (POST /v1/sessions/%s/runs with takeover); or end it: checkpointd sessions end %s --outcome abandoned --reason …\n", s.ID, s.ID)
	case "end":
		fmt.Fprintf(stdout, "session %s ended (%s); its leases are released\n", s.ID, s.Outcome)
	}
	return nil
}

// sessionError is apiError with the words a person acts on for the
// answers about one session.
func sessionError(what, id string, err error) error {
	var pe *client.Error
	if errors.As(err, &pe) {
		switch {
		case pe.Status == http.StatusNotFound:
			return fmt.Errorf("%s: no session %s in the token's scope (404 not_found); list them with: checkpointd sessions ls", what, id)
		case pe.Code == "no_current_run":
			return fmt.Errorf("%s: session %s has no current run: it is already parked (409 no_current_run); end it instead: checkpointd sessions end %s --outcome abandoned --reason …", what, id, id)
		case pe.Code == "session_ended":
			return fmt.Errorf("%s: session %s has already ended (409 session_ended)", what, id)
		}
	}
	return apiError(what, err)
}

func sessionArg(c *cli.Command) (string, error) {
	if c.Args().Len() != 1 {
		return "", argError(c, "want exactly one session id")
	}
	return c.Args().First(), nil
}

// resolveSession is the whole id of the session a person named
// (resolveID): in any state, in the token's scope.
func resolveSession(ctx context.Context, c *cli.Command, cl *client.Client, arg string) (string, error) {
	return resolveID(c, arg, idKind{prefix: checkpointd.PrefixSession, noun: "session", list: "checkpointd sessions ls --all",
		find: func(prefix string) ([]string, bool, error) {
			page, err := cl.Sessions().List(ctx, client.SessionListOptions{IDPrefix: prefix, ListOptions: client.ListOptions{Limit: 3}})
			if err != nil {
				return nil, false, err
			}
			ids := make([]string, len(page.Items))
			for i, s := range page.Items {
				ids[i] = s.ID
			}
			return ids, page.NextCursor != "", nil
		}})
}

// idKind is what resolveID needs to know of one kind of id: its prefix,
// its name, the command that lists them, and how to find the ids that
// begin with a prefix (a few of them, and whether there are more).
type idKind struct {
	prefix, noun, list string
	// local says the ids are the database's own (tokens), not those in
	// the token's scope.
	local bool
	find  func(prefix string) (ids []string, more bool, err error)
}

// resolveID is the whole id a person named, as kubectl takes a unique
// prefix: a whole id is taken as it is; the start of one (with or
// without its kind's prefix, as tables show ids short) names the one
// whose id begins with it, or is refused: none begins with it, or
// several do (named, so the next try can be longer).
func resolveID(c *cli.Command, arg string, k idKind) (string, error) {
	whole := len(k.prefix) + 32
	if len(arg) == whole && strings.HasPrefix(arg, k.prefix) {
		return arg, nil
	}
	prefix := arg
	if !strings.HasPrefix(prefix, k.prefix) {
		prefix = k.prefix + prefix
	}
	if !hexRE.MatchString(prefix[len(k.prefix):]) || len(prefix) > whole {
		return "", argError(c, fmt.Sprintf("%q is not a %s id nor the start of one (%s and lowercase hex)", arg, k.noun, k.prefix))
	}
	ids, more, err := k.find(prefix)
	if err != nil {
		return "", apiError(strings.TrimSuffix(commandPrefix(c), ": "), err)
	}
	switch len(ids) {
	case 0:
		where := " in the token's scope"
		if k.local {
			where = ""
		}
		return "", fmt.Errorf("%sno %s%s has an id that begins with %s; list them with: %s",
			commandPrefix(c), k.noun, where, prefix, k.list)
	case 1:
		return ids[0], nil
	}
	etc := ""
	if more {
		etc = ", …"
	}
	return "", fmt.Errorf("%s%s is the start of several %s ids (%s%s): give more of it", commandPrefix(c), prefix, k.noun, strings.Join(ids, ", "), etc)
}

var hexRE = regexp.MustCompile(`^[0-9a-f]+$`)

// goneError explains a 410: the session was cleared or pruned. An
// operator's answer carries the whole tombstone (by, reason, removed),
// which it tells too. It is nil when err is no 410.
func goneError(id string, err error, zone *time.Location) error {
	var pe *client.Error
	if !errors.As(err, &pe) || pe.Code != "gone" {
		return nil
	}
	t := pe.Tombstone()
	if t == nil {
		return fmt.Errorf("session %s is gone: %s", id, describeProblem(pe))
	}
	msg := fmt.Sprintf("session %s is gone: %s at %s", id, t.Kind, stamp(t.At, zone))
	if t.By != "" {
		msg += " by " + t.By
	}
	if t.Reason != "" {
		msg += fmt.Sprintf(" (reason: %q)", t.Reason)
	}
	if _, ok := pe.Extra["removed"]; ok { // an operator's answer only
		r := t.Removed
		msg += fmt.Sprintf("; removed %d checkpoints, %d runs, %d events, %d leases (%d released), %d idempotency keys",
			r.Checkpoints, r.Runs, r.Events, r.Leases, r.LeasesReleased, r.IdempotencyKeys)
	}
	return errors.New(msg)
}

// sessionsLs lists one page of sessions: a table for a person, the
// daemon's answer as sent with --json.
func sessionsLs(ctx context.Context, c *cli.Command, stdout io.Writer) error {
	opts := client.SessionListOptions{
		State: checkpointd.SessionState(c.String("state")), Repo: c.String("repo"),
		Validity: checkpointd.Validity(c.String("validity")), Stage: c.String("stage"),
		WaitingOn: c.String("waiting-on"), Sort: c.String("sort"),
		ListOptions: client.ListOptions{Limit: c.Int("limit"), Cursor: c.String("cursor")},
	}
	switch {
	case c.Bool("all") && opts.State != "":
		return argError(c, "--all lists sessions in every state: not with --state")
	case !c.Bool("all") && opts.State == "":
		// As kubectl hides what finished: the fleet is what still runs.
		opts.State = checkpointd.SessionActive
	}
	if v := c.String("live"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return argError(c, fmt.Sprintf("--live must be true or false, not %q", v))
		}
		opts.Live = &b
	}
	// A person scans a fleet by what moved last; a script gets the
	// daemon's own order unless it asks.
	if opts.Sort == "" && !forScripts(c) {
		opts.Sort = "activity"
	}
	cl, err := newReaderClient(c)
	if err != nil {
		return err
	}
	if forScripts(c) {
		var raw json.RawMessage
		if err := cl.Do(ctx, http.MethodGet, "/v1/sessions", sessionQuery(opts), nil, &raw); err != nil {
			return apiError("sessions ls", err)
		}
		return printAnswer(c, stdout, raw)
	}
	page, err := cl.Sessions().List(ctx, opts)
	if err != nil {
		return apiError("sessions ls", err)
	}
	printSessions(stdout, page.Items, time.Now(), c.Bool("wide") || outputOf(c) == "wide", c.Bool("no-headers"))
	if page.NextCursor != "" {
		fmt.Fprintf(stdout, "more: --cursor %s\n", page.NextCursor)
	}
	return nil
}

// sessionQuery is GET /v1/sessions's query for opts, for the --json read
// that keeps the answer as sent (client.Do); the typed List builds the
// same one.
func sessionQuery(o client.SessionListOptions) url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"state": string(o.State), "repo": o.Repo, "validity": string(o.Validity),
		"stage": o.Stage, "waiting_on": o.WaitingOn, "sort": o.Sort, "cursor": o.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Live != nil {
		q.Set("live", strconv.FormatBool(*o.Live))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	return q
}
