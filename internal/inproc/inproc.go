// Package inproc carries HTTP requests to a handler in the same process,
// without a socket: the console and the MCP server call the daemon's own
// API through the Go client this way, so every action they take passes the
// same authentication, scope checks, validation and events as a request
// from the network (and nothing is reimplemented beside the API).
//
// Answers stream: a handler's writes reach the response body as they are
// made (through a pipe), so a Server-Sent Events stream works too, and
// closing the body cancels the handler's request context.
package inproc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
)

// Transport is an http.RoundTripper that serves each request with Handler.
type Transport struct {
	Handler http.Handler
	// RemoteAddr is what the handler sees as the caller's address
	// (default "inproc").
	RemoteAddr string
	// Context, when set, adds values to each request's context: what an
	// in-process caller tells the handler that no request from the
	// network can (the console's credentials, api.InProcessToken).
	Context func(context.Context) context.Context
}

// RoundTrip serves req with t.Handler and returns once the handler wrote
// its header (or returned). Errors: the request's context error when it
// ends before that.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	// The handler gets a context of its own, as a request from the network
	// would: the caller's deadline and cancellation, none of its values (a
	// router's values in the caller's context would route this request).
	ctx, cancelCtx := context.WithCancel(context.Background())
	if d, ok := req.Context().Deadline(); ok {
		ctx, cancelCtx = context.WithDeadline(context.Background(), d)
	}
	if t.Context != nil {
		ctx = t.Context(ctx)
	}
	stop := context.AfterFunc(req.Context(), cancelCtx)
	cancel := func() { stop(); cancelCtx() }
	sreq := req.Clone(ctx)
	sreq.RequestURI = req.URL.RequestURI()
	sreq.RemoteAddr = t.RemoteAddr
	if sreq.RemoteAddr == "" {
		sreq.RemoteAddr = "inproc"
	}
	if sreq.Host == "" {
		sreq.Host = req.URL.Host
	}
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &writer{header: http.Header{}, pipe: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			// A panic ends this request only, as net/http contains one to
			// its connection: the caller gets a 500 (or a cut body) and an
			// error, the daemon lives on.
			if p := recover(); p != nil {
				w.ensureHeader(http.StatusInternalServerError)
				pw.CloseWithError(fmt.Errorf("inproc: the handler panicked: %v", p))
				return
			}
			w.ensureHeader(http.StatusOK)
			pw.Close()
		}()
		t.Handler.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		// The caller's own error where its context ended: the deadline
		// and the AfterFunc race, and a deadline must read as a timeout.
		err := req.Context().Err()
		if err == nil {
			err = ctx.Err()
		}
		cancel()
		pr.CloseWithError(err)
		return nil, err
	}
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: &body{PipeReader: pr, cancel: cancel}, ContentLength: -1, Request: req,
	}, nil
}

// writer is the handler's side: headers until the first write, then the
// pipe. Flush is a no-op: every write already reaches the reader.
type writer struct {
	header http.Header
	sent   http.Header
	status int
	pipe   *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
}

func (w *writer) Header() http.Header { return w.header }

func (w *writer) WriteHeader(status int) {
	if status >= 100 && status < 200 {
		return // informational answers are not passed on
	}
	w.ensureHeader(status)
}

func (w *writer) ensureHeader(status int) {
	w.once.Do(func() {
		w.status, w.sent = status, w.header.Clone()
		close(w.ready)
	})
}

func (w *writer) Write(p []byte) (int, error) {
	w.ensureHeader(http.StatusOK)
	return w.pipe.Write(p)
}

func (w *writer) Flush() {}

// body cancels the handler's request when the caller closes it.
type body struct {
	*io.PipeReader
	cancel context.CancelFunc
}

func (b *body) Close() error {
	b.cancel()
	return b.PipeReader.Close()
}
