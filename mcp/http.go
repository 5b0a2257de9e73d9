package mcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/internal/inproc"
)

// HTTPDeps are what the daemon's /mcp endpoint needs.
type HTTPDeps struct {
	// API is the daemon's API handler; tools call it in process.
	API http.Handler
	// Authenticate resolves a token's hash to its principal.
	Authenticate func(ctx context.Context, secretHash string) (*checkpointd.Principal, error)
	Version      string
	// Workflow names the configured roles and stages in the tools' input
	// schemas (Options.Workflow).
	Workflow checkpointd.Workflow
	// AllowedOrigins are browser origins (scheme://host[:port]) allowed to
	// call /mcp besides a loopback page calling a loopback daemon.
	AllowedOrigins []string
	// SessionTimeout closes an MCP session idle this long (default 30m).
	SessionTimeout time.Duration
}

// Handler serves MCP over the streamable HTTP transport at /mcp: a bearer
// token is required (401 without one), with the roles and scopes it has
// for the REST API, and one MCP session is bound to the token that opened
// it. Origins are checked against DNS rebinding (checkOrigin).
func Handler(d HTTPDeps) http.Handler {
	if d.SessionTimeout <= 0 {
		d.SessionTimeout = 30 * time.Minute
	}
	verify := func(ctx context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		p, err := d.Authenticate(ctx, checkpointd.HashToken(token))
		switch {
		case errors.Is(err, checkpointd.ErrStoreUnavailable):
			return nil, fmt.Errorf("the daemon cannot reach its database: %w", err)
		case err != nil:
			return nil, fmt.Errorf("%w: unknown or revoked token", auth.ErrInvalidToken)
		}
		// UserID binds the MCP session to this token: a request of the
		// session with another token is refused by the SDK.
		return &auth.TokenInfo{UserID: p.TokenID, Extra: map[string]any{"token": token}}, nil
	}
	servers := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		ti := auth.TokenInfoFromContext(r.Context())
		token, _ := ti.Extra["token"].(string)
		c, err := client.New(client.Config{Address: "http://checkpointd.inproc", Token: token, UserAgent: "checkpointd-mcp",
			HTTPClient: &http.Client{Transport: &inproc.Transport{Handler: d.API, RemoteAddr: "mcp"}}})
		if err != nil {
			return nil // the address is a constant; a token with a line break never authenticated
		}
		return New(c, Options{Version: d.Version, Workflow: d.Workflow})
	}, &sdk.StreamableHTTPOptions{SessionTimeout: d.SessionTimeout})
	authed := auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(servers)
	return checkOrigin(d.AllowedOrigins, authed)
}

// checkOrigin refuses (403) a request that carries an Origin header unless
// the origin is allowed, or both it and the Host are loopback: a web page
// must not reach the daemon through a browser, and DNS rebinding (an
// attacker's name resolving to 127.0.0.1) sends the attacker's origin.
// MCP clients that are not browsers send no Origin.
func checkOrigin(allowed []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin != "" && !slices.Contains(allowed, origin) && !(loopback(originHost(origin)) && loopback(r.Host)) {
			http.Error(w, "forbidden: origin "+origin+" may not call this MCP server", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func originHost(origin string) string {
	u, err := url.Parse(origin)
	if err != nil {
		return ""
	}
	return u.Host
}

// loopback is whether hostport names this machine's loopback.
func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
