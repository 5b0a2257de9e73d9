package ui

import (
	"context"
	"errors"
	"net/http"

	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/inproc"
)

// api is the Go client over the daemon's own API handler, in process,
// authenticated by the session's token hash: the console decides nothing
// the API would not.
func (c *console) api(s *consoleSession) *client.Client {
	cl, err := client.New(client.Config{Address: "http://checkpointd.inproc", UserAgent: "checkpointd-console",
		HTTPClient: &http.Client{Transport: c.transport(s)}, MaxAttempts: 1})
	if err != nil {
		panic(err) // the address is a constant
	}
	return cl
}

// transport serves the session's requests with the API in process, as the
// person who signed in (api.InProcessToken).
func (c *console) transport(s *consoleSession) *inproc.Transport {
	return &inproc.Transport{Handler: c.API, RemoteAddr: "console",
		Context: func(ctx context.Context) context.Context { return api.InProcessToken(ctx, s.tokenHash) }}
}

// notFound is a console-made answer for a page that names nothing.
func notFound(detail string) error {
	return &client.Error{Status: http.StatusNotFound, Code: "not_found", Detail: detail}
}

func asProblem(err error) (*client.Error, bool) {
	var p *client.Error
	ok := errors.As(err, &p)
	return p, ok
}
