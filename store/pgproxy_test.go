package store_test

import (
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
)

// pgProxy forwards connections to the server of a PostgreSQL URL, so a
// test can take the store away from one replica without touching the
// shared server: cut closes the forwarded connections (all but the ones it
// is told to keep) and closes new ones as they arrive, as a server that
// went away; restore brings it back.
type pgProxy struct {
	url    string
	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	pairs  []proxied
}

// proxied is one forwarded connection: the client's side and the server's.
type proxied struct{ client, server net.Conn }

// newPGProxy proxies raw's server; url is raw through the proxy, with
// application_name set to app so the server can tell its sessions apart.
func newPGProxy(t *testing.T, raw, app string) *pgProxy {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pgProxy{target: u.Host, ln: ln}
	u.Host = ln.Addr().String()
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	p.url = u.String()
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.cut()
	})
	return p
}

func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		down := p.down
		p.mu.Unlock()
		if down {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.pairs = append(p.pairs, proxied{c, s})
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); s.Close() }()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
	}
}

// cut takes the server away: every forwarded connection is closed, except
// those whose server side has one of the local ports in keep (the
// client_port PostgreSQL reports for the session), and new connections are
// refused until restore.
func (p *pgProxy) cut(keep ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	var kept []proxied
	for _, c := range p.pairs {
		if slices.Contains(keep, c.server.LocalAddr().(*net.TCPAddr).Port) {
			kept = append(kept, c)
			continue
		}
		c.client.Close()
		c.server.Close()
	}
	p.pairs = kept
}

// restore forwards new connections again.
func (p *pgProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}
