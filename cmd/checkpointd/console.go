package main

import (
	"net/http"

	"github.com/checkpointd/checkpointd/ui"
)

// withConsole serves the operator console at /ui/ beside the API, and
// sends a person who opens the daemon's root to it. The console calls the
// API handler in process (ui.Deps.API).
func withConsole(apiHandler http.Handler, d ui.Deps) http.Handler {
	d.API = apiHandler
	console := ui.New(d)
	mux := http.NewServeMux()
	mux.Handle("/ui", console)
	mux.Handle("/ui/", console)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.Handle("/", apiHandler)
	return mux
}
