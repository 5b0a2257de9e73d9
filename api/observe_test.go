package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/go-chi/chi/v5"
)

// Every request the api tests send goes through harness.serve, which notes
// the operation (method and route pattern), the status and the problem
// code of the answer. After the whole suite, TestMain fails the run if any
// answer is not documented for its operation in docs/openapi.yaml, and
// reports the bodies that do not fit their documented schema (a few of
// each kind of answer are validated, so the suite stays fast).

// TestMain runs the suite, then checks the answers it observed.
func TestMain(m *testing.M) {
	if url := os.Getenv(childDaemonEnv); url != "" {
		os.Exit(serveChildDaemon(url))
	}
	code := m.Run()
	if problems := observed.check(); len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "--- FAIL: docs/openapi.yaml does not describe %d answers the API gave in these tests:\n", len(problems))
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, "    "+p)
		}
		code = max(code, 1)
	} else if testing.Verbose() {
		fmt.Println(observed.summary())
	}
	os.Exit(code)
}

// bodiesPerAnswer is how many bodies of each (operation, status, code) are
// validated against their schema.
const bodiesPerAnswer = 20

// answer is one kind of response an operation gave.
type answer struct {
	op     string // "METHOD /pattern", or "" for a request no route serves
	status int
	code   string // the problem code; "" for a non-problem answer
}

func (a answer) String() string {
	op := a.op
	if op == "" {
		op = "(no route)"
	}
	if a.code != "" {
		return fmt.Sprintf("%s → %d %s", op, a.status, a.code)
	}
	return fmt.Sprintf("%s → %d", op, a.status)
}

type observer struct {
	mu        sync.Mutex
	seen      map[answer]string // → the first test that saw it
	validated map[answer]int
	invalid   []string

	validate sync.Mutex // one body validation at a time
}

var observed = &observer{seen: map[answer]string{}, validated: map[answer]int{}}

// serve sends r to the harness's handler and notes the answer.
func (h *harness) serve(w *httptest.ResponseRecorder, r *http.Request) {
	h.handler.ServeHTTP(w, r)
	observed.note(h.t.Name(), h.handler, r, w)
}

func (o *observer) note(test string, handler http.Handler, r *http.Request, w *httptest.ResponseRecorder) {
	mux, ok := handler.(*chi.Mux)
	if !ok {
		return
	}
	// HEAD is answered as GET; a 405 is answered by no route (a mounted
	// subrouter's root would seem to take every method).
	method := r.Method
	if method == http.MethodHead {
		method = http.MethodGet
	}
	var pattern string
	if w.Code != http.StatusMethodNotAllowed {
		pattern = routePattern(mux.Find(chi.NewRouteContext(), method, r.URL.Path))
	}
	a := answer{status: w.Code}
	if pattern != "" {
		a.op = method + " " + pattern
	}
	if mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type")); mt == "application/problem+json" {
		var p struct{ Code string }
		_ = json.Unmarshal(w.Body.Bytes(), &p)
		a.code = p.Code
		if a.code == "" {
			a.code = "(none)"
		}
	}
	o.mu.Lock()
	if _, ok := o.seen[a]; !ok {
		o.seen[a] = test
	}
	check := pattern != "" && r.Method != http.MethodHead && o.validated[a] < bodiesPerAnswer
	if check {
		o.validated[a]++
	}
	o.mu.Unlock()
	if check {
		if err := o.validateBody(r, pattern, w); err != nil {
			o.mu.Lock()
			o.invalid = append(o.invalid, fmt.Sprintf("%s in %s: the body does not fit the document: %v\n      body: %.400s",
				a, test, err, w.Body.Bytes()))
			o.mu.Unlock()
		}
	}
}

// validateBody checks a response's headers and, for JSON, its body against
// the operation's documented response.
func (o *observer) validateBody(r *http.Request, pattern string, w *httptest.ResponseRecorder) error {
	doc, err := loadSpec()
	if err != nil {
		return nil // TestOpenAPIDocument reports it
	}
	item := doc.Paths.Value(pattern)
	if item == nil || item.GetOperation(r.Method) == nil {
		return nil // check reports it
	}
	opts := &openapi3filter.Options{MultiError: true}
	// The reason and where, without the library's dump of schema and value.
	opts.WithCustomSchemaErrorFunc(func(e *openapi3.SchemaError) string {
		return "/" + strings.Join(e.JSONPointer(), "/") + ": " + e.Reason
	})
	switch mt, _, _ := mime.ParseMediaType(w.Header().Get("Content-Type")); mt {
	case "application/json", "application/problem+json", "":
	default:
		opts.ExcludeResponseBody = true
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, Options: opts,
			Route: &routers.Route{Spec: doc, Path: pattern, PathItem: item, Method: r.Method, Operation: item.GetOperation(r.Method)}},
		Status: w.Code, Header: w.Header(), Options: opts,
	}
	in.SetBodyBytes(w.Body.Bytes())
	o.validate.Lock()
	defer o.validate.Unlock()
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// documented is an operation's documented answers: status → the problem
// codes it may carry (nil for an answer that is not a problem document).
type documented map[int]map[string]bool

func documentedAnswers(doc *openapi3.T) map[string]documented {
	out := map[string]documented{}
	for name, op := range documentedOps(doc) {
		d := documented{}
		for status, resp := range op.Responses.Map() {
			n, err := strconv.Atoi(status)
			if err != nil {
				continue
			}
			d[n] = nil
			if mt := resp.Value.Content.Get("application/problem+json"); mt != nil {
				d[n] = problemCodes(mt.Schema)
				if d[n] == nil {
					d[n] = map[string]bool{}
				}
			}
		}
		out[name] = d
	}
	return out
}

// check returns every observed answer the document does not describe, and
// every body that did not fit.
func (o *observer) check() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.seen) == 0 {
		return nil
	}
	doc, err := loadSpec()
	if err != nil {
		return []string{err.Error()}
	}
	docs := documentedAnswers(doc)
	var out []string
	for a, test := range o.seen {
		if a.op == "" {
			if !(a.status == 404 && a.code == "not_found") && !(a.status == 405 && a.code == "method_not_allowed") {
				out = append(out, fmt.Sprintf("%s in %s: a request no route serves must answer 404 not_found or 405 method_not_allowed", a, test))
			}
			continue
		}
		d, ok := docs[a.op]
		switch codes, documentedStatus := d[a.status]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s in %s: the operation is not documented", a, test))
		case !documentedStatus:
			out = append(out, fmt.Sprintf("%s in %s: status %d is not documented for the operation", a, test, a.status))
		case a.code == "" && codes != nil:
			out = append(out, fmt.Sprintf("%s in %s: documented as a problem document, answered without one", a, test))
		case a.code != "" && !codes[a.code]:
			out = append(out, fmt.Sprintf("%s in %s: code %s is not documented for status %d", a, test, a.code, a.status))
		}
	}
	sort.Strings(out)
	return append(out, o.invalid...)
}

// summary says how much of the document the suite exercised.
func (o *observer) summary() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	doc, err := loadSpec()
	if err != nil {
		return err.Error()
	}
	total, hit := 0, 0
	seen := map[string]map[int]bool{}
	for a := range o.seen {
		if seen[a.op] == nil {
			seen[a.op] = map[int]bool{}
		}
		seen[a.op][a.status] = true
	}
	var missing []string
	for _, op := range sortedKeys(documentedAnswers(doc)) {
		for status := range documentedAnswers(doc)[op] {
			total++
			if seen[op][status] {
				hit++
			} else {
				missing = append(missing, fmt.Sprintf("%s %d", op, status))
			}
		}
	}
	sort.Strings(missing)
	return fmt.Sprintf("openapi: the tests observed %d of %d documented (operation, status) answers; not observed: %v", hit, total, missing)
}
