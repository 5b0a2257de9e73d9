package ui

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/checkpointd/checkpointd"
)

// change is one field that differs between two checkpoint documents.
type change struct {
	Path     string
	From, To string
}

// diffDocuments lists the fields (JSON pointers into the documents) whose
// values differ between a and b, in path order; a missing side is "—".
func diffDocuments(a, b checkpointd.Document) []change {
	fa, fb := flatten(a), flatten(b)
	paths := map[string]bool{}
	for p := range fa {
		paths[p] = true
	}
	for p := range fb {
		paths[p] = true
	}
	var out []change
	for p := range paths {
		va, oka := fa[p]
		vb, okb := fb[p]
		if oka && okb && va == vb {
			continue
		}
		if !oka {
			va = "—"
		}
		if !okb {
			vb = "—"
		}
		out = append(out, change{Path: p, From: va, To: vb})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// flatten maps each leaf of a document to its JSON text by JSON pointer.
func flatten(doc checkpointd.Document) map[string]string {
	raw, _ := json.Marshal(doc)
	var v any
	_ = json.Unmarshal(raw, &v)
	out := map[string]string{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				walk(path+"/"+strings.NewReplacer("~", "~0", "/", "~1").Replace(k), e)
			}
		case []any:
			if len(x) == 0 {
				out[path] = "[]"
			}
			for i, e := range x {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		default:
			out[path] = indentJSON(x) // & as itself, not \u0026
		}
	}
	walk("", v)
	return out
}
