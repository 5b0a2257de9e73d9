package ui

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/checkpointd/checkpointd"
)

type sessionKey struct{}

func sessionOf(r *http.Request) *consoleSession {
	s, _ := r.Context().Value(sessionKey{}).(*consoleSession)
	return s
}

// loginPage asks for a token. A person already signed in goes to the fleet.
func (c *console) loginPage(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(cookieName); err == nil {
		if s, _ := c.sessions.get(r.Context(), ck.Value); s != nil {
			http.Redirect(w, r, "/ui/", http.StatusFound)
			return
		}
	}
	msg := ""
	if r.URL.Query().Get("cookie") == "dropped" {
		msg = cookieDroppedMessage(r, c.SecureCookies)
	}
	c.render(w, r, http.StatusOK, "login", c.loginView(msg))
}

// afterSignIn is where a sign-in sends the browser: the fleet, marked so
// that a browser that did not keep the cookie is told why (signedIn).
const afterSignIn = "/ui/?signed_in=1"

// cookieDroppedMessage says why a sign-in came back to the sign-in page:
// the browser did not send the session cookie it was just given.
func cookieDroppedMessage(r *http.Request, secure bool) string {
	if secure && r.TLS == nil {
		return "You signed in, but your browser did not keep the session cookie: it is marked Secure and this page came over plain http://. " +
			"Open the console at its https:// address (through the TLS proxy), or start the daemon with --console-secure-cookie never on a network you trust."
	}
	return "You signed in, but your browser did not send the session cookie back. Allow cookies for this site, and open the console at one address (not an IP here and a name there)."
}

// loginData says what the sign-in page offers besides pasting a token.
type loginData struct{ OAuth bool }

// loginView is the sign-in page, with msg as its error.
func (c *console) loginView(msg string) view {
	return view{Title: "Sign in", Error: msg, Data: loginData{OAuth: c.OAuth != nil}}
}

// login checks the pasted token once and starts a console session for it.
// Agent tokens are refused: the console is for people.
func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		c.renderError(w, r, nil, http.StatusForbidden, "the sign-in form came from another site")
		return
	}
	token := strings.TrimSpace(r.PostFormValue("token"))
	fail := func(status int, msg string) {
		c.render(w, r, status, "login", c.loginView(msg))
	}
	if token == "" {
		fail(http.StatusUnprocessableEntity, "Paste a reader or operator token.")
		return
	}
	p, err := c.Authenticate(r.Context(), checkpointd.HashToken(token))
	switch {
	case errors.Is(err, checkpointd.ErrStoreUnavailable):
		fail(http.StatusServiceUnavailable, "The daemon cannot reach its database right now; try again.")
		return
	case err != nil:
		fail(http.StatusUnauthorized, "That token is not valid: unknown or revoked.")
		return
	case p.Role == checkpointd.RoleAgent:
		fail(http.StatusForbidden, "Agent tokens cannot sign in: the console is for people. Use a reader or operator token.")
		return
	}
	s, err := c.sessions.create(r.Context(), checkpointd.HashToken(token), *p, nil)
	if err != nil {
		fail(http.StatusServiceUnavailable, "The daemon cannot reach its database right now; try again.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: s.id, Path: "/ui", HttpOnly: true,
		Secure: r.TLS != nil || c.SecureCookies, SameSite: http.SameSiteStrictMode})
	c.Logger.InfoContext(r.Context(), "console sign-in", "token_id", p.TokenID, "role", string(p.Role))
	http.Redirect(w, r, afterSignIn, http.StatusSeeOther)
}

// logout ends the session on the server and clears the cookie.
func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	clearCookie(w)
	if ck, err := r.Cookie(cookieName); err == nil {
		if err := c.sessions.end(r.Context(), ck.Value); err != nil {
			c.Logger.WarnContext(r.Context(), "console sign-out: the session could not be ended on the server", "err", err)
			c.renderError(w, r, nil, http.StatusServiceUnavailable,
				"Signed out of this browser, but the daemon cannot reach its database to end the session on the server; it ends when idle. Sign out again to retry.")
			return
		}
	}
	c.Logger.InfoContext(r.Context(), "console sign-out")
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/ui", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode})
}

// signedIn admits requests of a live console session; others go to the
// sign-in page. Every state-changing request must carry the session's CSRF
// token and, when the browser says where it came from, come from here.
func (c *console) signedIn(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var s *consoleSession
		var id string
		if ck, err := r.Cookie(cookieName); err == nil {
			id = ck.Value
			if s, err = c.sessions.get(r.Context(), id); err != nil {
				c.renderError(w, r, nil, http.StatusServiceUnavailable, "the daemon cannot reach its database right now; try again")
				return
			}
		}
		if s == nil {
			clearCookie(w)
			target := "/ui/login"
			if r.URL.Query().Get("signed_in") == "1" && id == "" {
				// Just signed in, and the cookie did not come back.
				c.Logger.WarnContext(r.Context(), "console sign-in: the browser did not send the session cookie back",
					"secure_cookie", c.SecureCookies, "tls", r.TLS != nil)
				target = "/ui/login?cookie=dropped"
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodGet && r.URL.Query().Has("signed_in") {
			// The cookie came back: on to the page, without the marker.
			http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
			return
		}
		if c.OAuth != nil {
			var ok bool
			if s, ok = c.recheck(w, r, s); !ok {
				return
			}
		}
		if r.Method == http.MethodPost && (!sameOrigin(r) || !s.validCSRF(r)) {
			c.renderError(w, r, s, http.StatusForbidden, "this form's security token is missing or wrong (CSRF): reload the page and try again")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, s)))
	})
}

// operatorOnly refuses actions to readers (the API would too; this says
// so before asking it).
func (c *console) operatorOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s := sessionOf(r); !s.operator() {
			c.renderError(w, r, s, http.StatusForbidden, "only an operator token may act; this one is a "+string(s.principal.Role)+" token")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin is false when the browser says the request came from another
// origin (Origin, else Referer); a request that says nothing passes: the
// CSRF token and SameSite=Strict still hold.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	if from == "" {
		return r.Header.Get("Origin") != "null"
	}
	u, err := url.Parse(from)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}
