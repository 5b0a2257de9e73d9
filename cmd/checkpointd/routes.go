package main

import "net/http"

// routes puts the daemon's surfaces on one listener: the API, MCP at /mcp
// and the operator console at /ui/ (both of which call the API handler in
// process), and sends a person who opens the root to the console.
func routes(apiHandler, mcpHandler, console http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcpHandler)
	mux.Handle("/ui", console)
	mux.Handle("/ui/", console)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusFound)
	})
	mux.Handle("/", apiHandler)
	return mux
}
