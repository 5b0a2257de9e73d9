package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// Schema reads the checkpoint document's JSON Schema the daemon publishes
// (GET /v1/schema/checkpoint) for version (0: the version it writes). A
// version it does not publish is 404 not_found. No token is needed.
func (c *Client) Schema(ctx context.Context, version int) (json.RawMessage, error) {
	q := url.Values{}
	if version != 0 {
		q.Set("version", strconv.Itoa(version))
	}
	var out json.RawMessage
	if err := c.get(ctx, "/v1/schema/checkpoint", q, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Health reports whether the daemon process answers (GET /healthz).
func (c *Client) Health(ctx context.Context) error {
	return c.get(ctx, "/healthz", nil, nil)
}

// Ready reports whether the daemon can serve: its store commits a write
// now and its migrations are current (GET /readyz). Not ready is a 503
// store_unavailable *Error whose "reason" member says why. A probe is
// tried once, never retried.
func (c *Client) Ready(ctx context.Context) error {
	r, err := newRequest(http.MethodGet, "/readyz", nil, nil)
	if err != nil {
		return err
	}
	r.noRetry = true
	_, err = c.call(ctx, r, nil)
	return err
}

// OpenAPI reads the daemon's OpenAPI 3 document of this API, as YAML
// (GET /v1/openapi.yaml).
func (c *Client) OpenAPI(ctx context.Context) ([]byte, error) {
	r, err := newRequest(http.MethodGet, "/v1/openapi.yaml", nil, nil)
	if err != nil {
		return nil, err
	}
	ans, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	return ans.body, nil
}
