package checkpointd

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"unicode/utf8"
)

// The validation fast path (issue #17, decision 3).
//
// The generic JSON Schema engine costs a checkpoint write more than any
// other step of its validation. fastSchema is the same published schema
// (CheckpointSchemaJSON, after the $ref inlining the engine also gets)
// compiled into a small tree of Go checks. It is a recogniser of valid
// documents only: accepts(tree) is true only when the engine would accept
// the tree too, and false when the document is invalid *or* when it holds
// anything the fast path does not model (an integer written as 1.0 or
// 1e2, a leap second, a number where the schema does not expect one).
// A false sends the document through the engine exactly as before, so
// every rejection, with its problem paths and messages, still comes from
// the engine: the two paths cannot disagree on what is reported, only on
// how fast an ordinary valid document passes. A keyword the compiler does
// not know disables the fast path altogether (fastSchema stays nil), so a
// schema change can never be half-mirrored. FuzzValidationDifferential and
// TestValidationDifferential hold the two to the same verdicts.
var fastSchema = func() *fastNode {
	n, err := compileFast(CheckpointSchemaJSON)
	if err != nil {
		return nil // the engine validates everything; a test fails on this
	}
	return n
}()

// fastNode is one subschema. Limits of -1 are absent.
type fastNode struct {
	typ                string // "", "object", "array", "string" or "integer"
	constLit           string // the const, as a JSON integer literal; "" none
	props              map[string]*fastNode
	required           []string
	closed             bool // additionalProperties: false
	items              *fastNode
	minItems, maxItems int
	minLen, maxLen     int
	match              func(string) bool // pattern
	dateTime           bool
	min, max           int64
	hasMin, hasMax     bool
}

// acceptsDocument reports whether the fast path is on and the tree surely
// satisfies the whole schema.
func (n *fastNode) acceptsDocument(tree map[string]any) bool {
	return n != nil && n.accepts(tree)
}

// accepts reports whether v surely satisfies the subschema.
func (n *fastNode) accepts(v any) bool {
	if n.constLit != "" {
		if num, ok := v.(json.Number); !ok || string(num) != n.constLit {
			return false
		}
	}
	switch v := v.(type) {
	case map[string]any:
		return (n.typ == "" || n.typ == "object") && n.acceptsObject(v)
	case []any:
		if n.typ != "" && n.typ != "array" || n.minItems >= 0 && len(v) < n.minItems || n.maxItems >= 0 && len(v) > n.maxItems {
			return false
		}
		if n.items != nil {
			for _, e := range v {
				if !n.items.accepts(e) {
					return false
				}
			}
		}
		return true
	case string:
		return (n.typ == "" || n.typ == "string") && n.acceptsString(v)
	case json.Number:
		return n.acceptsNumber(string(v))
	}
	// bool or null: no site of schema v1 takes one.
	return false
}

func (n *fastNode) acceptsObject(m map[string]any) bool {
	for _, k := range n.required {
		if _, ok := m[k]; !ok {
			return false
		}
	}
	for k, e := range m {
		p, ok := n.props[k]
		if !ok {
			if n.closed {
				return false
			}
			continue
		}
		if !p.accepts(e) {
			return false
		}
	}
	return true
}

func (n *fastNode) acceptsString(s string) bool {
	// Lengths count code points, as the engine does; a byte length within
	// the bound needs no counting.
	if n.maxLen >= 0 && len(s) > n.maxLen && utf8.RuneCountInString(s) > n.maxLen {
		return false
	}
	if n.minLen > 0 && (len(s) < n.minLen || utf8.RuneCountInString(s) < n.minLen) {
		return false
	}
	if n.match != nil && !n.match(s) {
		return false
	}
	return !n.dateTime || fastDateTime(s)
}

// acceptsNumber takes only plain integer literals of up to 18 digits,
// which int64 holds exactly; any other number goes to the engine.
func (n *fastNode) acceptsNumber(lit string) bool {
	if n.typ != "integer" && n.constLit == "" {
		return false
	}
	digits := lit
	if digits != "" && digits[0] == '-' {
		digits = digits[1:]
	}
	if digits == "" || len(digits) > 18 {
		return false
	}
	for i := 0; i < len(digits); i++ {
		if !isCanonDigit(digits[i]) {
			return false
		}
	}
	x, err := strconv.ParseInt(lit, 10, 64)
	return err == nil && (!n.hasMin || x >= n.min) && (!n.hasMax || x <= n.max)
}

// compileFast compiles the schema for the fast path, or fails on anything
// it does not model.
func compileFast(src []byte) (*fastNode, error) {
	v, err := decodeJSONValue(src) // numbers as json.Number
	if err != nil {
		return nil, err
	}
	doc, _ := v.(map[string]any)
	defs, _ := doc["$defs"].(map[string]any)
	return compileFastNode(inlineLocalRefs(doc, defs), true)
}

func compileFastNode(v any, root bool) (*fastNode, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("subschema %v is not an object", v)
	}
	n := &fastNode{minItems: -1, maxItems: -1, minLen: -1, maxLen: -1}
	var err error
	for k, e := range m {
		switch k {
		case "description", "title":
		case "$schema", "$id", "$defs":
			if !root {
				return nil, fmt.Errorf("%s below the root", k)
			}
		case "type":
			s, _ := e.(string)
			switch s {
			case "object", "array", "string", "integer":
				n.typ = s
			default:
				return nil, fmt.Errorf("type %v", e)
			}
		case "const":
			num, ok := e.(json.Number)
			if _, err := strconv.ParseInt(string(num), 10, 64); !ok || err != nil {
				return nil, fmt.Errorf("const %v", e)
			}
			n.constLit = string(num)
		case "properties":
			props, ok := e.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("properties %v", e)
			}
			n.props = make(map[string]*fastNode, len(props))
			for p, s := range props {
				if n.props[p], err = compileFastNode(s, false); err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
			}
		case "required":
			list, ok := e.([]any)
			if !ok {
				return nil, fmt.Errorf("required %v", e)
			}
			for _, r := range list {
				s, ok := r.(string)
				if !ok {
					return nil, fmt.Errorf("required %v", e)
				}
				n.required = append(n.required, s)
			}
		case "additionalProperties":
			if e != false {
				return nil, fmt.Errorf("additionalProperties %v", e)
			}
			n.closed = true
		case "items":
			if n.items, err = compileFastNode(e, false); err != nil {
				return nil, fmt.Errorf("items: %w", err)
			}
		case "minItems", "maxItems", "minLength", "maxLength":
			num, _ := e.(json.Number)
			x, err := strconv.Atoi(string(num))
			if err != nil || x < 0 {
				return nil, fmt.Errorf("%s %v", k, e)
			}
			*map[string]*int{"minItems": &n.minItems, "maxItems": &n.maxItems, "minLength": &n.minLen, "maxLength": &n.maxLen}[k] = x
		case "minimum", "maximum":
			num, _ := e.(json.Number)
			x, err := strconv.ParseInt(string(num), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s %v", k, e)
			}
			if k == "minimum" {
				n.min, n.hasMin = x, true
			} else {
				n.max, n.hasMax = x, true
			}
		case "pattern":
			s, _ := e.(string)
			if n.match = fastMatchers[s]; n.match == nil {
				re, err := regexp.Compile(s)
				if err != nil {
					return nil, err
				}
				n.match = re.MatchString
			}
		case "format":
			if e != "date-time" {
				return nil, fmt.Errorf("format %v", e)
			}
			n.dateTime = true
		default:
			return nil, fmt.Errorf("keyword %q", k)
		}
	}
	return n, nil
}
