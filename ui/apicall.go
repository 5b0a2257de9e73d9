package ui

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/checkpointd/checkpointd/internal/inproc"
)

// problem is an API error answer (RFC 9457 with our code).
type problem struct {
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	raw    []byte
}

func (p *problem) Error() string {
	if p.Detail != "" {
		return p.Detail
	}
	return fmt.Sprintf("%d %s", p.Status, p.Code)
}

// call makes one API request in process with the session's token and
// decodes a 2xx answer into out (nil: ignore it). Other answers are a
// *problem.
func (c *console) call(ctx context.Context, s *consoleSession, method, path string, in, out any) error {
	var body io.Reader = http.NoBody
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://checkpointd.inproc"+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&inproc.Transport{Handler: c.API, RemoteAddr: "console"}).RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		p := &problem{Status: resp.StatusCode, raw: raw}
		_ = json.Unmarshal(raw, p)
		p.Status = resp.StatusCode
		return p
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	return json.Unmarshal(raw, out)
}
