package storetest

import (
	"io"
	"net"
	"net/url"
	"slices"
	"sync"
	"testing"
)

// Proxy forwards connections to the server of a PostgreSQL URL, so a test
// can take the store away from one store instance (a replica) without
// touching the shared server: Cut closes the forwarded connections (all
// but the ones it is told to keep) and closes new ones as they arrive, as a
// server that went away; Restore brings it back.
type Proxy struct {
	// URL is the database URL through the proxy.
	URL string

	target string
	ln     net.Listener
	mu     sync.Mutex
	down   bool
	pairs  []proxied
}

// proxied is one forwarded connection: the client's side and the server's.
type proxied struct{ client, server net.Conn }

// NewProxy proxies raw's server on a loopback port. When app is set, the
// proxy's URL sets application_name to it, so the server can tell the
// sessions that came through it apart. The proxy stops with the test.
func NewProxy(t testing.TB, raw, app string) *Proxy {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{target: u.Host, ln: ln}
	u.Host = ln.Addr().String()
	if app != "" {
		q := u.Query()
		q.Set("application_name", app)
		u.RawQuery = q.Encode()
	}
	p.URL = u.String()
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	return p
}

func (p *Proxy) accept() {
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

// Cut takes the server away: every forwarded connection is closed, except
// those whose server side has one of the local ports in keep (the
// client_port PostgreSQL reports for the session), and new connections are
// closed as they arrive until Restore.
func (p *Proxy) Cut(keep ...int) {
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

// Restore forwards new connections again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}
