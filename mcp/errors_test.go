package mcp

import (
	"encoding/json"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/client"
)

// TestTakeoverErrorKeepsTheRun: a takeover whose verdict read fails still
// hands the model its new run and its moved leases, with the read's problem code.
func TestTakeoverErrorKeepsTheRun(t *testing.T) {
	res := errorResult(&takeoverError{taken: &client.RunStarted{Run: &checkpointd.Run{ID: "run_new", FencingToken: 2},
		Leases: []checkpointd.Lease{{ID: "lse_moved", FencingToken: 5}}},
		err: &client.Error{Status: 503, Code: "store_unavailable", Detail: "the store is away"}})
	var got struct {
		Code   string              `json:"code"`
		Run    checkpointd.Run     `json:"run"`
		Leases []checkpointd.Lease `json:"leases"`
		Next   string              `json:"next"`
	}
	if err := json.Unmarshal([]byte(res.Content[0].(*sdk.TextContent).Text), &got); err != nil {
		t.Fatal(err)
	}
	if !res.IsError || got.Code != "store_unavailable" || got.Run.ID != "run_new" || got.Run.FencingToken != 2 || got.Next == "" ||
		len(got.Leases) != 1 || got.Leases[0].FencingToken != 5 {
		t.Errorf("%+v %+v", res, got)
	}
}
