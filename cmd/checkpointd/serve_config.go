package main

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/forgestatus"
	"github.com/checkpointd/checkpointd/reconcile"
	"github.com/checkpointd/checkpointd/store"
	"github.com/checkpointd/checkpointd/ui"
)

// serveConfig is what serve reads from its flags and the environment,
// every part checked before serve creates anything: a start refused for
// a flag leaves no database, key, token or lock file behind.
type serveConfig struct {
	workflow   checkpointd.Workflow
	reconciler *reconcile.Reconciler // without its Store, opened later
	// statuses, when --forge-status, sets commit statuses (its Store
	// set later).
	statuses *forgestatus.Publisher
	// oauth, when set, is the console's sign-in with the forge (its Mint
	// and Revoke set later).
	oauth          *ui.OAuth
	retention      store.Retention
	retentionEvery time.Duration
	keySource      keySource
	keys           *checkpointd.Keyring // nil: the default key file is to be created
	listen         string
	metricsListen  string
	// secureCookie marks the console's session cookie Secure.
	secureCookie bool
}

func serveConfigFrom(c *cli.Command, getenv func(string) string, log *slog.Logger) (*serveConfig, error) {
	cfg := &serveConfig{}
	var err error
	if cfg.listen, err = listenAddr("--listen", c.String("listen")); err != nil {
		return nil, err
	}
	if addr := strings.TrimSpace(c.String("metrics-listen")); addr != "" {
		if cfg.metricsListen, err = listenAddr("--metrics-listen", addr); err != nil {
			return nil, err
		}
	}
	if cfg.secureCookie, err = consoleSecureCookie(c.String("console-secure-cookie"), cfg.listen); err != nil {
		return nil, err
	}
	if err := checkDatabaseURL(c); err != nil {
		return nil, err
	}
	if n := c.Int("errors-keep"); n <= 0 {
		return nil, fmt.Errorf("--errors-keep must be positive, not %d", n)
	}
	if d := c.Duration("run-liveness"); d <= 0 {
		return nil, fmt.Errorf("--run-liveness must be positive, not %v", d)
	}
	if n := c.Int64("webhook-max-body-bytes"); n <= 0 {
		return nil, fmt.Errorf("--webhook-max-body-bytes must be positive, not %d", n)
	}
	if n := c.Int64("max-document-bytes"); n <= 0 {
		return nil, fmt.Errorf("--max-document-bytes must be positive, not %d", n)
	}
	if d := c.Duration("shutdown-timeout"); d <= 0 {
		return nil, fmt.Errorf("--shutdown-timeout must be positive, not %v", d)
	}
	if n := c.Int("database-max-conns"); n <= 0 {
		return nil, fmt.Errorf("--database-max-conns must be positive, not %d", n)
	}
	for _, name := range []string{"watch-memory-mib", "watch-max-streams", "watch-max-streams-per-token"} {
		if n := c.Int(name); n <= 0 {
			return nil, fmt.Errorf("--%s must be positive, not %d", name, n)
		}
	}
	if d := c.Duration("drain-confirm-timeout"); d <= 0 {
		return nil, fmt.Errorf("--drain-confirm-timeout must be positive, not %v", d)
	}
	if cfg.workflow, err = workflowFrom(c); err != nil {
		return nil, err
	}
	if cfg.retention, cfg.retentionEvery, err = retentionFrom(c); err != nil {
		return nil, err
	}
	if cfg.reconciler, err = reconcilerFrom(c, nil, log); err != nil {
		return nil, err
	}
	consoleURL, err := consoleURLFrom(c)
	if err != nil {
		return nil, err
	}
	if cfg.statuses, err = statusesFrom(c, cfg.reconciler, consoleURL, log); err != nil {
		return nil, err
	}
	if cfg.oauth, err = consoleOAuthFrom(c, cfg.reconciler, consoleURL); err != nil {
		return nil, err
	}
	cfg.keySource = keySourceFrom(c, getenv)
	if cfg.keys, err = readKeys(cfg.keySource, log); err != nil {
		return nil, fmt.Errorf("refusing to start: %w", err)
	}
	return cfg, nil
}

// listenAddr checks a listen address is host:port with a port net.Listen
// takes (":8080" is every interface); binding is left to the end of the
// start, when the daemon can answer.
func listenAddr(flag, addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return "", fmt.Errorf("%s %q: want host:port, e.g. 127.0.0.1:8080, or :8080 for every interface (%v)", flag, addr, err)
	}
	return addr, nil
}

// consoleSecureCookie decides --console-secure-cookie: auto marks the
// console's cookie Secure unless the daemon listens on loopback only (a
// daemon reachable from elsewhere serves plain HTTP, so TLS ends at a
// proxy in front, and the cookie must never travel without it).
func consoleSecureCookie(v, listen string) (bool, error) {
	switch v {
	case "always":
		return true, nil
	case "never":
		return false, nil
	case "auto", "":
		return !loopbackOnly(listen), nil
	}
	return false, fmt.Errorf("--console-secure-cookie %q: want auto, always or never", v)
}

// loopbackOnly says whether a listen address is reachable from this host
// alone; an address it cannot read counts as reachable from elsewhere.
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

// listenWarnings are what serve warns of at start about how it is
// reached: plain HTTP beyond loopback (the daemon has no TLS of its own),
// and a Secure console cookie that a browser on plain http:// drops, so
// that its sign-in would come back to the sign-in page.
func listenWarnings(listen string, secureCookie bool) []string {
	if loopbackOnly(listen) {
		if secureCookie {
			return []string{"the console's cookie is Secure (--console-secure-cookie always) but the daemon serves plain HTTP: " +
				"a browser on http:// drops it and cannot sign in; reach the console through a TLS proxy's https:// address"}
		}
		return nil
	}
	w := []string{"serving plain HTTP on " + listen + ", beyond loopback: tokens and checkpoints cross the network in the clear; " +
		"put a TLS-terminating proxy in front (docs/gitea-setup.md)"}
	if secureCookie {
		w = append(w, "the console's cookie is Secure (--console-secure-cookie auto, since "+listen+" is beyond loopback): "+
			"a browser on plain http:// drops it and cannot sign in; use the TLS proxy's https:// address, or "+
			"--console-secure-cookie never on a network you trust")
	}
	return w
}
