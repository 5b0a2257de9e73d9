package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v3"
	"go.yaml.in/yaml/v4"

	"github.com/checkpointd/checkpointd/client"
)

// The commands that talk to a running daemon do it through package client
// (issue #15): typed answers, problem answers as *client.Error, retries
// only where a repeat cannot act twice. What is left here is how a person
// names the daemon and the token (--url, --token, <data-dir>/operator.token)
// and how a failure is told to them.

// Which token a command needs, as its error message says when none is found.
const (
	needOperator = "an operator token"
	needReader   = "a reader or operator token"
)

// newOperatorClient is a client for a command that acts (drain, park, end,
// release, drop, reconcile): the operator token, by default the bootstrap
// one in the data directory.
func newOperatorClient(c *cli.Command) (*client.Client, error) {
	return newClient(c, needOperator)
}

// newReaderClient is a client for a command that only reads: a reader
// token is enough, and the bootstrap operator token is the fallback.
func newReaderClient(c *cli.Command) (*client.Client, error) {
	return newClient(c, needReader)
}

func newClient(c *cli.Command, need string) (*client.Client, error) {
	token, err := clientToken(c, need)
	if err != nil {
		return nil, err
	}
	return clientFor(c, token, c.Duration("request-timeout"))
}

// clientFor is a client of --url with token; timeout (0: none) bounds each
// request, retries included in none of it: each try has its own.
func clientFor(c *cli.Command, token string, timeout time.Duration) (*client.Client, error) {
	base := strings.TrimRight(c.String("url"), "/")
	cfg := client.Config{Address: base, Token: token, UserAgent: "checkpointd-cli/" + version()}
	if timeout > 0 {
		cfg.HTTPClient = &http.Client{Timeout: timeout}
	}
	cl, err := client.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("--url %q: want http(s)://host:port", base)
	}
	return cl, nil
}

// clientToken is --token (or CHECKPOINTD_TOKEN), else the bootstrap
// operator token in the data directory; need says, when there is none,
// which token the command takes.
func clientToken(c *cli.Command, need string) (string, error) {
	if t := strings.TrimSpace(c.String("token")); t != "" {
		return t, nil
	}
	path := filepath.Join(c.String("data-dir"), "operator.token")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s is required: --token, CHECKPOINTD_TOKEN or %s (%v)", need, path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// apiError tells a person why a call failed and what to do next: what
// (the command's words), the status with the problem code and the
// daemon's detail, and a hint for the answers a person can fix (a token
// refused, a role too weak, a daemon not reachable). It never repeats the
// client's own "checkpointd:" prefix: main prints that once.
func apiError(what string, err error) error {
	var pe *client.Error
	var te *client.TransportError
	switch {
	case errors.As(err, &pe):
		return fmt.Errorf("%s: %s%s", what, describeProblem(pe), problemHint(pe))
	case errors.As(err, &te):
		return fmt.Errorf("%s: cannot reach the daemon (%s %s): %v; is it running, and is --url (CHECKPOINTD_URL) its address?",
			what, te.Method, te.Path, te.Err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// describeProblem is "404 not_found: detail", with the problems by path
// when the daemon gave no detail.
func describeProblem(pe *client.Error) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d", pe.Status)
	if pe.Code != "" {
		b.WriteString(" " + pe.Code)
	}
	if d := withoutCode(pe.Detail, pe.Code); d != "" {
		b.WriteString(": " + d)
	} else {
		for _, p := range pe.Problems {
			fmt.Fprintf(&b, "; %s: %s", p.Path, p.Message)
		}
	}
	return b.String()
}

// withoutCode is a problem's detail without the code it begins with
// ("forbidden: …", "not found: …"), which describeProblem has just said:
// no "403 forbidden: forbidden: …".
func withoutCode(detail, code string) string {
	for _, prefix := range []string{code + ": ", strings.ReplaceAll(code, "_", " ") + ": "} {
		if code != "" && strings.HasPrefix(strings.ToLower(detail), prefix) {
			return detail[len(prefix):]
		}
	}
	return detail
}

func problemHint(pe *client.Error) string {
	switch pe.Status {
	case http.StatusUnauthorized:
		return " (the daemon did not accept the token: check --token or CHECKPOINTD_TOKEN)"
	case http.StatusForbidden:
		if strings.Contains(pe.Detail, "operator role") {
			return " (use an operator token: --token, CHECKPOINTD_TOKEN or <data-dir>/operator.token)"
		}
		if strings.Contains(pe.Detail, "agent role") {
			return " (use an agent or operator token)"
		}
	}
	return ""
}

// isCode reports whether err is a problem answer with code.
func isCode(err error, code string) bool {
	var pe *client.Error
	return errors.As(err, &pe) && pe.Code == code
}

// outputFormats are kubectl's -o words: table (for a person, the
// default), wide (every column), and for scripts json, yaml (the daemon's
// answer as it sent it) and name (kind/id, one a line).
var outputFormats = []string{"table", "wide", "json", "yaml", "name"}

// outputFlag is -o, beside --json (which -o json says too). Each command
// gets its own: the library keeps a flag's parsed state in it.
func outputFlag() cli.Flag {
	return &cli.StringFlag{Name: "output", Aliases: []string{"o"}, Usage: "table, wide, json, yaml or name",
		Validator: func(v string) error {
			if !slices.Contains(outputFormats, v) {
				return fmt.Errorf("-o %q: want table, wide, json, yaml or name", v)
			}
			return nil
		}}
}

// outputOf is the command's output format: -o, or json for --json.
func outputOf(c *cli.Command) string {
	if c.Bool("json") {
		return "json"
	}
	return cmp.Or(c.String("output"), "table")
}

// forScripts says whether the command prints the daemon's answer (json,
// yaml, name) rather than a person's view.
func forScripts(c *cli.Command) bool {
	switch outputOf(c) {
	case "json", "yaml", "name":
		return true
	}
	return false
}

// streamOutput refuses the formats a stream of objects has no form for:
// events and watch print a line for a person, or a JSON object a line.
func streamOutput(c *cli.Command) error {
	switch outputOf(c) {
	case "yaml", "name":
		return argError(c, "-o "+outputOf(c)+": this command prints a stream; -o json prints one JSON object a line")
	}
	return nil
}

// printAnswer prints an answer of the daemon in the command's format.
func printAnswer(c *cli.Command, w io.Writer, raw []byte) error {
	return printAs(outputOf(c), w, raw)
}

// printAs prints an answer of the daemon as json (indented), yaml, or
// name: kind/id of the items of a list, else of the answer's objects.
func printAs(format string, w io.Writer, raw []byte) error {
	switch format {
	case "yaml":
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return fmt.Errorf("the daemon answered no JSON: %w", err)
		}
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	case "name":
		var answer map[string]json.RawMessage
		if err := json.Unmarshal(raw, &answer); err != nil {
			return fmt.Errorf("the daemon answered no JSON object: %w", err)
		}
		var objs []json.RawMessage
		if items, ok := answer["items"]; ok {
			_ = json.Unmarshal(items, &objs)
		} else {
			for _, k := range slices.Sorted(maps.Keys(answer)) {
				objs = append(objs, answer[k])
			}
		}
		for _, o := range objs {
			var id struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(o, &id) == nil && id.ID != "" {
				if _, err := fmt.Fprintln(w, kindOf(id.ID)+"/"+id.ID); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return printJSON(w, raw)
}

// kindOf names what an id is by its prefix, as -o name prints it.
func kindOf(id string) string {
	prefix, _, _ := strings.Cut(id, "_")
	if k, ok := map[string]string{"ses": "session", "run": "run", "tok": "token", "lse": "lease", "drn": "drain",
		"rec": "reconcile", "rep": "replica"}[prefix]; ok {
		return k
	}
	return prefix
}

// printJSON prints an answer of the daemon as it sent it, indented.
func printJSON(w io.Writer, raw []byte) error {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return fmt.Errorf("the daemon answered no JSON: %w", err)
	}
	_, err := fmt.Fprintln(w, out.String())
	return err
}
