package client_test

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
)

// seen records every request the test daemons served, as "METHOD path".
var seen sync.Map

// recordRoutes wraps a daemon's handler to record what the client sent.
func recordRoutes(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Method+" "+r.URL.Path, true)
		h.ServeHTTP(w, r)
	})
}

// notClient are the documented operations the client leaves out: the
// forge's webhook, Prometheus, and the watch feed (added with its server).
var notClient = map[string]bool{"POST /webhooks/gitea": true, "GET /metrics": true, "GET /v1/watch": true}

// TestMain checks, after a full run, that the tests sent every operation
// of docs/openapi.yaml through the client: a route without a client
// method, or a method without a test, fails the run.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" {
		if missing := unexercised(); len(missing) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: documented operations no client test sent:\n  %s\n", strings.Join(missing, "\n  "))
			code = 1
		}
	}
	os.Exit(code)
}

var (
	pathLine   = regexp.MustCompile(`^  (/\S*):\s*$`)
	methodLine = regexp.MustCompile(`^    (get|post|put|patch|delete):`)
	param      = regexp.MustCompile(`\{[^}]+\}`)
)

func unexercised() []string {
	raw, err := os.ReadFile("../docs/openapi.yaml")
	if err != nil {
		return []string{err.Error()}
	}
	var ops []string
	var path string
	for _, line := range strings.Split(string(raw), "\n") {
		if m := pathLine.FindStringSubmatch(line); m != nil {
			path = m[1]
		} else if m := methodLine.FindStringSubmatch(line); m != nil && path != "" {
			ops = append(ops, strings.ToUpper(m[1])+" "+path)
		} else if line != "" && !strings.HasPrefix(line, " ") {
			path = "" // past the paths
		}
	}
	if len(ops) < 20 {
		return []string{fmt.Sprintf("only %d operations read from docs/openapi.yaml: the parser is out of date", len(ops))}
	}
	var missing []string
	for _, op := range ops {
		if notClient[op] {
			continue
		}
		// {id} and {seq} stand for one path segment.
		re := regexp.MustCompile("^" + param.ReplaceAllString(op, `[^/]+`) + "$")
		hit := false
		seen.Range(func(k, _ any) bool {
			hit = re.MatchString(k.(string))
			return !hit
		})
		if !hit {
			missing = append(missing, op)
		}
	}
	sort.Strings(missing)
	return missing
}
