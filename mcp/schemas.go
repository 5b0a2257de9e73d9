package mcp

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"

	"go.yaml.in/yaml/v4"

	"github.com/checkpointd/checkpointd"
)

// The tools' input and output schemas are cut from the published API
// description (docs/openapi.yaml, embedded as checkpointd.OpenAPIYAML) and
// the published checkpoint schema (checkpointd.CheckpointSchemaJSON): no
// hand copy that could drift from the API the tools call. A schema is
// self-contained: every component it names is bundled under $defs, and
// the checkpoint document under $defs/checkpoint_document (its own
// definitions beside it).

const checkpointDef = "checkpoint_document"

type spec struct {
	paths      map[string]any
	components map[string]any
	checkpoint map[string]any
}

var loadSpec = sync.OnceValue(func() *spec {
	var doc map[string]any
	if err := yaml.Unmarshal(checkpointd.OpenAPIYAML, &doc); err != nil {
		panic(fmt.Sprintf("mcp: the embedded OpenAPI document: %v", err))
	}
	var cp map[string]any
	if err := json.Unmarshal(checkpointd.CheckpointSchemaJSON, &cp); err != nil {
		panic(fmt.Sprintf("mcp: the embedded checkpoint schema: %v", err))
	}
	delete(cp, "$schema")
	delete(cp, "$id")
	comps, _ := doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	return &spec{paths: doc["paths"].(map[string]any), components: schemas, checkpoint: cp}
})

// bundle is a schema under construction with the definitions it needs.
type bundle struct {
	spec *spec
	defs map[string]any
}

func newBundle() *bundle { return &bundle{spec: loadSpec(), defs: map[string]any{}} }

// schema returns root with the definitions it reaches; root is used as
// it is. A definition nothing reaches any more (a request body whose
// properties objectOf inlined) is left out: a model pays for every byte.
func (b *bundle) schema(root map[string]any) map[string]any {
	out := maps.Clone(root)
	used := map[string]bool{}
	var reach func(v any)
	reach = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if ref, ok := x["$ref"].(string); ok {
				name, _, _ := strings.Cut(strings.TrimPrefix(ref, "#/$defs/"), "/")
				if def, ok := b.defs[name]; ok && !used[name] {
					used[name] = true
					reach(def)
				}
			}
			for _, e := range x {
				reach(e)
			}
		case []any:
			for _, e := range x {
				reach(e)
			}
		}
	}
	reach(root)
	if len(used) > 0 {
		defs := map[string]any{}
		for name := range used {
			defs[name] = b.defs[name]
		}
		out["$defs"] = defs
	}
	return out
}

// outline is what a tool announces of its answer: the top-level members
// with their JSON types, and which are always there. The whole answer
// schema (the API's, which tests check every answer against) would cost a
// model tens of kilobytes of context on every tools/list; the tool's
// description says what the members mean.
func outline(full map[string]any) map[string]any {
	defs, _ := full["$defs"].(map[string]any)
	props := map[string]any{}
	members, _ := full["properties"].(map[string]any)
	for name, v := range members {
		m, _ := v.(map[string]any)
		for m != nil {
			ref, ok := m["$ref"].(string)
			if !ok {
				break
			}
			m, _ = defs[strings.TrimPrefix(ref, "#/$defs/")].(map[string]any)
		}
		if t, ok := m["type"]; ok {
			props[name] = map[string]any{"type": t}
		} else {
			props[name] = map[string]any{}
		}
	}
	out := map[string]any{"type": "object", "properties": props}
	if req, ok := full["required"]; ok {
		out["required"] = req
	}
	return out
}

// rewrite copies v with every reference pointed into the bundle.
func (b *bundle) rewrite(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			if k == "$ref" {
				if s, ok := e.(string); ok {
					out[k] = b.ref(s)
					continue
				}
			}
			out[k] = b.rewrite(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = b.rewrite(e)
		}
		return out
	}
	return v
}

func (b *bundle) ref(s string) string {
	if name, ok := strings.CutPrefix(s, "#/components/schemas/"); ok {
		b.component(name)
		return "#/$defs/" + name
	}
	if rest, ok := strings.CutPrefix(s, "schema/checkpoint.v1.json"); ok {
		b.checkpointDocument()
		if rest == "" {
			return "#/$defs/" + checkpointDef
		}
		if strings.HasPrefix(rest, "#/$defs/") {
			return rest // the document's definitions are the bundle's
		}
		return "#/$defs/" + checkpointDef + strings.TrimPrefix(rest, "#")
	}
	panic("mcp: a reference the schema bundler does not know: " + s)
}

// component adds an OpenAPI component to the definitions.
func (b *bundle) component(name string) {
	if _, ok := b.defs[name]; ok {
		return
	}
	src, ok := b.spec.components[name]
	if !ok {
		panic("mcp: no component " + name + " in docs/openapi.yaml")
	}
	b.defs[name] = map[string]any{} // a placeholder breaks cycles
	b.defs[name] = b.rewrite(src)
}

// checkpointDocument adds the published checkpoint schema, its own
// definitions beside it (their references, #/$defs/name, then resolve at
// the bundle's root as they do in the document: no longer path to pay
// for in every reference).
func (b *bundle) checkpointDocument() {
	if _, ok := b.defs[checkpointDef]; ok {
		return
	}
	doc := maps.Clone(b.spec.checkpoint)
	defs, _ := doc["$defs"].(map[string]any)
	delete(doc, "$defs")
	for name, def := range defs {
		if _, ok := b.spec.components[name]; ok {
			panic("mcp: the checkpoint schema's definition " + name + " is an OpenAPI component's name too")
		}
		b.defs[name] = def
	}
	b.defs[checkpointDef] = doc
}

// operation returns an operation of docs/openapi.yaml.
func (s *spec) operation(method, path string) map[string]any {
	item, ok := s.paths[path].(map[string]any)
	if !ok {
		panic("mcp: no path " + path + " in docs/openapi.yaml")
	}
	op, ok := item[strings.ToLower(method)].(map[string]any)
	if !ok {
		panic("mcp: no " + method + " " + path + " in docs/openapi.yaml")
	}
	return op
}

func jsonContent(v any) any {
	m, _ := v.(map[string]any)
	content, _ := m["content"].(map[string]any)
	media, _ := content["application/json"].(map[string]any)
	return media["schema"]
}

// responseSchema is the JSON body schema of an operation's answer.
func (b *bundle) responseSchema(method, path, status string) any {
	op := b.spec.operation(method, path)
	resp := op["responses"].(map[string]any)[status]
	if s := jsonContent(resp); s != nil {
		return b.rewrite(s)
	}
	panic("mcp: " + method + " " + path + " " + status + " has no JSON body")
}

// requestSchema is the JSON body schema of an operation's request.
func (b *bundle) requestSchema(method, path string) any {
	op := b.spec.operation(method, path)
	if s := jsonContent(op["requestBody"]); s != nil {
		return b.rewrite(s)
	}
	panic("mcp: " + method + " " + path + " has no JSON request body")
}

// objectOf is a tool input: the named properties (path parameters the
// tool takes as arguments) beside those of a request body schema (a
// component object, inlined), with the body's required ones required too.
func (b *bundle) objectOf(body any, extra map[string]any, required ...string) map[string]any {
	props := map[string]any{}
	var req []any
	if body != nil {
		obj := b.inline(body)
		if p, ok := obj["properties"].(map[string]any); ok {
			for k, v := range p {
				props[k] = v
			}
		}
		if r, ok := obj["required"].([]any); ok {
			req = append(req, r...)
		}
	}
	for k, v := range extra {
		props[k] = v
	}
	for _, r := range required {
		req = append(req, r)
	}
	out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(req) > 0 {
		out["required"] = req
	}
	return b.schema(out)
}

// inline resolves a reference to a component into its (rewritten) schema.
func (b *bundle) inline(s any) map[string]any {
	m, _ := s.(map[string]any)
	if ref, ok := m["$ref"].(string); ok && strings.HasPrefix(ref, "#/$defs/") {
		name := strings.TrimPrefix(ref, "#/$defs/")
		def, _ := b.defs[name].(map[string]any)
		return def
	}
	return m
}

// ref names a component or the checkpoint document as a property schema.
func (b *bundle) refTo(name string) map[string]any {
	if name == checkpointDef {
		b.checkpointDocument()
	} else {
		b.component(name)
	}
	return map[string]any{"$ref": "#/$defs/" + name}
}

// enumOf is a string argument that must be one of values (a configured
// role or stage); without values, any string the daemon then judges.
func enumOf(values []string, description string) map[string]any {
	out := map[string]any{"type": "string", "description": description}
	if len(values) > 0 {
		out["enum"] = values
	}
	return out
}

// withWorkflow names wf's roles and stages as the enums of the checkpoint
// document's role and stage in input (a tool's input schema bundling the
// document). The zero Workflow leaves input as it is.
func withWorkflow(input map[string]any, wf checkpointd.Workflow) map[string]any {
	if wf.Validate() != nil {
		return input
	}
	defs := input["$defs"].(map[string]any) // schema's own map, not the spec's
	doc := maps.Clone(defs[checkpointDef].(map[string]any))
	props := maps.Clone(doc["properties"].(map[string]any))
	for name, values := range map[string][]string{"role": wf.Roles, "stage": wf.Stages} {
		p := maps.Clone(props[name].(map[string]any))
		p["enum"] = values
		props[name] = p
	}
	doc["properties"] = props
	defs[checkpointDef] = doc
	return input
}
