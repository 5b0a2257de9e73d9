package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve proves every relative link of the README and of
// docs/*.md names a file of the repository (the repository stands alone)
// and, with #anchor, a heading of that file: a renamed section breaks a
// test, not a reader's way to the step they were sent to.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for _, doc := range append(docs, filepath.Join(root, "README.md")) {
		raw, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, doc)
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := doc
			if file != "" {
				path = filepath.Join(filepath.Dir(doc), file)
			}
			if r, err := filepath.Rel(root, path); err != nil || strings.HasPrefix(r, "..") {
				t.Errorf("%s links %s, outside the repository", rel, target)
				continue
			}
			body, err := os.ReadFile(path)
			if err != nil {
				t.Errorf("%s links %s: %v", rel, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !headingAnchors(string(body))[anchor] {
				t.Errorf("%s links %s: no heading of %s has the anchor #%s", rel, target, filepath.Base(path), anchor)
			}
		}
	}
}

// headingAnchors are the anchors a markdown renderer gives the headings
// of doc: lower case, punctuation dropped, spaces as hyphens.
func headingAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inCode = !inCode
		}
		if inCode || !strings.HasPrefix(line, "#") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#"))) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}
