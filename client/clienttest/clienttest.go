// Package clienttest runs a real checkpointd daemon in process, for the
// tests of agents written in Go: the daemon's own API handler over its own
// store (SQLite in a temporary directory), served over HTTP on loopback.
// What an agent's test sees is what the daemon answers in production — the
// same validation, fencing, leases, redaction, idempotency and change
// feed — not a stand-in. No forge is configured: Push and PullRequestHead
// report heads as verified deliveries of the forge would.
//
//	func TestMyAgent(t *testing.T) {
//		d := clienttest.New(t)
//		c := d.Client(d.Token(checkpointd.RoleAgent, "acme/*"))
//		s, err := c.Sessions().Create(t.Context(), &client.CreateSessionRequest{Repo: "acme/widgets", Role: "author", PR: 7}, nil)
//		…
//	}
package clienttest

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/store"
)

// Options configure a Daemon; the zero value is the product's defaults.
type Options struct {
	// Workflow is the configured roles and stages (default
	// checkpointd.DefaultWorkflow()).
	Workflow checkpointd.Workflow
	// Clock is the daemon's time (default the system clock): a test that
	// needs a lease to expire gives one it advances.
	Clock checkpointd.Clock
}

// Daemon is a running in-process daemon.
type Daemon struct {
	// URL is the daemon's base URL (a client.Config's Address).
	URL string

	srv    *httptest.Server
	store  *store.Store
	dir    string
	tokens atomic.Int64
}

// New starts a daemon for t, stopped and removed when t ends.
func New(t testing.TB, opts ...Options) *Daemon {
	t.Helper()
	d, err := Start(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	return d
}

// Start starts a daemon; Close stops it and removes its data. It is New
// for code without a testing.TB (an Example).
func Start(opts ...Options) (*Daemon, error) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Workflow.Roles == nil && o.Workflow.Stages == nil {
		o.Workflow = checkpointd.DefaultWorkflow()
	}
	if err := o.Workflow.Validate(); err != nil {
		return nil, err
	}
	if o.Clock == nil {
		o.Clock = checkpointd.SystemClock{}
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	keys, err := checkpointd.ParseKeyring("k1 " + base64.StdEncoding.EncodeToString(key))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "checkpointd-clienttest-")
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{URL: filepath.Join(dir, "checkpointd.db"), Clock: o.Clock, Keys: keys})
	if err == nil {
		_, err = s.Migrate(ctx)
	}
	if err != nil {
		if s != nil {
			s.Close()
		}
		os.RemoveAll(dir)
		return nil, fmt.Errorf("clienttest: the store: %w", err)
	}
	h := api.New(api.Deps{Store: api.StoresOf(s), Workflow: o.Workflow, DigestKey: keys.DigestKey(),
		Evidence: checkpointd.EvidenceSources{Webhooks: true}})
	srv := httptest.NewServer(h)
	return &Daemon{URL: srv.URL, srv: srv, store: s, dir: dir}, nil
}

// Close stops the daemon and removes its data.
func (d *Daemon) Close() {
	d.srv.Close()
	d.store.Close()
	os.RemoveAll(d.dir)
}

// Token mints a token of role, scoped to repos (owner/name or owner/*;
// "*" for all), and returns its secret.
func (d *Daemon) Token(role checkpointd.TokenRole, scope ...string) string {
	secret := checkpointd.NewTokenSecret()
	name := fmt.Sprintf("clienttest-%s-%d", role, d.tokens.Add(1))
	if _, err := d.store.CreateToken(context.Background(), checkpointd.TokenSpec{Name: name, Role: role, Scope: scope}, checkpointd.HashToken(secret)); err != nil {
		panic(fmt.Sprintf("clienttest: minting a token: %v", err))
	}
	return secret
}

// Client is a client of the daemon with token, retrying fast (a test
// should not wait seconds on a retry).
func (d *Daemon) Client(token string) *client.Client {
	c, err := client.New(client.Config{Address: d.URL, Token: token, UserAgent: "clienttest",
		RetryWait: 5 * time.Millisecond, RetryMaxWait: 50 * time.Millisecond})
	if err != nil {
		panic(fmt.Sprintf("clienttest: %v", err))
	}
	return c
}

// Push reports, as the forge would, that branch of repo now points at
// head: the sessions on that branch are judged against it (valid, or
// stale when their checkpoint names another head), and watchers hear it.
func (d *Daemon) Push(repo, branch, head string) error {
	return d.observe(checkpointd.Observation{Repo: repo, Branch: branch, Head: head})
}

// PullRequestHead reports that pull request pr of repo is at head.
func (d *Daemon) PullRequestHead(repo string, pr int64, head string) error {
	return d.observe(checkpointd.Observation{Repo: repo, PR: pr, Head: head})
}

// DeleteBranch reports that branch of repo was deleted: the sessions on it
// are invalidated.
func (d *Daemon) DeleteBranch(repo, branch string) error {
	return d.observe(checkpointd.Observation{Repo: repo, Branch: branch, End: checkpointd.RefDeleted})
}

// ClosePullRequest reports that pull request pr of repo was merged
// (merged true) or closed without merge: the sessions on it are
// invalidated.
func (d *Daemon) ClosePullRequest(repo string, pr int64, merged bool) error {
	end := checkpointd.RefClosed
	if merged {
		end = checkpointd.RefMerged
	}
	return d.observe(checkpointd.Observation{Repo: repo, PR: pr, End: end})
}

func (d *Daemon) observe(o checkpointd.Observation) error {
	if o.End == "" && !checkpointd.ValidCommitID(o.Head) {
		return fmt.Errorf("clienttest: %q is not a commit id (40 or 64 hex digits)", o.Head)
	}
	o.Authoritative, o.Source = true, "clienttest"
	_, err := d.store.Observe(context.Background(), []checkpointd.Observation{o})
	return err
}
