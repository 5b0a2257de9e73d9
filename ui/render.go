package ui

import (
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/internal/present"
)

// view is what every page template gets.
type view struct {
	Title   string
	Session *consoleSession
	// Nav marks the current section in the navigation.
	Nav   string
	Error string
	// Flash is a fixed message after an action (done=…), never text from
	// the request.
	Flash string
	Data  any
	// Refresh, when set, is a same-origin path the page moves on to.
	Refresh string
}

// CSRF is the token every form of the page carries.
func (v view) CSRF() string {
	if v.Session == nil {
		return ""
	}
	return v.Session.csrf
}

// Who names the signed-in token.
func (v view) Who() string {
	if v.Session == nil {
		return ""
	}
	return v.Session.principal.Name + " (" + string(v.Session.principal.Role) + ")"
}

// Operator says whether action buttons are shown.
func (v view) Operator() bool { return v.Session != nil && v.Session.operator() }

// pageFunc reads what a page shows. It returns the template and its data.
type pageFunc func(r *http.Request, s *consoleSession) (tmpl string, v view, err error)

// actionFunc acts through the API and says where to go next.
type actionFunc func(r *http.Request, s *consoleSession) (redirect string, err error)

func (c *console) page(fn pageFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := sessionOf(r)
		tmpl, v, err := fn(r, s)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		v.Session = s
		v.Flash = flashes[r.URL.Query().Get("done")]
		c.render(w, r, http.StatusOK, tmpl, v)
	}
}

func (c *console) action(fn actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := sessionOf(r)
		to, err := fn(r, s)
		if err != nil {
			c.fail(w, r, s, err)
			return
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
	}
}

// flashes are the messages an action's redirect may ask for.
var flashes = map[string]string{
	"parked":    "Parked: its run is fenced off; the session waits for the next run.",
	"ended":     "Ended on your behalf.",
	"cleared":   "Force-cleared: the session, its checkpoints, leases and events are gone (a tombstone remains).",
	"released":  "Lease released.",
	"started":   "Drain started: new sessions and runs are refused.",
	"completed": "Drain completed: safe to stop the daemon.",
	"cancelled": "Drain cancelled (or lifted): new sessions and runs are admitted.",
	"reconcile": "Reconcile pass done.",
}

// fail answers an error of the API: a token it no longer accepts ends the
// console session (revoked: sign in again); others are shown.
func (c *console) fail(w http.ResponseWriter, r *http.Request, s *consoleSession, err error) {
	if p, ok := asProblem(err); ok {
		if p.Status == http.StatusUnauthorized {
			if s != nil {
				_ = c.sessions.end(r.Context(), s.id)
			}
			clearCookie(w)
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		msg := p.Detail
		if msg == "" {
			msg = p.Title
		}
		c.renderError(w, r, s, p.Status, msg)
		return
	}
	c.Logger.ErrorContext(r.Context(), "console", "err", err)
	c.renderError(w, r, s, http.StatusInternalServerError, "the console could not read the daemon's answer")
}

func (c *console) renderError(w http.ResponseWriter, r *http.Request, s *consoleSession, status int, msg string) {
	c.render(w, r, status, "error", view{Title: http.StatusText(status), Session: s, Error: msg})
}

func (c *console) render(w http.ResponseWriter, r *http.Request, status int, name string, v view) {
	t := c.pages[name]
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := t.ExecuteTemplate(w, "layout", v); err != nil {
		c.Logger.ErrorContext(r.Context(), "console template", "page", name, "err", err)
	}
}

// parsePages parses each page with the layout.
func parsePages() map[string]*template.Template {
	names := []string{"login", "signedin", "error", "fleet", "session", "confirm", "drain", "leases", "errors", "reconcile"}
	out := map[string]*template.Template{}
	for _, n := range names {
		out[n] = template.Must(template.New(n).Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/parts.html", "templates/"+n+".html"))
	}
	return out
}

var funcs = template.FuncMap{
	"utc": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"utcp": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
	"ago": ago,
	// agoText is how long ago t was, or how soon it comes ("in 9m").
	"agoText": func(t time.Time) string {
		if d := time.Until(t); d > time.Second {
			return "in " + present.Age(d)
		}
		if a := ago(t); a != "now" {
			return a + " ago"
		}
		return "just now"
	},
	"join":  strings.Join,
	"short": present.ShortID,
	// eventData is an event's data in a line; prettyJSON all of it.
	"eventData":  func(raw json.RawMessage) string { return present.EventData(raw) },
	"hasData":    func(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "{}" && string(raw) != "null" },
	"prettyJSON": prettyJSON,
	// sha is a commit as people read it: its first 7 digits.
	"sha": func(sha string) string {
		if len(sha) > 7 {
			return sha[:7]
		}
		return sha
	},
	"target":  target,
	"query":   func(k, v string) string { return url.Values{k: {v}}.Encode() },
	"deref":   func(b *bool) bool { return b != nil && *b },
	"isnil":   func(b *bool) bool { return b == nil },
	"reasons": reasonWords,
	"int":     func(n int64) int { return int(n) },
	// plural is "1 session", "2 sessions".
	"plural": func(n int, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.Itoa(n) + " " + many
	},
}

// indentJSON is v as JSON for a person to read: indented, and with &, <
// and > as themselves (the page escapes what it shows), not \u0026.
func indentJSON(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return strings.TrimSuffix(b.String(), "\n")
}

// prettyJSON is raw JSON as indentJSON shows it (raw as it is when it
// does not parse).
func prettyJSON(raw json.RawMessage) string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return string(raw)
	}
	return indentJSON(v)
}

// ago is how long ago t was, as the CLI shows ages (present.Age); a time
// ahead of this clock is "now".
func ago(t time.Time) string {
	if d := time.Since(t); d >= 0 {
		return present.Age(d)
	}
	return "now"
}

// target names what a session works on (present.Target).
func target(s checkpointd.Session) string { return present.Target(&s) }

func reasonWords(rs []checkpointd.BlockReason) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return strings.Join(out, ", ")
}
