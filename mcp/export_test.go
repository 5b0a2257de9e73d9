package mcp

import "github.com/checkpointd/checkpointd"

// AnswerSchemas are the whole answer schemas of the tools (the API's), of
// which tools/list announces only an outline: the tests check every answer
// against them.
func AnswerSchemas() map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, t := range tools(nil, checkpointd.Workflow{}, nil) {
		out[t.def.name] = t.def.output
	}
	return out
}
