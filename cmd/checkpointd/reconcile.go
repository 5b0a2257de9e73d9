package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/forgestatus"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/ui"
)

// reconcileServeFlags configure serve's reconcile worker and its forge.
func reconcileServeFlags(from func(string) cli.ValueSourceChain) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "gitea-url", Sources: from("CHECKPOINTD_GITEA_URL"),
			Usage: "base URL of the Gitea/Forgejo server reconcile asks for live heads (https://gitea.example.com); without it every session stays unverified"},
		&cli.StringFlag{Name: "gitea-token", Sources: from("CHECKPOINTD_GITEA_TOKEN"),
			Usage: "Gitea/Forgejo access token that can read the sessions' repositories (scope read:repository); empty for public repositories only"},
		&cli.Float64Flag{Name: "gitea-rate", Value: reconcile.DefaultForgeRate, Sources: from("CHECKPOINTD_GITEA_RATE"),
			Usage: "requests a second this daemon sends the forge at most (reconcile, pending mutations, commit statuses); a pass asks about the refs that fit in 4 of its 5 minutes and the next goes on from there"},
		&cli.DurationFlag{Name: "reconcile-interval", Value: 5 * time.Minute, Sources: from("CHECKPOINTD_RECONCILE_INTERVAL"),
			Usage: "time between reconcile passes; the first runs at start, in the background"},
		&cli.BoolFlag{Name: "forge-status", Sources: from("CHECKPOINTD_FORGE_STATUS"),
			Usage: "set the commit status checkpointd/session on each session's branch heads (success, pending, failure: docs/gitea-setup.md); needs --gitea-url and a --gitea-token that may write statuses (write:repository)"},
		&cli.StringFlag{Name: "console-url", Sources: from("CHECKPOINTD_CONSOLE_URL"),
			Usage: "the console's external base URL (https://checkpointd.example.com): commit statuses link to the session's page there"},
		&cli.StringFlag{Name: "console-oauth-client-id", Sources: from("CHECKPOINTD_CONSOLE_OAUTH_CLIENT_ID"),
			Usage: "client ID of an OAuth2 application registered on the forge: the console offers Sign in with Gitea (docs/console.md); needs --gitea-url and --console-url"},
		&cli.StringFlag{Name: "console-oauth-client-secret", Sources: from("CHECKPOINTD_CONSOLE_OAUTH_CLIENT_SECRET"),
			Usage: "that application's client secret (prefer the environment variable: a flag shows in the process list)"},
		&cli.StringSliceFlag{Name: "console-operator-teams", Sources: from("CHECKPOINTD_CONSOLE_OPERATOR_TEAMS"),
			Usage: "forge teams (org/team, repeatable or comma-separated) whose members sign in as operators; site administrators always do"},
		&cli.StringSliceFlag{Name: "console-reader-teams", Sources: from("CHECKPOINTD_CONSOLE_READER_TEAMS"),
			Usage: "forge teams (org/team) whose members sign in as readers, seeing the repositories they can read on the forge"},
		&cli.StringSliceFlag{Name: "worktree-root", Sources: from("CHECKPOINTD_WORKTREE_ROOT"),
			Usage: "absolute directory under which sessions' recorded worktrees are compared (their HEAD, read from the repository's files; no program is run); repeatable, or comma-separated. None: worktrees are never looked at"},
	}
}

// statusesFrom reads --forge-status and --console-url: nil when statuses
// are off. Statuses need a forge to set them on: without --gitea-url the
// start is refused rather than the flag quietly doing nothing.
func statusesFrom(c *cli.Command, r *reconcile.Reconciler, consoleURL string, log *slog.Logger) (*forgestatus.Publisher, error) {
	if !c.Bool("forge-status") {
		return nil, nil
	}
	if r.Forge == nil {
		return nil, errors.New("--forge-status needs a forge to set statuses on: set --gitea-url (and a --gitea-token that may write statuses)")
	}
	if consoleURL == "" {
		log.Warn("forge statuses: no --console-url set; statuses will not link to the console")
	}
	return &forgestatus.Publisher{Forge: r.Forge, ConsoleURL: consoleURL, Log: log}, nil
}

// consoleURLFrom reads --console-url: the console's external base URL,
// without a trailing slash ("" when not set).
func consoleURLFrom(c *cli.Command) (string, error) {
	raw := strings.TrimSpace(c.String("console-url"))
	if raw == "" {
		return "", nil
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("--console-url %q: want http(s)://host[:port][/path], without credentials, query or fragment", raw)
	}
	return strings.TrimRight(raw, "/"), nil
}

// consoleOAuthFrom reads the console's forge sign-in: nil without
// --console-oauth-client-id. It needs the forge (--gitea-url), the
// console's external URL (the redirect URI is built from it) and a team
// for someone to be admitted by; anything missing refuses the start.
func consoleOAuthFrom(c *cli.Command, r *reconcile.Reconciler, consoleURL string) (*ui.OAuth, error) {
	id, secret := strings.TrimSpace(c.String("console-oauth-client-id")), strings.TrimSpace(c.String("console-oauth-client-secret"))
	if id == "" {
		if secret != "" {
			return nil, errors.New("--console-oauth-client-secret without --console-oauth-client-id")
		}
		return nil, nil
	}
	switch {
	case secret == "":
		return nil, errors.New("--console-oauth-client-id needs --console-oauth-client-secret (CHECKPOINTD_CONSOLE_OAUTH_CLIENT_SECRET)")
	case r.ForgeURL == "":
		return nil, errors.New("sign-in with the forge needs the forge: set --gitea-url")
	case consoleURL == "":
		return nil, errors.New("sign-in with the forge needs --console-url: the redirect URI registered on the forge is <console-url>/ui/login/oauth/callback")
	}
	o := &ui.OAuth{ClientID: id, ClientSecret: secret, ForgeURL: r.ForgeURL, ConsoleURL: consoleURL}
	for _, f := range []struct {
		flag string
		dst  *[]string
	}{{"console-operator-teams", &o.OperatorTeams}, {"console-reader-teams", &o.ReaderTeams}} {
		for _, t := range c.StringSlice(f.flag) {
			if t = strings.TrimSpace(t); t == "" {
				continue
			}
			org, team, ok := strings.Cut(t, "/")
			if !ok || org == "" || team == "" || strings.Contains(team, "/") {
				return nil, fmt.Errorf("--%s %q: want org/team", f.flag, t)
			}
			*f.dst = append(*f.dst, t)
		}
	}
	return o, nil
}

// worktreeRootsFrom reads --worktree-root: absolute directories that
// exist. The operator names them, so they are checked here, once; what
// agents record under them is read only through gitdir.
func worktreeRootsFrom(c *cli.Command) ([]string, error) {
	var roots []string
	for _, d := range c.StringSlice("worktree-root") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if !filepath.IsAbs(d) {
			return nil, fmt.Errorf("--worktree-root %q: want an absolute directory", d)
		}
		fi, err := os.Stat(d)
		if err != nil {
			return nil, fmt.Errorf("--worktree-root %q: %w", d, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("--worktree-root %q: not a directory", d)
		}
		roots = append(roots, filepath.Clean(d))
	}
	return roots, nil
}

// reconcilerFrom builds serve's reconciler from its flags.
func reconcilerFrom(c *cli.Command, s *store.Store, log *slog.Logger) (*reconcile.Reconciler, error) {
	r := &reconcile.Reconciler{Store: s, Interval: c.Duration("reconcile-interval"), Log: log}
	if r.Interval <= 0 {
		return nil, fmt.Errorf("--reconcile-interval must be positive, not %v", r.Interval)
	}
	roots, err := worktreeRootsFrom(c)
	if err != nil {
		return nil, err
	}
	r.WorktreeRoots = roots
	if len(roots) == 0 {
		log.Info("reconcile: no --worktree-root set; recorded worktrees are not compared")
	} else {
		log.Info("reconcile: comparing recorded worktrees under these roots", slog.Any("worktree_roots", roots))
	}
	raw := strings.TrimSpace(c.String("gitea-url"))
	if raw == "" {
		log.Warn("reconcile: no --gitea-url set; sessions stay unverified (not resumable) until one is configured")
		return r, nil
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, fmt.Errorf("--gitea-url %q: want http(s)://host[:port][/path]", raw)
	case u.User != nil:
		return nil, errors.New("--gitea-url must not carry credentials: give the token with --gitea-token or CHECKPOINTD_GITEA_TOKEN")
	}
	r.ForgeURL = strings.TrimRight(u.String(), "/")
	if rate := c.Float64("gitea-rate"); rate <= 0 || math.IsInf(rate, 0) || math.IsNaN(rate) {
		return nil, fmt.Errorf("--gitea-rate must be a positive number of requests a second, not %v", rate)
	}
	r.Forge = reconcile.Gitea(r.ForgeURL, strings.TrimSpace(c.String("gitea-token")), c.Float64("gitea-rate"))
	return r, nil
}

// reconcileCommand asks a running daemon to reconcile now and prints the
// report.
func reconcileCommand(from func(string) cli.ValueSourceChain, clientFlags []cli.Flag, stdout io.Writer) *cli.Command {
	flags := append(append([]cli.Flag{}, clientFlags...),
		&cli.StringFlag{Name: "data-dir", Value: "data", Sources: from("CHECKPOINTD_DATA_DIR"),
			Usage: "where operator.token is read from when no --token is given"},
		&cli.BoolFlag{Name: "json", Usage: "print the report as JSON"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long to wait for the pass"})
	return &cli.Command{
		Name:  "reconcile",
		Usage: "reconcile every active session against the forge now (POST /v1/reconcile on a running daemon) and print the report",
		Flags: flags,
		Action: func(ctx context.Context, c *cli.Command) error {
			token, err := clientToken(c, needOperator)
			if err != nil {
				return err
			}
			// The pass answers when it is done: --timeout bounds the one
			// request (it is sent once, never retried).
			cl, err := clientFor(c, token, 0)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
			defer cancel()
			raw, err := cl.Reconcile().Run(ctx)
			if err != nil {
				return apiError("reconcile", err)
			}
			if raw == nil {
				return errors.New("reconcile: the daemon answered no report")
			}
			if forScripts(c) {
				// The report as the daemon sent it, in the same envelope.
				return printAnswer(c, stdout, append(append([]byte(`{"report":`), raw...), '}'))
			}
			var r reconcile.Report
			if err := json.Unmarshal(raw, &r); err != nil {
				return fmt.Errorf("reconcile: unreadable report: %w", err)
			}
			printReport(stdout, &r)
			return nil
		},
	}
}

func printReport(w io.Writer, r *reconcile.Report) {
	fmt.Fprintf(w, "reconcile %s (%s) took %dms; forge: %s\n", r.ID, r.Trigger, r.DurationMS, r.Forge)
	fmt.Fprintf(w, "sessions checked: %d  refs: %d (%d unverified, %d deferred to the next pass)  forge calls: %d\n",
		r.SessionsChecked, r.Refs, r.RefsUnverified, r.RefsDeferred, r.ForgeCalls)
	fmt.Fprintf(w, "verdicts: %s\n", counts(r.Verdicts))
	fmt.Fprintf(w, "changed:  %s\n", counts(r.Changed))
	fmt.Fprintf(w, "leases: expired=%d mismatched=%d lease_lost=%d released_by_refs=%d\n",
		r.Leases.Expired, r.Leases.Mismatched, r.Leases.LeaseLost, r.Leases.ReleasedByRefs)
	for _, repo := range slices.Sorted(maps.Keys(r.ErrorsByRepo)) {
		for _, e := range r.ErrorsByRepo[repo] {
			fmt.Fprintf(w, "error: %s %s\n", repo, e)
		}
	}
	for _, rn := range r.Renames {
		// A rename seen by a redirect on a branch answer carries no id.
		id := ""
		if rn.RepoID > 0 {
			id = fmt.Sprintf("repository id %d, ", rn.RepoID)
		}
		fmt.Fprintf(w, "renamed: %s → %s (%sseen by %s)\n", rn.Repo, rn.NewName, id, rn.Source)
	}
	for _, wt := range r.Worktrees {
		what := strings.Join(wt.Findings, ", ")
		if wt.Error != "" {
			what = strings.TrimPrefix(what+"; ", "; ") + wt.Error
		}
		fmt.Fprintf(w, "worktree: %s %s: %s\n", wt.SessionID, wt.Path, what)
	}
	for _, v := range r.NotValid {
		// Reports of earlier versions may list a verdict without a reason.
		why := ""
		if v.Reason != "" {
			why = ": " + v.Reason
		}
		fmt.Fprintf(w, "not valid: %s %s %s%s\n", v.SessionID, v.Repo, v.Validity, why)
	}
	if r.Error != "" {
		fmt.Fprintf(w, "note: %s\n", r.Error)
	}
}

func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(parts, " ")
}

// consoleOAuth completes o with the store: a person signed in with the
// forge acts through a daemon token minted for their console session.
func consoleOAuth(o *ui.OAuth, s *store.Store) *ui.OAuth {
	if o == nil {
		return nil
	}
	o.Mint = func(ctx context.Context, name string, role checkpointd.TokenRole, scope []string) (string, string, error) {
		secret := checkpointd.NewTokenSecret()
		t, err := s.CreateToken(ctx, checkpointd.TokenSpec{Name: name, Role: role, Scope: scope}, checkpointd.HashToken(secret))
		if err != nil {
			return "", "", err
		}
		return t.ID, secret, nil
	}
	o.Revoke = s.RevokeToken
	return o
}
