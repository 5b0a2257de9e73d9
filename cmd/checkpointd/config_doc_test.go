package main

import (
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// TestConfigurationDocumented walks the command tree: every flag of every
// command, with its environment variable, must appear in the section of
// docs/configuration.md headed by that command, and every flag the serve
// section documents must exist.
func TestConfigurationDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := docSections(string(raw))
	app := newApp(func(string) string { return "" }, io.Discard, io.Discard)

	var walk func(path string, c *cli.Command)
	walk = func(path string, c *cli.Command) {
		if len(c.Flags) > 0 {
			text, ok := section(sections, path)
			if !ok {
				t.Errorf("docs/configuration.md has no section headed `%s` (or by a parent command)", path)
			}
			for _, f := range c.Flags {
				name := "`--" + f.Names()[0] + "`"
				if ok && !strings.Contains(text, name) {
					t.Errorf("`%s`: flag %s is not in its section of docs/configuration.md", path, name)
				}
				if ef, isEnv := f.(interface{ GetEnvVars() []string }); isEnv {
					for _, v := range ef.GetEnvVars() {
						if ok && !strings.Contains(text, "`"+v+"`") {
							t.Errorf("`%s`: variable %s of %s is not in its section of docs/configuration.md", path, v, name)
						}
					}
				}
			}
		}
		for _, s := range c.Commands {
			walk(path+" "+s.Name, s)
		}
	}
	walk("checkpointd", app)

	serve := app.Command("serve")
	flagRow := regexp.MustCompile("(?m)^\\| `(--[a-z0-9-]+)`")
	for _, m := range flagRow.FindAllStringSubmatch(sections["checkpointd serve"], -1) {
		name := strings.TrimPrefix(m[1], "--")
		exists := false
		for _, f := range serve.Flags {
			exists = exists || f.Names()[0] == name
		}
		if !exists {
			t.Errorf("docs/configuration.md documents %s, which serve does not have", m[1])
		}
	}
	if len(serve.Flags) < 10 {
		t.Fatalf("serve has %d flags: the walk found the wrong command", len(serve.Flags))
	}
}

// section returns the section of path, else of its nearest parent command
// that has one (a group of subcommands may share a section).
func section(sections map[string]string, path string) (string, bool) {
	for p := path; ; {
		if text, ok := sections[p]; ok {
			return text, true
		}
		i := strings.LastIndex(p, " ")
		if i < 0 {
			return "", false
		}
		p = p[:i]
	}
}

// docSections maps "checkpointd CMD …" to the text under the heading that
// names it in backticks, up to the next heading.
func docSections(doc string) map[string]string {
	out := map[string]string{}
	heading := regexp.MustCompile("^#+ `(checkpointd[^`]*)`")
	current := ""
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(line, "#") {
			current = ""
			if m := heading.FindStringSubmatch(line); m != nil {
				current = m[1]
			}
			continue
		}
		if current != "" {
			out[current] += line + "\n"
		}
	}
	return out
}
