package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/checkpointd/checkpointd"
	"github.com/checkpointd/checkpointd/api"
	"github.com/checkpointd/checkpointd/store/storetest"
)

// openAPIFile is the document in the repository; its $refs name the
// checkpoint schema file beside it.
const openAPIFile = "../docs/openapi.yaml"

// loadSpec loads and validates the repository's document once per test
// binary.
var loadSpec = sync.OnceValues(func() (*openapi3.T, error) {
	l := openapi3.NewLoader()
	l.IsExternalRefsAllowed = true
	doc, err := l.LoadFromFile(openAPIFile)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", openAPIFile, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("%s is not valid OpenAPI: %w", openAPIFile, err)
	}
	return doc, nil
})

func spec(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := loadSpec()
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// routePattern turns a chi pattern into the OpenAPI path it serves: a
// subrouter's "/" is the path of the subrouter itself.
func routePattern(p string) string {
	if len(p) > 1 {
		p = strings.TrimSuffix(p, "/")
	}
	return p
}

// documentedOps lists "METHOD /path" for every operation of doc.
func documentedOps(doc *openapi3.T) map[string]*openapi3.Operation {
	ops := map[string]*openapi3.Operation{}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			ops[method+" "+path] = op
		}
	}
	return ops
}

// TestOpenAPIRoutes: every routed method and path is documented, and every
// documented one is routed; each operation's x-checkpointd-role is the role
// the access matrix proves, and the public routes are the ones without a
// token.
func TestOpenAPIRoutes(t *testing.T) {
	doc := spec(t)
	h := api.New(api.Deps{Webhook: http.NotFoundHandler(), MetricsHandler: http.NotFoundHandler(), Workflow: checkpointd.DefaultWorkflow()})
	routed := map[string]bool{}
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+routePattern(route)] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedOps(doc)
	for op := range routed {
		if documented[op] == nil {
			t.Errorf("%s is routed but not documented in docs/openapi.yaml", op)
		}
	}
	for op := range documented {
		if !routed[op] {
			t.Errorf("%s is documented in docs/openapi.yaml but not routed", op)
		}
	}

	for _, a := range accessRoutes {
		op := documented[a.method+" "+routePattern(a.pattern)]
		if op == nil {
			continue // reported above
		}
		role, _ := op.Extensions["x-checkpointd-role"].(string)
		public := op.Security != nil && len(*op.Security) == 0
		switch {
		case a.need == "" && !public:
			t.Errorf("%s %s needs no token, but the document asks for one", a.method, a.pattern)
		case a.need != "" && string(a.need) != role:
			t.Errorf("%s %s needs role %s, the document says x-checkpointd-role %q", a.method, a.pattern, a.need, role)
		}
	}
}

// TestOpenAPIDocument: the document is valid OpenAPI 3.1 (loadSpec), every
// error answer is a problem document whose codes are in the catalogue,
// every operation behind a token documents 401 and 403, and the document
// the API serves resolves its references against the API itself.
func TestOpenAPIDocument(t *testing.T) {
	doc := spec(t)
	if !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi %s, want 3.1", doc.OpenAPI)
	}
	catalogue := problemCodes(doc.Components.Schemas["Problem"])
	for name, op := range documentedOps(doc) {
		if op.OperationID == "" {
			t.Errorf("%s has no operationId", name)
		}
		for status, resp := range op.Responses.Map() {
			if status < "400" {
				continue
			}
			mt := resp.Value.Content.Get("application/problem+json")
			if mt == nil {
				t.Errorf("%s %s: an error answer must be application/problem+json", name, status)
				continue
			}
			for code := range problemCodes(mt.Schema) {
				if !catalogue[code] {
					t.Errorf("%s %s: code %s is not in the Problem schema's catalogue", name, status, code)
				}
			}
		}
		if op.Security == nil && (op.Responses.Status(401) == nil || op.Responses.Status(403) == nil) {
			t.Errorf("%s needs a token but does not document 401 and 403", name)
		}
	}

	// Served: the $refs point at GET /v1/schema/checkpoint, relative to
	// the document's own URL, and resolve to the very bytes served there.
	storetest.Each(t, func(t *testing.T, b storetest.Backend) {
		h := newHarness(t, b)
		get := func(path string) []byte {
			return h.do("GET", path, "", nil).expect(t, 200, "").raw
		}
		l := openapi3.NewLoader()
		var fetched []string
		l.ReadFromURIFunc = func(_ *openapi3.Loader, u *url.URL) ([]byte, error) {
			fetched = append(fetched, u.Path)
			return get(u.Path), nil
		}
		sdoc, err := l.LoadFromDataWithPath(get("/v1/openapi.yaml"), &url.URL{Path: "/v1/openapi.yaml"})
		if err != nil {
			t.Fatalf("the served document does not load: %v", err)
		}
		if err := sdoc.Validate(t.Context()); err != nil {
			t.Fatalf("the served document is not valid: %v", err)
		}
		if !slices.Contains(fetched, "/v1/schema/checkpoint") {
			t.Errorf("the served document's references fetched %v, want /v1/schema/checkpoint", fetched)
		}
	})
	raw, err := os.ReadFile(openAPIFile)
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(checkpointd.OpenAPIYAML) {
		t.Errorf("the embedded document differs from %s", openAPIFile)
	}
}

// problemCodes returns the codes a problem schema allows: the intersection
// of every enum or const its code member is given, through allOf.
func problemCodes(s *openapi3.SchemaRef) map[string]bool {
	var sets []map[string]bool
	var walk func(s *openapi3.SchemaRef)
	walk = func(s *openapi3.SchemaRef) {
		if s == nil || s.Value == nil {
			return
		}
		if c := s.Value.Properties["code"]; c != nil && c.Value != nil {
			set := map[string]bool{}
			for _, v := range c.Value.Enum {
				set[fmt.Sprint(v)] = true
			}
			if c.Value.Const != nil {
				set[fmt.Sprint(c.Value.Const)] = true
			}
			if len(set) > 0 {
				sets = append(sets, set)
			}
		}
		for _, a := range s.Value.AllOf {
			walk(a)
		}
	}
	walk(s)
	if len(sets) == 0 {
		return nil
	}
	out := sets[0]
	for _, s := range sets[1:] {
		for c := range out {
			if !s[c] {
				delete(out, c)
			}
		}
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
