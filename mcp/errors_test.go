package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// TestTakeoverErrorKeepsTheRun: a takeover whose verdict read fails still
// hands the model its new run, with the read's problem code.
func TestTakeoverErrorKeepsTheRun(t *testing.T) {
	res := errorResult(&takeoverError{run: &checkpointd.Run{ID: "run_new", FencingToken: 2},
		err: &client.Error{Status: 503, Code: "store_unavailable", Detail: "the store is away"}})
	var got struct {
		Code string          `json:"code"`
		Run  checkpointd.Run `json:"run"`
		Next string          `json:"next"`
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &got); err != nil {
		t.Fatal(err)
	}
	if !res.IsError || got.Code != "store_unavailable" || got.Run.ID != "run_new" || got.Run.FencingToken != 2 || got.Next == "" {
		t.Errorf("%+v %+v", res, got)
	}
}
