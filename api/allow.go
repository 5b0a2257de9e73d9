package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// headAsGet routes HEAD as GET: no route registers HEAD of its own, and
// net/http sends a HEAD answer's status and headers without its body.
// chi's middleware.GetHead looks ahead for a HEAD route first, which a
// mounted subrouter's root always seems to have (it takes every method),
// so HEAD /v1/sessions/{id} would still be refused.
func headAsGet(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rctx := chi.RouteContext(r.Context()); r.Method == http.MethodHead && rctx != nil {
			rctx.RouteMethod = http.MethodGet
		}
		next.ServeHTTP(w, r)
	})
}

// routeMethods are the methods a route may serve, in the order an Allow
// header lists them.
var routeMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete}

// allowTable answers the Allow header of a 405 (RFC 9110 §15.5.6): the
// methods the router serves at the request's path, HEAD wherever GET is
// (headAsGet). It is built from chi.Walk, so it lists exactly the
// routes registered. chi's own Match cannot serve here: a mounted
// subrouter's root answers every method at the parent level and decides
// 405 only inside.
type allowTable struct {
	// patterns holds every routed pattern in one flat router, to find
	// which one a path is.
	patterns *chi.Mux
	allowed  map[string][]string // pattern → methods
}

// build records every route of routes. Call it once every route is
// registered, before serving.
func (t *allowTable) build(routes chi.Routes) {
	t.patterns, t.allowed = chi.NewRouter(), map[string][]string{}
	found := http.NotFoundHandler()
	add := func(pattern, method string) {
		if _, ok := t.allowed[pattern]; !ok {
			t.patterns.Handle(pattern, found)
		}
		if !slices.Contains(t.allowed[pattern], method) {
			t.allowed[pattern] = append(t.allowed[pattern], method)
		}
	}
	_ = chi.Walk(routes, func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		// A subrouter's root ("/v1/sessions/{id}/") is also served without
		// the slash.
		patterns := []string{pattern}
		if p := strings.TrimSuffix(pattern, "/"); p != pattern && p != "" {
			patterns = append(patterns, p)
		}
		for _, p := range patterns {
			add(p, method)
			if method == http.MethodGet {
				add(p, http.MethodHead)
			}
		}
		return nil
	})
}

// methods is the Allow header for r's path.
func (t *allowTable) methods(r *http.Request) string {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	served := t.allowed[t.patterns.Find(chi.NewRouteContext(), http.MethodGet, path)]
	var out []string
	for _, m := range routeMethods {
		if slices.Contains(served, m) {
			out = append(out, m)
		}
	}
	return strings.Join(out, ", ")
}
