// Package ui is the operator console: server-rendered pages
// under /ui/ over the daemon's own API. Every page reads, and every action
// acts, through the same API call the CLI makes, in process and with the
// signed-in person's token: the same scope checks, validation and events,
// nothing decided here.
package ui

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Deps are the console's collaborators.
type Deps struct {
	// API is the daemon's API handler; the console calls it in process.
	API http.Handler
	// Authenticate resolves a token's hash (checkpointd.HashToken) to its
	// principal: the sign-in check.
	Authenticate func(ctx context.Context, secretHash string) (*checkpointd.Principal, error)
	// Sessions keeps the console sessions, where every replica reads them.
	Sessions SessionStore
	// Stages are the configured workflow stages (the fleet's stage filter).
	Stages []string
	// ForgeURL, when set, links repositories, issues and pull requests to
	// the forge.
	ForgeURL string
	// SecureCookies marks the session cookie Secure even when the request
	// did not arrive over TLS here (TLS ends at a proxy in front).
	SecureCookies bool
	// IdleTimeout signs a person out after this long without a request
	// (default 12h).
	IdleTimeout time.Duration
	Logger      *slog.Logger
	// Now is the clock of ages and idle timeouts (default time.Now).
	Now func() time.Time
	// OAuth, when set, offers "Sign in with Gitea" (oauth.go).
	OAuth *OAuth
}

type console struct {
	Deps
	pages    map[string]*template.Template
	sessions *sessions
	rechecks recheckLocks
}

// New returns the console's handler; mount it at /ui/ (it serves paths
// that begin with /ui).
func New(d Deps) http.Handler {
	if d.IdleTimeout <= 0 {
		d.IdleTimeout = 12 * time.Hour
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	c := &console{Deps: d, pages: parsePages()}
	c.sessions = &sessions{store: d.Sessions, idle: d.IdleTimeout, now: d.Now, ended: func(s *checkpointd.ConsoleSession) {
		if s.Forge != nil {
			c.revoke(s.Principal.TokenID) // the token minted for the session
		}
	}}
	r := chi.NewRouter()
	r.Use(securityHeaders)
	static, _ := fs.Sub(staticFiles, "static")
	r.Handle("/ui/static/*", http.StripPrefix("/ui/static/", staticHandler(static)))
	r.Get("/ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	r.Get("/ui/login", c.loginPage)
	r.Post("/ui/login", c.login)
	if d.OAuth != nil {
		r.Get("/ui/login/oauth", c.startOAuth)
		r.Get("/ui/login/oauth/callback", c.oauthCallback)
	}
	r.Group(func(r chi.Router) {
		r.Use(c.signedIn)
		r.Post("/ui/logout", c.logout)
		r.Get("/ui/", c.page(c.fleet))
		r.Get("/ui/sessions/{id}", c.page(c.session))
		r.Get("/ui/sessions/{id}/confirm", c.page(c.confirm))
		r.Get("/ui/drain", c.page(c.drain))
		r.Get("/ui/leases", c.page(c.leases))
		r.Get("/ui/errors", c.page(c.errors))
		r.Get("/ui/reconcile", c.page(c.reconcile))
		r.Get("/ui/events", c.events)
		r.Group(func(r chi.Router) {
			r.Use(c.operatorOnly)
			r.Post("/ui/sessions/{id}/park", c.action(c.park))
			r.Post("/ui/sessions/{id}/end", c.action(c.end))
			r.Post("/ui/sessions/{id}/clear", c.action(c.clear))
			r.Post("/ui/leases/{id}/release", c.action(c.release))
			r.Post("/ui/drain/start", c.action(c.startDrain))
			r.Post("/ui/drain/complete", c.action(c.completeDrain))
			r.Post("/ui/drain/cancel", c.action(c.cancelDrain))
			r.Post("/ui/reconcile", c.action(c.reconcileNow))
		})
	})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		c.renderError(w, r, nil, http.StatusNotFound, "no such page")
	})
	return r
}

// securityHeaders: a strict Content-Security-Policy (only this origin's
// scripts and styles, no inline code, no frames, forms post only here),
// no framing, no sniffing, no caching of pages that show tokens' data.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "+
			"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// staticHandler serves the embedded CSS and JavaScript; they may be cached.
func staticHandler(fsys fs.FS) http.Handler {
	files := http.FileServerFS(fsys)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		files.ServeHTTP(w, r)
	})
}
