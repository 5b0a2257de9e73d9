package main

import (
	"context"
	"testing"

	"github.com/checkpointd/checkpointd/reconcile/forgetest"
)

// forgeToken is what the fake forge asks of the daemon.
const forgeToken = "scale-forge-token"

// scriptTB is the one part of testing.TB forgetest.New calls: Cleanup.
type scriptTB struct {
	testing.TB
	cleanups []func()
}

func (t *scriptTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *scriptTB) close() {
	for _, f := range t.cleanups {
		f()
	}
}

// startForge runs the fake Gitea (reconcile/forgetest) the daemon
// reconciles against.
func (r *run) startForge() {
	r.forgeTB = &scriptTB{}
	r.forge = forgetest.New(r.forgeTB)
	r.forge.Token = forgeToken
}

// stopForge stops it.
func (r *run) stopForge() {
	if r.forgeTB != nil {
		r.forgeTB.close()
		r.forgeTB = nil
	}
}

// serveRefs has the fake forge serve every active session's branch at the
// session's head: the boot reconcile finds each session as it left it,
// asking once per distinct ref.
func (r *run) serveRefs(ctx context.Context) (int, error) {
	db, err := r.open()
	if err != nil {
		return 0, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT repo, branch, head FROM sessions WHERE state = 'active'`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	repos := map[string]bool{}
	refs := 0
	for rows.Next() {
		var repo, branch, head string
		if err := rows.Scan(&repo, &branch, &head); err != nil {
			return 0, err
		}
		if !repos[repo] {
			repos[repo] = true
			r.forge.AddRepo(int64(len(repos)), repo)
		}
		r.forge.SetBranch(repo, branch, head)
		refs++
	}
	return refs, rows.Err()
}
