package ui

import (
	"errors"
	"net/http"

	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/inproc"
)

// api is the Go client over the daemon's own API handler, in process, with
// the session's token: the console decides nothing the API would not.
func (c *console) api(s *consoleSession) *client.Client {
	cl, err := client.New(client.Config{Address: "http://checkpointd.inproc", Token: s.token, UserAgent: "checkpointd-console",
		HTTPClient: &http.Client{Transport: &inproc.Transport{Handler: c.API, RemoteAddr: "console"}}, MaxAttempts: 1})
	if err != nil {
		panic(err) // the address is a constant
	}
	return cl
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
