package store

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/checkpointd/checkpointd"
)

// The authentication cache (a token revoked on one replica
// stops working on every replica within 1 s, on SQLite at once).
//
// Decisions:
//   - PostgreSQL only. On SQLite a `checkpointd token revoke` runs in
//     another process that cannot tell the daemon, and SQLite promises "at
//     once"; its lookup is a local prepared read, so SQLite does not cache.
//   - An entry lives at most tokenCacheTTL from the moment the lookup that
//     filled it was sent, on the real monotonic clock (not the store's
//     clock, which tests freeze): the 1 s bound holds even when a NOTIFY is
//     lost or the listener has not yet noticed that its connection died.
//   - RevokeToken sends NOTIFY checkpointd_tokens, '<token id>' in its
//     transaction (delivered at commit) and drops the entry of this store
//     once committed, so the replica that revoked refuses at once.
//   - Every store that authenticates keeps one LISTEN connection
//     (pq.Listener, started by the first Authenticate, so commands that
//     never authenticate open none). Until it listens, and from the moment
//     it reports the connection lost until it listens again, the cache is
//     empty and bypassed: fail closed.
//   - A generation counter, bumped by every drop, makes a lookup that was in
//     flight across a drop not fill the cache with what it read before it.
const (
	tokenCacheTTL     = time.Second
	tokenCacheChannel = "checkpointd_tokens"
	// tokenCacheMax bounds the map: only valid tokens enter it, so this is
	// only reached by a database with that many tokens in use; then it
	// starts over rather than grow.
	tokenCacheMax = 4096
)

// tokenCache maps a token hash to the principal a recent lookup found.
type tokenCache struct {
	mu sync.Mutex
	// live: the listener listens, so entries may be served and filled. It
	// is listened (our LISTEN was acknowledged) and connected (the
	// listener's last event was a connection, not a loss).
	live, listened, connected bool
	gen                       uint64 // bumped by every drop
	entries                   map[string]tokenEntry
	start                     sync.Once
	listener                  *pq.Listener
	done                      chan struct{} // closed when the notification loop ends
}

type tokenEntry struct {
	p     checkpointd.Principal
	until time.Time
}

// lookup returns a cached principal, and otherwise the generation a fill
// must present and whether the cache may be filled at all.
func (c *tokenCache) lookup(hash string, now time.Time) (p *checkpointd.Principal, gen uint64, fill bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live {
		return nil, 0, false
	}
	if e, ok := c.entries[hash]; ok {
		if now.Before(e.until) {
			cp := e.p
			cp.Scope = slices.Clone(e.p.Scope)
			return &cp, 0, false
		}
		delete(c.entries, hash)
	}
	return nil, c.gen, true
}

// fill stores what a lookup sent at sent found, unless something was
// dropped since the lookup began or the listener went away.
func (c *tokenCache) fill(hash string, p checkpointd.Principal, gen uint64, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.live || c.gen != gen {
		return
	}
	if c.entries == nil || len(c.entries) >= tokenCacheMax {
		c.entries = make(map[string]tokenEntry)
	}
	p.Scope = slices.Clone(p.Scope)
	c.entries[hash] = tokenEntry{p: p, until: sent.Add(tokenCacheTTL)}
}

// drop forgets the entries of token id; id "" forgets every entry.
func (c *tokenCache) drop(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for h, e := range c.entries {
		if id == "" || e.p.TokenID == id {
			delete(c.entries, h)
		}
	}
}

// set records a change of the listener's state and empties the cache.
func (c *tokenCache) set(f func(c *tokenCache)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
	c.gen++
	clear(c.entries)
	c.live = c.listened && c.connected
}

// listening reports whether the cache is in use (tests).
func (c *tokenCache) listening() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.live
}

// startTokenListener starts the LISTEN connection once, on PostgreSQL.
func (s *Store) startTokenListener() {
	c := &s.tokens
	c.start.Do(func() {
		c.done = make(chan struct{})
		c.listener = pq.NewListener(s.url, 100*time.Millisecond, 2*time.Second, func(ev pq.ListenerEventType, err error) {
			switch ev {
			case pq.ListenerEventConnected, pq.ListenerEventReconnected:
				// pq re-issues the LISTEN before it reports a reconnect;
				// what was revoked meanwhile is unknown, so the cache
				// starts empty.
				c.set(func(c *tokenCache) { c.connected = true })
			case pq.ListenerEventDisconnected:
				c.set(func(c *tokenCache) { c.connected = false })
				s.connectionsLost()
				s.log.Warn("store: the token revocation listener lost its connection; authenticating without the cache until it is back", "err", err)
			case pq.ListenerEventConnectionAttemptFailed:
				c.set(func(c *tokenCache) { c.connected = false })
			}
		})
		go func() {
			defer close(c.done)
			if err := c.listener.Listen(tokenCacheChannel); err != nil {
				return // closed before it could listen: the cache stays off
			}
			c.set(func(c *tokenCache) { c.listened = true })
			for n := range c.listener.NotificationChannel() {
				if n == nil || n.Extra == "" {
					c.drop("") // a reconnect: what was missed is unknown
					continue
				}
				c.drop(n.Extra)
			}
		}()
	})
}

// closeTokenListener stops the listener, if one was started.
func (s *Store) closeTokenListener() {
	c := &s.tokens
	c.start.Do(func() {}) // no listener may start after this
	if c.listener != nil {
		c.set(func(c *tokenCache) { c.listened = false })
		// pq holds its lock while it dials, so Close waits for a dial in
		// progress; a database that black-holes it must not hang Close.
		go c.listener.Close()
		select {
		case <-c.done:
		case <-time.After(2 * time.Second):
		}
	}
}

// notifyRevoked tells every replica's cache, at commit, that token id is
// revoked. Only PostgreSQL has replicas.
func (s *Store) notifyRevoked(ctx context.Context, tx *sqlx.Tx, id string) error {
	if s.url == "" {
		return nil
	}
	_, err := tx.ExecContext(ctx, `SELECT pg_notify($1, $2)`, tokenCacheChannel, id)
	return err
}
