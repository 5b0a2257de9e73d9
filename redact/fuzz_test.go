package redact

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzRedactString checks the redactor's invariants on arbitrary input: no
// panic, valid UTF-8 out, idempotence, and Tree agreeing with
// String. On the corpus seeds themselves the planted secret must be
// gone.
func FuzzRedactString(f *testing.F) {
	seedSecrets := map[string]string{}
	for _, c := range loadSecrets(f) {
		seedSecrets[c.text] = c.secret
		f.Add(c.text)
		f.Add(c.secret)
	}
	looks, _ := corpusLines(f, "lookalikes.txt")
	for _, l := range looks {
		f.Add(l)
	}
	for _, s := range []string{
		"", "[REDACTED:", "[REDACTED:x]", "https://:@", "password:", `"token": "`, `\"password\": \"x`,
		"-----BEGIN RSA PRIVATE KEY-----", "Authorization: token", "bearer ", "sk-", "xoxb-", "ghp_", "eyJ.eyJ.",
		"a=b=c", "::=", "--token --password x", "password: {[\"a\"", "\xff", "token=\xc3",
		"https%3A%2F%2Fa%3Ab%40c", "s%3a//a%3ab%40c%2f", "%26token%3Dx%26", "%3Fkey%3D",
		"pwd=x", "mysql -px", "mysql -p x", "sshpass -p x", "docker login -p x", "redis-cli -a x",
		"the password is Sup3rS3cret1", "password: x1234567", "set GITEA_TOKEN to x", "aws_secret_access_key x",
		"npm_", "hf_", "AIza",
		// Regressions: inputs that once redacted differently on a second pass.
		"-u pAssw0=0",
		"https://[REDACTED:gitea_token]@git.example.com",
		"-u AKIAIOSFODNN7EXAMPLE,AKIAIOSFODNN7EXAMPLE://GITEA_TOKEN",
		"-u -----BEGIN RSA PRIVATE KEY-----sk-sid=-----END RSA PRIVATE KEY-----://api_keyses_0190f5a2c7d47b8e9a1b2c3d4e5f607112345",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, n, err := String(s)
		if !utf8.ValidString(s) {
			if !errors.Is(err, ErrUnredactable) || out != "" || n != 0 {
				t.Fatalf("invalid UTF-8: got %q, %d, %v", out, n, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("String(%q): %v", s, err)
		}
		if !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q: not valid UTF-8", s, out)
		}
		if (n == 0) != (out == s) {
			t.Fatalf("String(%q) = %q, %d: count and change disagree", s, out, n)
		}
		again, n2, err := String(out)
		if err != nil || again != out || n2 != 0 {
			t.Fatalf("not idempotent:\nin:     %q\nfirst:  %q\nsecond: %q (%d, %v)", s, out, again, n2, err)
		}
		tree, tn, err := Tree(map[string]any{"note": s, "items": []any{s}})
		if err != nil || tn != 2*n || tree.(map[string]any)["note"] != out {
			t.Fatalf("Tree disagrees with String on %q: %v, %d, %v", s, tree, tn, err)
		}
		if secret, ok := seedSecrets[s]; ok && strings.Contains(out, secret) {
			t.Fatalf("seed secret survived: %q", out)
		}
	})
}
