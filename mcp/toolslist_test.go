package mcp_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// toolsListBudget is the product's bound on the tools/list answer, compact: a
// model pays for every byte of it in its context.
const toolsListBudget = 24_000

// TestToolsListIsSmall: the whole tools/list answer stays within budget,
// and every property a model fills is described.
func TestToolsListIsSmall(t *testing.T) {
	d := newDaemon(t, storetest.SQLite)
	cs := d.connect(t, d.token(checkpointd.RoleAgent, "acme/*"), nil)
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(tools)
	if len(all) > toolsListBudget {
		for _, tool := range tools.Tools {
			in, _ := json.Marshal(tool.InputSchema)
			out, _ := json.Marshal(tool.OutputSchema)
			t.Logf("%s: input %d, output %d, description %d bytes", tool.Name, len(in), len(out), len(tool.Description))
		}
		t.Errorf("tools/list is %d bytes compact, over the budget of %d", len(all), toolsListBudget)
	}
	t.Logf("tools/list: %d bytes compact", len(all))
	for _, tool := range tools.Tools {
		raw, _ := json.Marshal(tool.InputSchema)
		var in map[string]any
		_ = json.Unmarshal(raw, &in)
		defs, _ := in["$defs"].(map[string]any)
		for _, path := range undescribed(in, defs, "") {
			t.Errorf("%s: the property %s has no description", tool.Name, path)
		}
	}
}

// undescribed lists the properties under v without a description (on the
// property or on the definition it names).
func undescribed(v any, defs map[string]any, at string) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		if props, ok := x["properties"].(map[string]any); ok {
			for name, p := range props {
				if !described(p, defs) {
					out = append(out, at+"/"+name)
				}
			}
		}
		for k, e := range x {
			out = append(out, undescribed(e, defs, at+"/"+k)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, undescribed(e, defs, at)...)
		}
	}
	return out
}

func described(p any, defs map[string]any) bool {
	m, _ := p.(map[string]any)
	for m != nil {
		if d, _ := m["description"].(string); d != "" {
			return true
		}
		ref, _ := m["$ref"].(string)
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok {
			return false
		}
		m, _ = defs[name].(map[string]any)
	}
	return false
}
