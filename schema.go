package checkpointd

import (
	"bytes"
	_ "embed" // the published schema is compiled into the binary
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/checkpointd/checkpointd/redact"
)

// CheckpointSchemaJSON is the JSON Schema (draft 2020-12) of checkpoint
// documents, schema v1: the file docs/schema/checkpoint.v1.json, served at
// GET /v1/schema/checkpoint with the configured roles and stages as enums
// (Workflow.CheckpointSchema). DecodeDocument validates against exactly these
// bytes. Callers must not modify it.
//
//go:embed docs/schema/checkpoint.v1.json
var CheckpointSchemaJSON []byte

const checkpointSchemaURL = "https://checkpointd.dev/schema/checkpoint.v1.json"

// maxDocumentProblems caps the problems one rejection reports: enough to fix a
// document in one round trip, not enough to make a hostile document cost a
// large response.
const maxDocumentProblems = 20

// checkpointSchema is compiled once at init: the schema is embedded, so a
// schema that does not compile is a build defect and must stop the binary
// before it serves anything.
var checkpointSchema = mustCompileSchema(checkpointSchemaURL, CheckpointSchemaJSON)

func mustCompileSchema(url string, src []byte) *jsonschema.Schema {
	sch, err := compileSchema(url, src, true)
	if err != nil {
		panic(fmt.Sprintf("checkpointd: embedded schema %s: %v", url, err))
	}
	return sch
}

func compileSchema(url string, src []byte, inline bool) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(src))
	if err != nil {
		return nil, err
	}
	if root, ok := doc.(map[string]any); ok && inline {
		if defs, ok := root["$defs"].(map[string]any); ok {
			doc = inlineLocalRefs(root, defs)
		}
	}
	c := jsonschema.NewCompiler()
	// Draft 2020-12 treats format as an annotation by default; a
	// timestamp that is not one must be rejected, not stored.
	c.AssertFormat()
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// inlineLocalRefs replaces every {"$ref": "#/$defs/x", …} by the
// definition merged with the keywords beside the $ref. The published schema
// keeps its $defs for readability; the validator evaluates a $ref as a
// separate subschema, which cost a third of its allocations. The schema's
// definitions hold no $ref and share no assertion keyword with the sites
// that use them, so the merge means the same thing.
func inlineLocalRefs(v any, defs map[string]any) any {
	switch v := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(v))
		if ref, ok := v["$ref"].(string); ok {
			name, local := strings.CutPrefix(ref, "#/$defs/")
			if def, found := defs[name].(map[string]any); local && found {
				maps.Copy(out, def)
			} else {
				out["$ref"] = ref
			}
		}
		for k, e := range v {
			if k != "$ref" {
				out[k] = inlineLocalRefs(e, defs)
			}
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = inlineLocalRefs(e, defs)
		}
		return out
	}
	return v
}

// DecodeDocument parses and validates a checkpoint document. It returns the
// generic JSON tree (numbers as json.Number), which the caller redacts and
// digests, and the typed Document.
//
// Errors: raw that is not a single well-formed UTF-8 JSON value (including
// trailing data after it) wraps ErrInvalidJSON. Anything else that is wrong
// is a *ValidationError of kind ErrInvalidCheckpoint listing up to 20
// problems, each located by the JSON pointer of the offending value (for an
// unknown or missing field, the pointer of that field): a top level that is
// not an object, a schema violation (docs/schema/checkpoint.v1.json), or a
// role or stage that wf does not configure. Problem messages never repeat
// the offending value, which may be a secret, except a role or stage name.
func DecodeDocument(raw []byte, wf Workflow) (tree map[string]any, doc *Document, err error) {
	tree, _, doc, err = decodeDocument(raw, wf)
	return tree, doc, err
}

// decodeDocument is DecodeDocument that also returns the canonical form it
// computed on the way, so a checkpoint write canonicalises once.
func decodeDocument(raw []byte, wf Workflow) (tree map[string]any, canonical []byte, doc *Document, err error) {
	return decodeDocumentWith(raw, wf, fastSchema)
}

// decodeDocumentWith is decodeDocument with the fast path fast; nil runs
// every document through the engine (the differential tests compare the
// two).
func decodeDocumentWith(raw []byte, wf Workflow, fast *fastNode) (tree map[string]any, canonical []byte, doc *Document, err error) {
	v, err := decodeJSONValue(raw)
	if err != nil {
		return nil, nil, nil, err
	}
	tree, ok := v.(map[string]any)
	if !ok {
		return nil, nil, nil, checkpointProblems([]Problem{{Path: "", Message: "must be a JSON object"}})
	}
	var problems []Problem
	accepted := fast.acceptsDocument(tree)
	if !accepted {
		// Not surely valid (fastschema.go): the engine decides and words
		// the problems. Out-of-range numbers are screened first because
		// the engine does exact (big.Rat) arithmetic, which a literal like
		// 1e999999 makes slow.
		problems = outOfRangeNumbers(tree, make([]string, 0, 8), nil)
		if len(problems) == 0 {
			problems = schemaProblems(checkpointSchema.Validate(tree))
			problems = append(problems, workflowProblems(tree, wf, problems)...)
		}
	} else {
		problems = workflowProblems(tree, wf, nil)
	}
	if len(problems) > 0 {
		return nil, nil, nil, checkpointProblems(problems)
	}
	// Decoding the canonical form rather than the raw bytes turns integers
	// written as 1.0 or 1e2, which the schema accepts, into int64-able
	// literals; DisallowUnknownFields guards against the schema and the
	// struct drifting apart.
	// The canonical form is about as long as the body (white space out,
	// escapes in): sized so, it is built without regrowing.
	canon, err := appendCanonical(make([]byte, 0, len(raw)+len(raw)/8), tree)
	if err != nil {
		return nil, nil, nil, checkpointProblems([]Problem{{Path: "", Message: "document cannot be encoded canonically"}})
	}
	if accepted {
		if doc, ok := documentFromTree(tree); ok {
			return tree, canon, doc, nil
		}
	}
	dec := json.NewDecoder(bytes.NewReader(canon))
	dec.DisallowUnknownFields()
	doc = new(Document)
	if err := dec.Decode(doc); err != nil {
		return nil, nil, nil, checkpointProblems([]Problem{{Path: "", Message: "document does not fit schema v1: " + err.Error()}})
	}
	return tree, canon, doc, nil
}

// decodeJSONValue decodes exactly one JSON value, keeping numbers exact
// (json.Number, the literal as written), as encoding/json with UseNumber
// does, at about half its cost: jsontext (the tokenizer of encoding/json/v2)
// scans the body once where encoding/json's Decoder scans it twice. Duplicate
// names are allowed, the last one wins, as in encoding/json.
// TestDecodeJSONValueMatchesEncodingJSON and FuzzDecodeJSONValue hold the
// two to the same trees, save one difference: an escaped lone surrogate
// ("\ud800"), which encoding/json turns into U+FFFD, is refused like the
// invalid UTF-8 it stands for.
func decodeJSONValue(raw []byte) (any, error) {
	// encoding/json silently replaces invalid UTF-8 with U+FFFD, which
	// would give two different bodies the same tree and digest; jsontext
	// refuses it too, but this says why.
	if !utf8.Valid(raw) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrInvalidJSON)
	}
	dec := jsontext.NewDecoder(bytes.NewBuffer(raw), jsontext.AllowDuplicateNames(true))
	v, err := readJSONValue(dec)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalidJSON)
		}
		// What went wrong and where, never the path: jsontext's own
		// message names the members on the way, which may be anything.
		var se *jsontext.SyntacticError
		if errors.As(err, &se) && se.Err != nil {
			return nil, fmt.Errorf("%w: %v after byte %d", ErrInvalidJSON, se.Err, se.ByteOffset)
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	off := dec.InputOffset()
	if rest := bytes.TrimLeft(raw[off:], " \t\r\n"); len(rest) > 0 {
		return nil, fmt.Errorf("%w: unexpected data after the JSON value at byte %d", ErrInvalidJSON, len(raw)-len(rest))
	}
	return v, nil
}

// readJSONValue reads the next value of dec as encoding/json decodes into
// an any: objects as map[string]any, arrays as []any (never nil), numbers
// as json.Number. jsontext bounds the nesting (10,000 deep, as
// encoding/json does), and so this recursion.
func readJSONValue(dec *jsontext.Decoder) (any, error) {
	switch dec.PeekKind() {
	case '0':
		num, err := dec.ReadValue()
		if err != nil {
			return nil, err
		}
		return json.Number(num), nil
	case '{':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		obj := map[string]any{}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return nil, err
			}
			name := tok.String() // before the next read voids tok
			v, err := readJSONValue(dec)
			if err != nil {
				return nil, err
			}
			obj[name] = v
		}
		_, err := dec.ReadToken()
		return obj, err
	case '[':
		if _, err := dec.ReadToken(); err != nil {
			return nil, err
		}
		arr := []any{}
		for dec.PeekKind() != ']' {
			v, err := readJSONValue(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.ReadToken()
		return arr, err
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case '"':
		return tok.String(), nil
	case 't', 'f':
		return tok.Bool(), nil
	}
	return nil, nil // null
}

func checkpointProblems(problems []Problem) *ValidationError {
	slices.SortFunc(problems, func(a, b Problem) int {
		if c := comparePointers(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	problems = slices.Compact(problems)
	if len(problems) > maxDocumentProblems {
		more := len(problems) - (maxDocumentProblems - 1)
		problems = append(problems[:maxDocumentProblems-1], Problem{Message: fmt.Sprintf("%d more problems not shown", more)})
	}
	return &ValidationError{Kind: ErrInvalidCheckpoint, Problems: problems}
}

// comparePointers orders JSON pointers token by token, array indexes
// numerically, so /evidence/2 comes before /evidence/10.
func comparePointers(a, b string) int {
	for a != "" && b != "" {
		var ta, tb string
		ta, a = nextPointerToken(a)
		tb, b = nextPointerToken(b)
		if ta == tb {
			continue
		}
		if isIndexToken(ta) && isIndexToken(tb) && len(ta) != len(tb) {
			return len(ta) - len(tb) // indexes have no leading zeros
		}
		return strings.Compare(ta, tb)
	}
	return len(a) - len(b)
}

func isIndexToken(t string) bool {
	for i := 0; i < len(t); i++ {
		if !isCanonDigit(t[i]) {
			return false
		}
	}
	return t != ""
}

func nextPointerToken(p string) (tok, rest string) {
	p = p[1:] // every non-empty pointer starts with '/'
	if i := strings.IndexByte(p, '/'); i >= 0 {
		return p[:i], p[i:]
	}
	return p, ""
}

// jsonPointer formats reference tokens as a JSON pointer (RFC 6901). A
// token is a member name the client chose, which may hold a secret (a URL
// with a password): it is redacted before it is escaped, since escaping
// ("//" as "~1~1") hides it from the redactor.
func jsonPointer(tokens ...string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(EscapePointerToken(RedactName(t)))
	}
	return b.String()
}

// EscapePointerToken escapes one reference token of a JSON pointer.
func EscapePointerToken(t string) string {
	if strings.ContainsAny(t, "~/") {
		t = strings.NewReplacer("~", "~0", "/", "~1").Replace(t)
	}
	return t
}

// LooksLikeSecret reports whether s would not survive redaction as it is:
// redact.String changes it, cannot read it, or s already holds a redaction
// marker (which a stored name would make indistinguishable from one the
// daemon wrote). A name matched as sent (a branch, a repo, an id) that
// looks like a secret is refused, or not kept, rather than rewritten.
func LooksLikeSecret(s string) bool {
	red, _, err := redact.String(s)
	return err != nil || red != s || strings.Contains(s, RedactionMarker)
}

// RedactionMarker opens every "[REDACTED:<kind>]" marker redact writes.
const RedactionMarker = "[REDACTED:"

// RedactName is a member name or other identifier from a client as it may
// be echoed, logged or stored: valid UTF-8, redacted. One the redactor
// cannot read is not shown at all.
func RedactName(s string) string {
	red, _, err := redact.String(strings.ToValidUTF8(s, "\uFFFD"))
	if err != nil {
		return "[REDACTED:unreadable]"
	}
	return red
}

// outOfRangeNumbers reports numbers no field of schema v1 could accept and
// that would be expensive to check exactly: over 64 characters, or beyond
// 10^±400.
func outOfRangeNumbers(v any, path []string, out []Problem) []Problem {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			out = outOfRangeNumbers(e, append(path, k), out)
		}
	case []any:
		for i, e := range v {
			switch e.(type) {
			case map[string]any, []any, json.Number:
				out = outOfRangeNumbers(e, append(path, strconv.Itoa(i)), out)
			}
		}
	case json.Number:
		_, _, exp, ok := splitNumber(string(v))
		if !ok || len(v) > 64 || exp > 400 || exp < -400 {
			out = append(out, Problem{Path: jsonPointer(path...), Message: "number is out of range"})
		}
	}
	return out
}

// workflowProblems checks role and stage against the configured workflow,
// unless the schema already rejected them.
func workflowProblems(tree map[string]any, wf Workflow, found []Problem) []Problem {
	var out []Problem
	check := func(field string, configured []string, has func(string) bool) {
		name, ok := tree[field].(string)
		if !ok || has(name) || slices.ContainsFunc(found, func(p Problem) bool { return p.Path == "/"+field }) {
			return
		}
		out = append(out, Problem{
			Path:    "/" + field,
			Message: fmt.Sprintf("%s %q is not configured; configured %ss: %s", field, name, field, strings.Join(configured, ", ")),
		})
	}
	check("role", wf.Roles, wf.HasRole)
	check("stage", wf.Stages, wf.HasStage)
	return out
}

// schemaProblems flattens the validator's tree of errors to its leaves, the
// causes a writer can act on.
func schemaProblems(err error) []Problem {
	if err == nil {
		return nil
	}
	var verr *jsonschema.ValidationError
	if !errors.As(err, &verr) {
		return []Problem{{Message: "document could not be validated"}}
	}
	var out []Problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			out = append(out, leafProblems(e)...)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	return out
}

// patternMessages explains the schema's patterns in words; a test checks
// that every pattern in the schema has an entry.
var patternMessages = map[string]string{
	`^[A-Za-z0-9_.:-]{1,64}$`:                       "must be 1 to 64 characters of A-Z, a-z, 0-9, _ . : -",
	`^[a-z][a-z0-9_.-]{0,63}$`:                      "must be a lowercase letter followed by up to 63 of a-z, 0-9, _ . -",
	`^[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}$`: "must be owner/name, each 1 to 100 characters of A-Z, a-z, 0-9, _ . -",
	`^([0-9a-fA-F]{40}|[0-9a-fA-F]{64})$`:           "must be a full commit id: 40 or 64 hexadecimal digits",
	`^[^\x00-\x1F\x7F]*$`:                           "must not contain control characters",
}

// leafProblems turns one leaf error into problems. Messages are written
// here rather than taken from the validator because its messages quote the
// offending value, which may be a secret.
func leafProblems(e *jsonschema.ValidationError) []Problem {
	at := jsonPointer(e.InstanceLocation...)
	switch k := e.ErrorKind.(type) {
	case *kind.AdditionalProperties:
		out := make([]Problem, 0, len(k.Properties))
		for _, p := range k.Properties {
			out = append(out, Problem{Path: jsonPointer(append(slices.Clip(e.InstanceLocation), p)...), Message: "unknown field"})
		}
		return out
	case *kind.Required:
		out := make([]Problem, 0, len(k.Missing))
		for _, p := range k.Missing {
			out = append(out, Problem{Path: jsonPointer(append(slices.Clip(e.InstanceLocation), p)...), Message: "required field is missing"})
		}
		return out
	}
	return []Problem{{Path: at, Message: leafMessage(e.ErrorKind)}}
}

func leafMessage(ek jsonschema.ErrorKind) string {
	switch k := ek.(type) {
	case *kind.Type:
		return fmt.Sprintf("must be of type %s, not %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Const:
		return fmt.Sprintf("must be %v", k.Want)
	case *kind.Pattern:
		if m, ok := patternMessages[k.Want]; ok {
			return m
		}
		return fmt.Sprintf("must match the pattern %s", k.Want)
	case *kind.Format:
		if k.Want == "date-time" {
			return "must be an RFC 3339 date-time, e.g. 2026-03-01T12:00:00Z"
		}
		return "must be a valid " + k.Want
	case *kind.MinLength:
		return fmt.Sprintf("must be at least %d characters long", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("must be at most %d characters long (is %d)", k.Want, k.Got)
	case *kind.Minimum:
		return "must be at least " + k.Want.RatString()
	case *kind.Maximum:
		return "must be at most " + k.Want.RatString()
	case *kind.MaxItems:
		return fmt.Sprintf("must have at most %d items (has %d)", k.Want, k.Got)
	case *kind.MinItems:
		return fmt.Sprintf("must have at least %d items", k.Want)
	default:
		return fmt.Sprintf("fails the %q constraint", strings.Join(ek.KeywordPath(), "/"))
	}
}

// CheckpointSchema is the published checkpoint schema (CheckpointSchemaJSON)
// with w's roles and stages as the enums of role and stage: what this
// daemon accepts, so a client or a model knows them before its first
// write. It is what GET /v1/schema/checkpoint serves and the MCP tools
// announce. A w that Validate refuses (the zero Workflow) has no enums to
// give: the published schema as it is.
func (w Workflow) CheckpointSchema() []byte {
	if w.Validate() != nil {
		return CheckpointSchemaJSON
	}
	var doc map[string]any
	if err := json.Unmarshal(CheckpointSchemaJSON, &doc); err != nil {
		panic(fmt.Sprintf("checkpointd: the embedded schema: %v", err))
	}
	props := doc["properties"].(map[string]any)
	for name, values := range map[string][]string{"role": w.Roles, "stage": w.Stages} {
		p := props[name].(map[string]any)
		p["enum"] = values
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false) // the descriptions' <!-- … --> stay legible
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		panic(err)
	}
	return out.Bytes()
}

// WorkflowOfSchema reads the roles and stages back from a schema
// CheckpointSchema wrote (a daemon's GET /v1/schema/checkpoint); false
// when it names none, as a daemon that predates them serves.
func WorkflowOfSchema(doc []byte) (Workflow, bool) {
	var s struct {
		Properties struct {
			Role  struct{ Enum []string } `json:"role"`
			Stage struct{ Enum []string } `json:"stage"`
		} `json:"properties"`
	}
	if json.Unmarshal(doc, &s) != nil {
		return Workflow{}, false
	}
	w := Workflow{Roles: s.Properties.Role.Enum, Stages: s.Properties.Stage.Enum}
	return w, w.Validate() == nil
}
