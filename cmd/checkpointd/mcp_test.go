package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPBridge runs `checkpointd mcp` as its own process and talks to it
// with the MCP SDK's client over stdio: the bridge serves the tools, which
// act on the daemon over HTTP with the bridge's token.
func TestMCPBridge(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	d := startServe(t, environ{}, "--data-dir", dir, "--roles", "author,triager", "--stages", "planned,implementing,done")
	out, _, err := runCLI(t, environ{}, "token", "create", "--data-dir", dir, "--role", "agent", "--name", "bridge", "--scope", "acme/*")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	agent := lines[len(lines)-1]

	if out, err := exec.Command(bin, "mcp", "--url", d.URL).CombinedOutput(); err == nil || !strings.Contains(string(out), "token is required") {
		t.Errorf("the bridge without a token: %v %s", err, out)
	}

	// A bogus token or a dead daemon is reported at start, on stderr,
	// with a non-zero exit: not at the first tool call.
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	for _, tc := range []struct{ url, token, want string }{
		{d.URL, "cpd_bogus", "refuses the token"},
		{dead.URL, agent, "cannot reach the daemon"},
	} {
		cmd := exec.Command(bin, "mcp", "--url", tc.url, "--token", tc.token, "--call-timeout", "5s")
		var stderr bytes.Buffer
		cmd.Stdin, cmd.Stderr = strings.NewReader(""), &stderr
		if err := cmd.Run(); err == nil || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("the bridge at %s with token %.9s: %v, stderr %q; want a non-zero exit saying %q", tc.url, tc.token, err, stderr.String(), tc.want)
		}
	}

	c := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.CommandTransport{Command: exec.Command(bin, "mcp", "--url", d.URL, "--token", agent)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil || len(tools.Tools) != 10 {
		t.Fatalf("tools over stdio: %v %v", err, tools)
	}
	// The bridge read the daemon's roles and stages at start: the input
	// schemas name them.
	for _, tool := range tools.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		switch tool.Name {
		case "session_start":
			if !strings.Contains(string(raw), `"enum":["author","triager"]`) {
				t.Errorf("session_start's role names no configured roles: %s", raw)
			}
		case "checkpoint_write":
			if !strings.Contains(string(raw), `"enum":["planned","implementing","done"]`) {
				t.Errorf("checkpoint_write's stage names no configured stages: %.300s", raw)
			}
		}
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
	// The daemon has the session the bridge created, and session_find
	// finds it by its branch.
	call(t, "GET", d.URL+"/v1/sessions/"+started.Session.ID, readSecret(t, tokenPath(dir)), nil).expect(t, 200)
	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "session_find", Arguments: map[string]any{"repo": "acme/widgets", "branch": "fix-12"}})
	if err != nil || res.IsError {
		t.Fatalf("session_find: %v %v", err, res)
	}
	var foundOut struct {
		Items []struct {
			ID    string
			RunID string `json:"run_id"`
		}
	}
	raw, _ = json.Marshal(res.StructuredContent)
	if _ = json.Unmarshal(raw, &foundOut); len(foundOut.Items) != 1 || foundOut.Items[0].ID != started.Session.ID || foundOut.Items[0].RunID != started.Run.ID {
		t.Errorf("session_find over the bridge: %s", raw)
	}

	res, err = cs.CallTool(t.Context(), &sdk.CallToolParams{Name: "session_start",
		Arguments: map[string]any{"repo": "other/repo", "role": "author", "agent": map[string]any{}}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*sdk.TextContent).Text, `"code":"forbidden"`) {
		t.Errorf("out of scope over the bridge: %v %+v", err, res)
	}
}

// TestMCPBridgeAgainstABadDaemon: the stdio bridge in front of something
// that is not a healthy daemon — an answer that is not JSON, one far past
// any real answer's size, one that never comes, one that stops halfway —
// answers each tool call with an error result the model can read, within
// its --call-timeout, and stays up for the next call.
func TestMCPBridgeAgainstABadDaemon(t *testing.T) {
	bin := buildBinary(t)
	var mode atomic.Value
	mode.Store("garbage")
	release := make(chan struct{})
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Read first: net/http notices a client that went away (and ends
		// the request's context) only once the body is consumed.
		_, _ = io.Copy(io.Discard, r.Body)
		if r.Method == "GET" && r.URL.Path == "/v1/drain" {
			// Healthy for the bridge's start-up check; bad afterwards.
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"draining":false,"counts":{"active":0,"ready":0,"blocking":0},"blocking":[]}`)
			return
		}
		if r.Method == "GET" && r.URL.Path == "/v1/schema/checkpoint" {
			// A schema without enums, as a daemon that predates them serves.
			w.Header().Set("Content-Type", "application/schema+json")
			io.WriteString(w, `{"type":"object"}`)
			return
		}
		switch mode.Load() {
		case "garbage":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			io.WriteString(w, "<html>\x00\xff not json")
		case "huge":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(201)
			chunk := bytes.Repeat([]byte(`{"a":1},`), 8<<10)
			for range 400 { // ~26 MB, past the client's 16 MiB bound
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "hang":
			select {
			case <-r.Context().Done():
			case <-release:
			}
		case "half":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "1000")
			w.WriteHeader(201)
			io.WriteString(w, `{"session":{"id":`)
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
			case <-release:
			}
		}
	}))
	defer bad.Close()
	defer close(release) // before Close: it waits for the handlers

	c := sdk.NewClient(&sdk.Implementation{Name: "bridge-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &sdk.CommandTransport{Command: exec.Command(bin, "mcp", "--url", bad.URL,
		"--token", "cpd_not_checked_here", "--call-timeout", "2s")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for _, tc := range []struct{ mode, want string }{
		{"garbage", "not the JSON expected"}, {"huge", "exceeds"}, {"hang", `"code":"unreachable"`},
		{"half", `"code":"unreachable"`}, {"garbage", "not the JSON expected"},
	} {
		mode.Store(tc.mode)
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		start := time.Now()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "session_start",
			Arguments: map[string]any{"repo": "acme/widgets", "role": "author", "agent": map[string]any{"runtime": "bridge"}}})
		cancel()
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: the call failed as a protocol error (the bridge is down?): %v", tc.mode, err)
		}
		text := ""
		if len(res.Content) > 0 {
			text = res.Content[0].(*sdk.TextContent).Text
		}
		if !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s: isError %v, %s; want %s", tc.mode, res.IsError, text, tc.want)
		}
		if took > 15*time.Second {
			t.Errorf("%s: answered after %s with a 2s call timeout", tc.mode, took)
		}
		if strings.ContainsRune(text, 0) {
			t.Errorf("%s: the answer carries the daemon's raw bytes: %q", tc.mode, text)
		}
	}
}
