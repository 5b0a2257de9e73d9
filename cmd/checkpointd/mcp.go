package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v3"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
	"github.com/checkpointd/checkpointd/mcp"
)

// mcpCommand bridges a running daemon's tools to stdio, for MCP clients
// that only spawn local servers. The bridge serves the same
// tools and resources as the daemon's /mcp, each calling the daemon's API
// over HTTP with --token.
func mcpCommand(clientFlags []cli.Flag) *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the daemon's MCP tools on stdin/stdout, calling the daemon at --url with --token (for MCP clients that spawn local servers)",
		Flags: append(clientFlags[:len(clientFlags):len(clientFlags)],
			&cli.DurationFlag{Name: "call-timeout", Value: 30 * time.Second, Sources: cli.EnvVars("CHECKPOINTD_MCP_CALL_TIMEOUT"),
				Usage: "bound on each tool call and resource read toward the daemon, retries included; past it the tool answers unreachable"}),
		Action: func(ctx context.Context, c *cli.Command) error {
			token := strings.TrimSpace(c.String("token"))
			if token == "" {
				return errors.New("mcp: an agent token is required: --token or CHECKPOINTD_TOKEN")
			}
			cl, err := client.New(client.Config{Address: c.String("url"), Token: token, UserAgent: "checkpointd-mcp-bridge/" + version()})
			if err != nil {
				return err
			}
			if c.Duration("call-timeout") <= 0 {
				return errors.New("mcp: --call-timeout must be positive")
			}
			wf, err := checkBridge(ctx, cl, c.String("url"), c.Duration("call-timeout"))
			if err != nil {
				return err
			}
			return mcp.New(cl, mcp.Options{Version: version(), Workflow: wf, CallTimeout: c.Duration("call-timeout")}).Run(ctx, &sdk.StdioTransport{})
		},
	}
}

// checkBridge asks the daemon one authenticated read before the bridge
// serves: a bogus token or a dead daemon is reported on stderr at start
// (the command exits non-zero), not at a model's first tool call — as the
// daemon's own /mcp answers 401 at connect. It returns the daemon's
// configured roles and stages, read from the checkpoint schema it serves
// (the zero Workflow from a daemon that names none).
func checkBridge(ctx context.Context, cl *client.Client, url string, timeout time.Duration) (checkpointd.Workflow, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := cl.Drain().Status(ctx, client.ListOptions{Limit: 1})
	var schema []byte
	if err == nil {
		schema, err = cl.Schema(ctx, 0)
	}
	var p *client.Error
	switch {
	case err == nil:
		wf, _ := checkpointd.WorkflowOfSchema(schema)
		return wf, nil
	case errors.As(err, &p) && p.Code == "unauthorized":
		return checkpointd.Workflow{}, fmt.Errorf("mcp: the daemon at %s refuses the token (%s): check --token or CHECKPOINTD_TOKEN", url, p.Detail)
	case errors.As(err, &p):
		return checkpointd.Workflow{}, fmt.Errorf("mcp: the daemon at %s answered the start-up check with %d %s: %s", url, p.Status, p.Code, p.Detail)
	}
	return checkpointd.Workflow{}, fmt.Errorf("mcp: cannot reach the daemon at %s: %w", url, err)
}
