package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPBridge runs `checkpointd mcp` as its own process and talks to it
// with the MCP SDK's client over stdio: the bridge serves the tools, which
// act on the daemon over HTTP with the bridge's token.
func TestMCPBridge(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	d := startServe(t, environ{}, "--data-dir", dir)
	out, _, err := runCLI(t, environ{}, "token", "create", "--data-dir", dir, "--role", "agent", "--name", "bridge", "--scope", "acme/*")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	agent := lines[len(lines)-1]

	if out, err := exec.Command(bin, "mcp", "--url", d.URL).CombinedOutput(); err == nil || !strings.Contains(string(out), "token is required") {
		t.Errorf("the bridge without a token: %v %s", err, out)
	}

	c := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.CommandTransport{Command: exec.Command(bin, "mcp", "--url", d.URL, "--token", agent)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 9 {
		t.Fatalf("tools over stdio: %v %v", err, tools)
	}
	res, err := cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "session_start",
		Arguments: map[string]any{"repo": "acme/widgets", "role": "author", "branch": "fix-12", "agent": map[string]any{"runtime": "bridge"}}})
	if err != nil || res.IsError {
		t.Fatalf("session_start: %v %v", err, res)
	}
	var started struct {
		Session struct{ ID string }
		Run     struct{ ID string }
	}
	raw, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(raw, &started)
	// The daemon has the session the bridge created.
	call(t, "GET", d.URL+"/v1/sessions/"+started.Session.ID, readSecret(t, tokenPath(dir)), nil).expect(t, 200)

	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "session_start",
		Arguments: map[string]any{"repo": "other/repo", "role": "author", "agent": map[string]any{}}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, `"code":"forbidden"`) {
		t.Errorf("out of scope over the bridge: %v %+v", err, res)
	}
}
