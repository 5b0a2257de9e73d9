package mcp_test

import (
	"encoding/json"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

func TestScratchSize(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	cs := d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil)
	tools, _ := cs.ListTools(t.Context(), nil)
	all, _ := json.Marshal(tools)
	t.Logf("total %d", len(all))
	for _, tool := range tools.Tools {
		in, _ := json.Marshal(tool.InputSchema)
		out, _ := json.Marshal(tool.OutputSchema)
		t.Logf("%s in=%d out=%d desc=%d", tool.Name, len(in), len(out), len(tool.Description))
	}
}
