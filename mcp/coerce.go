package mcp

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// coerceNumbers turns a numeric string into a number wherever the input
// schema says integer or number: MCP clients often send "600" for 600,
// and the model meant the number. Anything else is left for the strict
// decode to refuse. Arguments that are not a JSON object come back as
// they are.
func coerceNumbers(args []byte, schema map[string]any) []byte {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		return args
	}
	defs, _ := schema["$defs"].(map[string]any)
	changed := false
	var walk func(v any, s map[string]any) any
	walk = func(v any, s map[string]any) any {
		if ref, ok := s["$ref"].(string); ok {
			if name, ok := strings.CutPrefix(ref, "#/$defs/"); ok && !strings.Contains(name, "/") {
				s, _ = defs[name].(map[string]any)
			}
		}
		switch x := v.(type) {
		case string:
			t, _ := s["type"].(string)
			if t != "integer" && t != "number" {
				return v
			}
			if _, err := strconv.ParseInt(x, 10, 64); err == nil || (t == "number" && isFloat(x)) {
				changed = true
				return json.Number(x)
			}
		case map[string]any:
			props, _ := s["properties"].(map[string]any)
			for k, e := range x {
				if ps, ok := props[k].(map[string]any); ok {
					x[k] = walk(e, ps)
				}
			}
		}
		return v
	}
	v = walk(v, schema)
	if !changed {
		return args
	}
	out, err := json.Marshal(v)
	if err != nil {
		return args
	}
	return out
}

func isFloat(s string) bool {
	_, err := strconv.ParseFloat(s, 64)
	return err == nil && strings.TrimSpace(s) == s
}
